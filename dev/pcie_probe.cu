// pcie_probe.cu — the copy floors under lamina's host-array path, measured on this machine: host->device
// and device->host alone (one big copy, and in chunks over several streams), both directions at once,
// and a device-to-device copy. Build: nvcc -O3 -arch=sm_90 -o pcie_probe pcie_probe.cu
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s (line %d)\n", #x, cudaGetErrorString(e), __LINE__); exit(1); } } while (0)

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main() {
  const size_t in_bytes = 800u << 20, out_bytes = 400u << 20; // ~ f32 greys+weights in, f32 out at n=100M
  char *h_in, *h_out, *d_in, *d_out, *d_a, *d_b;
  CK(cudaHostAlloc(&h_in, in_bytes, 0)); CK(cudaHostAlloc(&h_out, out_bytes, 0));
  CK(cudaMalloc(&d_in, in_bytes)); CK(cudaMalloc(&d_out, out_bytes));
  CK(cudaMalloc(&d_a, 1u << 30)); CK(cudaMalloc(&d_b, 1u << 30));
  for (size_t i = 0; i < in_bytes; i += 4096) h_in[i] = (char)i;
  for (size_t i = 0; i < out_bytes; i += 4096) h_out[i] = (char)i;
  cudaStream_t s[8]; for (auto &x : s) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  auto timeit = [&](auto fn) { std::vector<float> t; for (int r = 0; r < 13; r++) { CK(cudaDeviceSynchronize());
      CK(cudaEventRecord(e0, s[0])); for (int i = 1; i < 8; i++) CK(cudaStreamWaitEvent(s[i], e0, 0)); fn();
      for (int i = 1; i < 8; i++) { cudaEvent_t ev; CK(cudaEventCreate(&ev)); CK(cudaEventRecord(ev, s[i])); CK(cudaStreamWaitEvent(s[0], ev, 0)); CK(cudaEventDestroy(ev)); }
      CK(cudaEventRecord(e1, s[0])); CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); if (r >= 3) t.push_back(ms); }
    return median(t); };
  float ms;
  ms = timeit([&] { CK(cudaMemcpyAsync(d_in, h_in, in_bytes, cudaMemcpyHostToDevice, s[0])); });
  printf("H2D one copy   %4zu MiB: %7.3f ms  %5.1f GB/s\n", in_bytes >> 20, ms, in_bytes / ms / 1e6);
  ms = timeit([&] { CK(cudaMemcpyAsync(h_out, d_out, out_bytes, cudaMemcpyDeviceToHost, s[0])); });
  printf("D2H one copy   %4zu MiB: %7.3f ms  %5.1f GB/s\n", out_bytes >> 20, ms, out_bytes / ms / 1e6);
  ms = timeit([&] { CK(cudaMemcpyAsync(d_in, h_in, in_bytes, cudaMemcpyHostToDevice, s[0]));
                    CK(cudaMemcpyAsync(h_out, d_out, out_bytes, cudaMemcpyDeviceToHost, s[1])); });
  printf("H2D %zu MiB + D2H %zu MiB at once: %7.3f ms\n", in_bytes >> 20, out_bytes >> 20, ms);
  ms = timeit([&] { CK(cudaMemcpyAsync(d_in, h_in, out_bytes / 4, cudaMemcpyHostToDevice, s[0]));
                    CK(cudaMemcpyAsync(h_out, d_out, out_bytes, cudaMemcpyDeviceToHost, s[1])); });
  printf("H2D %zu MiB + D2H %zu MiB at once: %7.3f ms  (the u8 case)\n", (out_bytes / 4) >> 20, out_bytes >> 20, ms);
  for (size_t chunk : {4u << 20, 16u << 20, 64u << 20}) {
    ms = timeit([&] { for (size_t o = 0, k = 0; o < out_bytes; o += chunk, k++)
        CK(cudaMemcpyAsync(h_out + o, d_out + o, std::min(chunk, out_bytes - o), cudaMemcpyDeviceToHost, s[k % 4])); });
    printf("D2H in %3zu MiB chunks over 4 streams: %7.3f ms  %5.1f GB/s\n", chunk >> 20, ms, out_bytes / ms / 1e6);
  }
  ms = timeit([&] { CK(cudaMemcpyAsync(d_b, d_a, 1u << 30, cudaMemcpyDeviceToDevice, s[0])); });
  printf("D2D 1 GiB: %7.3f ms  %5.0f GB/s (read + write)\n", ms, 2.0 * (1u << 30) / ms / 1e6);
  return 0;
}
