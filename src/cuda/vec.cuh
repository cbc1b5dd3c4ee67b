/* vec.cuh — 128-bit loads and stores for the memory-bound kernels (cuda/<family>.cu). A kernel
 * instantiated with V = 4 moves a float4 (four values, one instruction) per index, with V = 1 one float;
 * the launcher picks V = 4 where every pointer is 16-byte aligned and the rows it walks are a multiple
 * of 4 long, so index arithmetic (divisions for a channel, say) is paid once per four values. */
#ifndef LAMINA_CUDA_VEC_CUH
#define LAMINA_CUDA_VEC_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>

#include <type_traits>

/* v = values V*i .. V*i + V - 1 of p. */
template <int V> __device__ __forceinline__ void vload(float (&v)[V], const float *p, size_t i) {
  if constexpr (V == 4) {
    float4 t = reinterpret_cast<const float4 *>(p)[i];
    v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
  } else {
    v[0] = p[i];
  }
}

template <int V> __device__ __forceinline__ void vstore(float *p, size_t i, const float (&v)[V]) {
  if constexpr (V == 4) reinterpret_cast<float4 *>(p)[i] = make_float4(v[0], v[1], v[2], v[3]);
  else p[i] = v[0];
}

/* Bytes V*i .. V*i + V - 1 of p (a mask), as 0 or 1 flags. */
template <int V> __device__ __forceinline__ void vload_u8(uint8_t (&v)[V], const uint8_t *p, size_t i) {
  if constexpr (V == 4) {
    uchar4 t = reinterpret_cast<const uchar4 *>(p)[i];
    v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
  } else {
    v[0] = p[i];
  }
}

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* ---- activations of any type (prims.h: lam_fmt.dt), as floats in registers: T is float, __nv_bfloat16 or
 * __half. V values per index: one 16-byte access where V * sizeof(T) == 16 (4 floats, 8 16-bit floats), else V
 * scalars. */
typedef __nv_bfloat16 lam_bf16;
typedef __half lam_f16;

/* Runs the statements with T the element type of dt (float, lam_bf16 or lam_f16). */
#define LAM_DT_DISPATCH(dt, T, ...)  \
  do {                               \
    if ((dt) == LAM_DT_BF16) {       \
      typedef lam_bf16 T;            \
      __VA_ARGS__;                   \
    } else if ((dt) == LAM_DT_F16) { \
      typedef lam_f16 T;             \
      __VA_ARGS__;                   \
    } else {                         \
      typedef float T;               \
      __VA_ARGS__;                   \
    }                                \
  } while (0)
template <typename T> struct lam_vw {
  static constexpr int value = 16 / sizeof(T);
};

__device__ __forceinline__ float tval(float v) { return v; }
__device__ __forceinline__ float tval(lam_bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float tval(lam_f16 v) { return __half2float(v); }
/* float to T, rounded to nearest even (a half beyond its range: infinity) */
template <typename T> __device__ __forceinline__ T tfrom(float v) {
  if constexpr (sizeof(T) == 4) return v;
  else if constexpr (std::is_same<T, lam_f16>::value) return __float2half_rn(v);
  else return __float2bfloat16_rn(v);
}
template <typename T> __device__ __forceinline__ float tget(const T *p, size_t i) { return tval(p[i]); }
template <typename T> __device__ __forceinline__ void tput(T *p, size_t i, float v) { p[i] = tfrom<T>(v); }

/* A vector of V values of T is 16 bytes (one uint4 load): 4 floats, or 8 bfloat16 or halfs. */
template <typename T, int V> struct lam_vec16 {
  static constexpr bool value = V * sizeof(T) == 16;
};
/* v = the V values of T in the 16 bytes u, as floats. */
template <typename T, int V> __device__ __forceinline__ void tunpack(float (&v)[V], uint4 u) {
  static_assert(lam_vec16<T, V>::value, "tunpack takes a 16-byte vector");
  if constexpr (sizeof(T) == 4) {
    v[0] = __uint_as_float(u.x), v[1] = __uint_as_float(u.y), v[2] = __uint_as_float(u.z), v[3] = __uint_as_float(u.w);
  } else if constexpr (std::is_same<T, lam_f16>::value) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&w[q]));
      v[2 * q] = f.x, v[2 * q + 1] = f.y;
    }
  } else {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int q = 0; q < 4; q++) { /* a bfloat16 is the high half of a float */
      v[2 * q] = __uint_as_float(w[q] << 16);
      v[2 * q + 1] = __uint_as_float(w[q] & 0xffff0000u);
    }
  }
}
/* v = values V*i .. V*i + V - 1 of p. */
template <typename T, int V> __device__ __forceinline__ void tload(float (&v)[V], const T *p, size_t i) {
  if constexpr (lam_vec16<T, V>::value) tunpack<T, V>(v, reinterpret_cast<const uint4 *>(p)[i]);
  else {
#pragma unroll
    for (int q = 0; q < V; q++) v[q] = tget(p, (size_t)V * i + q);
  }
}

template <typename T, int V> __device__ __forceinline__ void tstore(T *p, size_t i, const float (&v)[V]) {
  if constexpr (V * sizeof(T) == 16) {
    uint4 u;
    if constexpr (sizeof(T) == 4) {
      u = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
    } else if constexpr (std::is_same<T, lam_f16>::value) {
      unsigned w[4];
#pragma unroll
      for (int q = 0; q < 4; q++) { /* round each to nearest even, as __float2half_rn */
        __half2 h = __floats2half2_rn(v[2 * q], v[2 * q + 1]);
        w[q] = *reinterpret_cast<unsigned *>(&h);
      }
      u = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
      unsigned w[4];
#pragma unroll
      for (int q = 0; q < 4; q++) { /* round each to nearest even, as __float2bfloat16_rn */
        __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * q], v[2 * q + 1]);
        w[q] = *reinterpret_cast<unsigned *>(&h);
      }
      u = make_uint4(w[0], w[1], w[2], w[3]);
    }
    reinterpret_cast<uint4 *>(p)[i] = u;
  } else {
#pragma unroll
    for (int q = 0; q < V; q++) tput(p, (size_t)V * i + q, v[q]);
  }
}

#endif
