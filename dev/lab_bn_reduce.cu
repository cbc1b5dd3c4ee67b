// lab_bn_reduce — the NHWC per-channel reductions of BatchNorm (src/cuda/reduce.cuh's nred_part_kernel, the
// library's own kernel, included as it is) timed with each thread loading U rows before it sums them, U = 1, 2, 4
// and 8, on the channel counts and rows of the benchmark nets' BatchNorms (res at batch 512, the U-Net at 64).
//
// Why: on the H200 (bench/kernels.py, 2026-12-02) res's statistics pass moved its 352 MB a step at about 2 TB/s and
// the backward's sums their 704 MB at 2.2 TB/s, where the apply passes reach 3.3. With one row a time a thread has
// 16 bytes in flight; at the kernel's 60-90 registers an SM holds 1024-1280 threads, 16-20 KB, short of what the
// memory needs to stay busy.
//
// For every case: the partial sums of each U checked bit for bit against U = 1's (the order of the sums does not
// change with U), and U = 1's against float64 sums on the host (each block's rows); then µs a call (median of 15
// graph replays of 20 calls) and GB/s over the bytes the kernel reads.
//
// Not part of the build:
//   nvcc -O3 -arch=sm_90 -std=c++17 -I src -I include dev/lab_bn_reduce.cu -o /tmp/lab_bn_reduce && /tmp/lab_bn_reduce
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#include "../src/cuda/reduce.cuh"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static unsigned long long rng_state = 0x9e3779b97f4a7c15ull;
static float urand() { // [0, 1)
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng_state >> 40) & 0xffffff) / 16777216.0f;
}

struct Case { const char *net; size_t N; int C; };
static const Case cases[] = {
  {"res 32x32", 512ull * 32 * 32, 64}, {"res 16x16", 512ull * 16 * 16, 128}, {"res 8x8", 512ull * 8 * 8, 256},
  {"unet 64x84", 64ull * 64 * 84, 32}, {"unet 32x42", 64ull * 32 * 42, 64}, {"unet 16x21", 64ull * 16 * 21, 128},
};

template <typename T> static T from_f(float v);
template <> lam_f16 from_f<lam_f16>(float v) { return __float2half_rn(v); }
template <> lam_bf16 from_f<lam_bf16>(float v) { return __float2bfloat16_rn(v); }
template <typename T> static float to_f(T v);
template <> float to_f<lam_f16>(lam_f16 v) { return __half2float(v); }
template <> float to_f<lam_bf16>(lam_bf16 v) { return __bfloat162float(v); }

enum { MODES = 3 };
static const char *mode_name[MODES] = {"stats (bn fwd)", "bwd, relu from z", "bwd, relu from y (residual)"};

