/* vec.cuh — 128-bit loads and stores for the memory-bound kernels of nn.cu and nn_ops.cu. A kernel
 * instantiated with V = 4 moves a float4 (four values, one instruction) per index, with V = 1 one float;
 * the launcher picks V = 4 where every pointer is 16-byte aligned and the rows it walks are a multiple
 * of 4 long, so index arithmetic (divisions for a channel, say) is paid once per four values. */
#ifndef LAMINA_CUDA_VEC_CUH
#define LAMINA_CUDA_VEC_CUH

#include <stddef.h>
#include <stdint.h>

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

#endif
