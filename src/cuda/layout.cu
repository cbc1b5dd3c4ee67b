/* layout.cu — the CUDA twins of the layout primitives (prims.h; CPU versions in cpu/layout.c under the same
 * names): convert between formats (a retype, or a transpose through shared memory), tcat, copy_rows, add, zero
 * and poison. */
#include <stdint.h>

#include "cuda.h"
#include "kernels.cuh"
#include "vec.cuh"

/* ---- convert: (B, C, P) between layouts and types. Same layout: elementwise; NCHW <-> NHWC: a transpose of
 * each sample's (C, P) through 32 x 32 tiles in shared memory, both sides coalesced. ---- */

template <typename S, typename D> __global__ void retype_kernel(size_t n, const S *src, D *dst) {
  GRID_STRIDE(size_t, i, n) tput(dst, i, tget(src, i));
}

/* Sample b = blockIdx.z: src (R, Q) -> dst (Q, R), R rows of Q (NCHW -> NHWC: R = C, Q = P). */
template <typename S, typename D>
__global__ void transpose_kernel(int R, int Q, const S *__restrict__ src, D *__restrict__ dst) {
  __shared__ float tile[32][33];
  const size_t base = (size_t)blockIdx.z * R * Q;
  const int q0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int r = r0 + k, q = q0 + threadIdx.x;
    if (r < R && q < Q) tile[k][threadIdx.x] = tget(src, base + (size_t)r * Q + q);
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int q = q0 + k, r = r0 + threadIdx.x;
    if (r < R && q < Q) tput(dst, base + (size_t)q * R + r, tile[threadIdx.x][k]);
  }
}

template <typename S, typename D>
static void convert_launch(cuda_state *st, int B, int C, int P, int transpose, int to_nhwc, const void *src, void *dst) {
  if (!transpose) {
    const size_t n = (size_t)B * C * P;
    retype_kernel<S, D><<<blocks_for(n), NT, 0, st->stream>>>(n, (const S *)src, (D *)dst);
    return;
  }
  const int R = to_nhwc ? C : P, Q = to_nhwc ? P : C;
  dim3 grid((unsigned)((Q + 31) / 32), (unsigned)((R + 31) / 32), (unsigned)B);
  transpose_kernel<S, D><<<grid, dim3(32, 8), 0, st->stream>>>(R, Q, (const S *)src, (D *)dst);
}

lam_status cuda_convert(lam_ctx *ctx, int B, int C, int P, lam_fmt fs, const void *src, lam_fmt fd,
                                   void *dst) {
  cuda_state *st = cuda_st(ctx);
  if (B <= 0 || C <= 0 || P <= 0) return LAM_OK;
  const int transpose = fs.nhwc != fd.nhwc && C > 1 && P > 1;
  const int R = fd.nhwc ? C : P; /* the transpose's rows: gridDim.y */
  if (transpose && ((R + 31) / 32 > 65535 || B > 65535))
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "convert: %d x %d x %d is beyond the transpose's grid", B, C, P);
  if (!transpose && fs.dt == fd.dt) {
    CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)B * C * P * lam_dt_size(fs.dt), cudaMemcpyDeviceToDevice, st->stream));
    return LAM_OK;
  }
  LAM_DT_DISPATCH(fs.dt, S, LAM_DT_DISPATCH(fd.dt, D, convert_launch<S, D>(st, B, C, P, transpose, fd.nhwc, src, dst)));
  LAUNCH_CHECK(st, transpose ? "transpose_kernel" : "retype_kernel");
  return LAM_OK;
}

lam_status cuda_zero(lam_ctx *ctx, void *p, size_t bytes) {
  CUDA_TRY(cudaMemsetAsync(p, 0, bytes, cuda_st(ctx)->stream));
  return LAM_OK;
}

lam_status cuda_poison(lam_ctx *ctx, void *p, size_t bytes) {
  CUDA_TRY(cudaMemsetAsync(p, 0xFF, bytes, cuda_st(ctx)->stream));
  return LAM_OK;
}

/* Thread per V values; y may be a or b. */
template <typename T, int V> __global__ void add_kernel(size_t n, const T *a, const T *b, T *y) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float u[V], v[V];
    tload<T, V>(u, a, i);
    tload<T, V>(v, b, i);
#pragma unroll
    for (int q = 0; q < V; q++) u[q] += v[q];
    tstore<T, V>(y, i, u);
  }
}

lam_status cuda_add(lam_ctx *ctx, lam_fmt f, size_t n, const void *a, const void *b, void *y) {
  cuda_state *st = cuda_st(ctx);
  const int V = (int)(16 / lam_dt_size(f.dt));
  const bool vec = n % V == 0 && aligned16(a) && aligned16(b) && aligned16(y);
  LAM_DT_DISPATCH(f.dt, T, {
    const T *ta = (const T *)a, *tb = (const T *)b;
    if (vec) add_kernel<T, lam_vw<T>::value><<<blocks_for(n / V), NT, 0, st->stream>>>(n / V, ta, tb, (T *)y);
    else add_kernel<T, 1><<<blocks_for(n), NT, 0, st->stream>>>(n, ta, tb, (T *)y);
  });
  LAUNCH_CHECK(st, "add_kernel");
  return LAM_OK;
}