template <typename T, int MODE, int ACT, int U>
static float run(const nred_args &r, const chan_grid &g, float *part, std::vector<float> &out, size_t parts) {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  nred_part_kernel<T, 8, MODE, ACT, U><<<dim3(g.S, g.groups), NT, 0, st>>>(r, g.TX, g.TY, part);
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(st));
  out.resize(parts);
  CK(cudaMemcpy(out.data(), part, parts * sizeof(float), cudaMemcpyDeviceToHost));
  cudaGraph_t gr;
  cudaGraphExec_t gx;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < 20; i++) nred_part_kernel<T, 8, MODE, ACT, U><<<dim3(g.S, g.groups), NT, 0, st>>>(r, g.TX, g.TY, part);
  CK(cudaStreamEndCapture(st, &gr));
  CK(cudaGraphInstantiate(&gx, gr, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int k = 0; k < 16; k++) {
    CK(cudaEventRecord(e0, st));
    CK(cudaGraphLaunch(gx, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (k) t.push_back(ms * 1000.0f / 20);
  }
  std::sort(t.begin(), t.end());
  cudaGraphExecDestroy(gx), cudaGraphDestroy(gr), cudaEventDestroy(e0), cudaEventDestroy(e1), cudaStreamDestroy(st);
  return t[t.size() / 2];
}

template <typename T> static int run_type(const char *tname) {
  int bad = 0;
  for (const Case &cs : cases) {
    const size_t N = cs.N, n = N * cs.C;
    const int C = cs.C, V = 8;
    std::vector<T> hx(n), hg(n), hy(n);
    std::vector<float> mean(C), invstd(C), gamma(C), beta(C);
    for (int c = 0; c < C; c++)
      mean[c] = urand() - 0.5f, invstd[c] = 0.5f + urand(), gamma[c] = 0.5f + urand(), beta[c] = urand() - 0.5f;
    for (size_t i = 0; i < n; i++) {
      const int c = (int)(i % C);
      hx[i] = from_f<T>(4.0f * urand() - 2.0f), hg[i] = from_f<T>(2.0f * urand() - 1.0f);
      const float z = (to_f(hx[i]) - mean[c]) * invstd[c] * gamma[c] + beta[c] + (urand() - 0.5f);
      hy[i] = from_f<T>(z > 0.0f ? z : 0.0f); // a residual's relu output: its own mask
    }
    T *x, *dy, *y;
    float *dm, *dis, *dgm, *dbt, *part;
    CK(cudaMalloc(&x, n * sizeof(T)));
    CK(cudaMalloc(&dy, n * sizeof(T)));
    CK(cudaMalloc(&y, n * sizeof(T)));
    CK(cudaMalloc(&dm, C * 4));
    CK(cudaMalloc(&dis, C * 4));
    CK(cudaMalloc(&dgm, C * 4));
    CK(cudaMalloc(&dbt, C * 4));
    CK(cudaMalloc(&part, NHWC_PART_FLOATS * sizeof(float)));
    CK(cudaMemcpy(x, hx.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dy, hg.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(y, hy.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dm, mean.data(), C * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dis, invstd.data(), C * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dgm, gamma.data(), C * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dbt, beta.data(), C * 4, cudaMemcpyHostToDevice));
    const size_t room = (NHWC_PART_FLOATS - 2 * (size_t)C) / (2 * (size_t)C);
    const chan_grid g = chan_grid_for(N, C / V, 1024, 64, room);
    const size_t parts = (size_t)C * g.S * 2;
    printf("%s %-10s N %7zu C %3d (%6.1f MB a tensor), %d x %d blocks of %d x %d threads\n", tname, cs.net, N, C,
           n * sizeof(T) / 1e6, g.S, g.groups, g.TX, g.TY);
    for (int mode = 0; mode < MODES; mode++) {
      nred_args r;
      memset(&r, 0, sizeof r);
      r.N = N, r.C = C, r.x = x, r.dy = dy, r.y = y, r.mean = dm, r.invstd = dis, r.gamma = dgm, r.beta = dbt;
      r.alpha = 0.0f, r.zt = 0.0f; // z > 0 passes: the f32 bound, so the host reference below needs no rounding
      std::vector<float> p[4];
      float us[4];
#define RUN(Uv, k)                                                                                         \
  us[k] = mode == 0   ? run<T, NR_STATS, BN_ACT_NONE, Uv>(r, g, part, p[k], parts)                        \
          : mode == 1 ? run<T, NR_BWD, BN_ACT_RELU_Z, Uv>(r, g, part, p[k], parts)                        \
                      : run<T, NR_BWD, LAM_ACT_RELU, Uv>(r, g, part, p[k], parts)
      RUN(1, 0);
      RUN(2, 1);
      RUN(4, 2);
      RUN(8, 3);
#undef RUN
      // U = 1 against float64 sums of each block's rows (the first 4 blocks of channel group 0, every channel)
      double worst = 0.0;
      for (int s = 0; s < std::min(g.S, 4); s++) {
        const size_t r0 = N * s / g.S, r1 = N * (s + 1) / g.S;
        for (int c = 0; c < C; c++) {
          double a = 0.0, b = 0.0, scale = 0.0;
          const double K = mode == 0 ? to_f(hx[c]) : 0.0;
          for (size_t row = r0; row < r1; row++) {
            const size_t i = row * C + c;
            const double xv = to_f(hx[i]);
            double gv = to_f(hg[i]);
            if (mode == 1) {
              const float zf = (to_f(hx[i]) - mean[c]) * (invstd[c] * gamma[c]) + beta[c];
              gv = zf > 0.0f ? gv : 0.0;
            } else if (mode == 2) gv = to_f(hy[i]) > 0.0f ? gv : 0.0;
            if (mode == 0) a += xv - K, b += (xv - K) * (xv - K), scale += fabs(xv - K) + (xv - K) * (xv - K);
            else {
              const double xh = (xv - mean[c]) * invstd[c];
              a += gv, b += gv * xh, scale += fabs(gv) + fabs(gv * xh);
            }
          }
          const size_t k = ((size_t)c * g.S + s) * 2;
          const double e = (fabs(p[0][k] - a) + fabs(p[0][k + 1] - b)) / (scale > 0 ? scale : 1.0);
          worst = std::max(worst, e);
        }
      }
      int same[4] = {1, 1, 1, 1};
      for (int k = 1; k < 4; k++) same[k] = !memcmp(p[k].data(), p[0].data(), parts * sizeof(float));
      const int good = worst < 1e-5 && same[1] && same[2] && same[3];
      bad |= !good;
      const double bytes = (double)n * sizeof(T) * (mode == 0 ? 1 : mode == 1 ? 2 : 3);
      printf("  %-28s U=1 %7.1f us %5.0f GB/s | U=2 %7.1f %5.0f | U=4 %7.1f %5.0f | U=8 %7.1f %5.0f  err %.1e, U>1 %s  %s\n",
             mode_name[mode], us[0], bytes / us[0] / 1e3, us[1], bytes / us[1] / 1e3, us[2], bytes / us[2] / 1e3, us[3],
             bytes / us[3] / 1e3, worst, same[1] && same[2] && same[3] ? "bit for bit" : "DIFFER", good ? "ok" : "FAILED");
    }
    cudaFree(x), cudaFree(dy), cudaFree(y), cudaFree(dm), cudaFree(dis), cudaFree(dgm), cudaFree(dbt), cudaFree(part);
  }
  return bad;
}

int main() {
  cudaDeviceProp pr;
  CK(cudaGetDeviceProperties(&pr, 0));
  printf("lab_bn_reduce: %s, %d SMs; nred_part_kernel (src/cuda/reduce.cuh), µs a call (median of 15 graph replays of 20)\n",
         pr.name, pr.multiProcessorCount);
  int bad = run_type<lam_f16>("fp16") | run_type<lam_bf16>("bf16");
  printf("\n%s\n", bad ? "lab_bn_reduce: a check FAILED" : "lab_bn_reduce: every check passed");
  return bad;
}
