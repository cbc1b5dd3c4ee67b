/* kernels.cuh — what the CUDA nn kernels of several op families share (cuda/<family>.cu): the check of a
 * grid's 32-bit indexing, grid-stride loops, the launchers of elementwise and row-wise kernels, and the
 * dispatch of the NHWC kernels by element type and vector width, and which formats take them. */
#ifndef LAMINA_CUDA_KERNELS_CUH
#define LAMINA_CUDA_KERNELS_CUH

#include "cuda.h"
#include "vec.cuh"

/* The grids that check here put a channel (or channel x sample) in blockIdx.y and index within it in 32 bits:
 * 64-bit divisions by run-time sizes cost dozens of instructions each. */
static inline lam_status check_grid(const char *what, size_t n, int y) {
  if (n >= (size_t)1 << 31 || y > 65535)
    return lam_fail_at(LAM_ERR_UNSUPPORTED, __FILE__, __LINE__,
                       "%s: %zu elements per channel or %d channels is beyond this kernel's 32-bit indexing; use a "
                       "smaller batch", what, n, y);
  return LAM_OK;
}

/* 32-bit indices when every index and index + grid stride fits: n < 2^31. */
static inline bool fits32(size_t n) { return n < ((size_t)1 << 31); }

#define GRID_STRIDE(I, i, n) for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (I)gridDim.x * blockDim.x)

/* Launches KERNEL<unsigned> or KERNEL<size_t> over n elements, by what n needs. */
#define LAUNCH_ELEMENTWISE(st, KERNEL, n, ...)                                                          \
  do {                                                                                                \
    if (fits32(n)) KERNEL<unsigned><<<blocks_for(n), NT, 0, (st)->stream>>>((unsigned)(n), __VA_ARGS__); \
    else KERNEL<size_t><<<blocks_for(n), NT, 0, (st)->stream>>>((size_t)(n), __VA_ARGS__);              \
    LAUNCH_CHECK(st, #KERNEL);                                                                        \
  } while (0)

/* The same for KERNEL<I, V> over the n values of rows of P (planes of (B, C, P), say), which gets
 * (n / V, P / V, ...): float4s (V = 4) where vec is true (P % 4 == 0, pointers 16-byte aligned). */
#define LAUNCH_ROWWISE(st, KERNEL, vec, n, P, ...)                                                      \
  do {                                                                                                \
    const size_t nv_ = (vec) ? (n) / 4 : (n), pv_ = (vec) ? (size_t)(P) / 4 : (size_t)(P);             \
    if ((vec) && fits32(nv_))                                                                         \
      KERNEL<unsigned, 4><<<blocks_for(nv_), NT, 0, (st)->stream>>>((unsigned)nv_, (unsigned)pv_, __VA_ARGS__); \
    else if (vec) KERNEL<size_t, 4><<<blocks_for(nv_), NT, 0, (st)->stream>>>(nv_, pv_, __VA_ARGS__);  \
    else if (fits32(nv_))                                                                             \
      KERNEL<unsigned, 1><<<blocks_for(nv_), NT, 0, (st)->stream>>>((unsigned)nv_, (unsigned)pv_, __VA_ARGS__); \
    else KERNEL<size_t, 1><<<blocks_for(nv_), NT, 0, (st)->stream>>>(nv_, pv_, __VA_ARGS__);             \
    LAUNCH_CHECK(st, #KERNEL);                                                                        \
  } while (0)

/* Calls F<T, V>(args) for the format's type, with V = the 16-byte width where ok, else 1. */
#define NHWC_DISPATCH(f, ok, F, ...)                          \
  LAM_DT_DISPATCH((f).dt, T_, {                               \
    if (ok) F<T_, lam_vw<T_>::value>(__VA_ARGS__);            \
    else F<T_, 1>(__VA_ARGS__);                               \
  })

/* Whether C channels and these pointers (NULL ignored) take 16-byte vectors of type dt. */
static inline bool vec_ok(int dt, int C, const void *a, const void *b = NULL, const void *c = NULL, const void *d = NULL) {
  const int V = (int)(16 / lam_dt_size(dt));
  return C % V == 0 && aligned16(a) && (!b || aligned16(b)) && (!c || aligned16(c)) && (!d || aligned16(d));
}

/* The NHWC kernels serve f: NHWC, or a flat tensor in any layout. */
static inline bool as_nhwc(lam_fmt f, int P) { return f.nhwc || (P == 1 && f.dt != LAM_DT_F32); }

#endif