/* tcat in NHWC (prims.h): each sample's (T, P, C) <-> (P, T, C), moved in units U of a run of C values; a thread
 * per unit of the side written, so the writes are coalesced (back = 0: x -> y, 1: y -> x). */
template <typename U>
__global__ void tcat_kernel(size_t n, int T, size_t P, size_t cu, int back, const U *__restrict__ src,
                            U *__restrict__ dst) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const size_t u = i % cu, r = i / cu; /* r: a run of C values, in the written side's order */
    size_t b, t, p;
    if (back) p = r % P, t = (r / P) % T, b = r / P / T; /* dx (b, t, p) */
    else t = r % T, p = (r / T) % P, b = r / T / P;       /* y (b, p, t) */
    const size_t other = back ? ((b * P + p) * T + t) : ((b * T + t) * P + p);
    dst[i] = src[other * cu + u];
  }
}
static lam_status tcat_move(lam_ctx *ctx, lam_fmt f, int B, int T, int C, size_t P, const void *from, void *to,
                            int back) {
  cuda_state *st = cuda_st(ctx);
  const size_t row = (size_t)C * lam_dt_size(f.dt), runs = (size_t)B * T * P;
  if (!f.nhwc) { /* NCHW: a clip's rows already are its T*C channels */
    CUDA_TRY(cudaMemcpyAsync(to, from, runs * row, cudaMemcpyDeviceToDevice, st->stream));
    return LAM_OK;
  }
  const uintptr_t al = (uintptr_t)from | (uintptr_t)to | row;
  if (al % 16 == 0)
    tcat_kernel<uint4><<<blocks_for(runs * (row / 16)), NT, 0, st->stream>>>(runs * (row / 16), T, P, row / 16, back,
                                                                             (const uint4 *)from, (uint4 *)to);
  else if (al % 4 == 0)
    tcat_kernel<uint32_t><<<blocks_for(runs * (row / 4)), NT, 0, st->stream>>>(runs * (row / 4), T, P, row / 4, back,
                                                                                (const uint32_t *)from, (uint32_t *)to);
  else
    tcat_kernel<uint16_t><<<blocks_for(runs * (row / 2)), NT, 0, st->stream>>>(runs * (row / 2), T, P, row / 2, back,
                                                                                (const uint16_t *)from, (uint16_t *)to);
  LAUNCH_CHECK(st, "tcat_kernel");
  return LAM_OK;
}
lam_status cuda_tcat_fwd(lam_ctx *ctx, lam_fmt f, int B, int T, int C, size_t P, const void *x, void *y) {
  return tcat_move(ctx, f, B, T, C, P, x, y, 0);
}
lam_status cuda_tcat_bwd(lam_ctx *ctx, lam_fmt f, int B, int T, int C, size_t P, const void *dy, void *dx) {
  return tcat_move(ctx, f, B, T, C, P, dy, dx, 1);
}

/* Thread per element (row, column) of rows x cols, grid-stride over all of them: a concat in NHWC copies
 * many short rows (a pixel's channels), where a block a row left most threads idle (v1: 145 us for a U-Net
 * level's concat at batch 64). U is the unit moved: 16 bytes where the rows and pointers allow, else a
 * value; a copy needs no arithmetic. */
template <typename I, typename U>
__global__ void copy_rows_kernel(I rows, I cols, const U *__restrict__ src, size_t lds, U *__restrict__ dst, size_t ldd) {
  const I n = rows * cols;
  for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (I)gridDim.x * blockDim.x) {
    const I r = e / cols, i = e - r * cols; /* 32-bit where the count allows: a 64-bit division costs dozens */
    dst[(size_t)r * ldd + i] = src[(size_t)r * lds + i];
  }
}
template <typename U>
static void copy_rows_launch(cuda_state *st, size_t rows, size_t cols, const void *src, size_t lds, void *dst,
                             size_t ldd) {
  if (fits32(rows * cols))
    copy_rows_kernel<unsigned, U><<<blocks_for(rows * cols), NT, 0, st->stream>>>(
        (unsigned)rows, (unsigned)cols, (const U *)src, lds, (U *)dst, ldd);
  else
    copy_rows_kernel<size_t, U><<<blocks_for(rows * cols), NT, 0, st->stream>>>(rows, cols, (const U *)src, lds,
                                                                               (U *)dst, ldd);
}

lam_status cuda_copy_rows(lam_ctx *ctx, lam_fmt f, size_t rows, size_t cols, const void *src, size_t lds, void *dst,
                          size_t ldd) {
  cuda_state *st = cuda_st(ctx);
  if (!rows || !cols) return LAM_OK;
  const size_t es = lam_dt_size(f.dt), per = 16 / es; /* values in 16 bytes */
  if (cols % per == 0 && lds % per == 0 && ldd % per == 0 && aligned16(src) && aligned16(dst))
    copy_rows_launch<uint4>(st, rows, cols / per, src, lds / per, dst, ldd / per);
  else if (es == 2) copy_rows_launch<uint16_t>(st, rows, cols, src, lds, dst, ldd);
  else copy_rows_launch<float>(st, rows, cols, src, lds, dst, ldd);
  LAUNCH_CHECK(st, "copy_rows_kernel");
  return LAM_OK;
}
