/* half.h — float to 16-bit floats (and back) on the host, rounding to nearest even (the CUDA intrinsics' rounding):
 * bfloat16 and IEEE half, for the CPU twins of the bf16 and fp16 precisions (the oracle the GPU is checked against),
 * the normalize op and the transfer benchmark's f16 batches. */
#ifndef LAMINA_HALF_H
#define LAMINA_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint16_t lam_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays a (quiet) NaN */
  u += 0x7fffu + ((u >> 16) & 1);                                           /* round half to even */
  return (uint16_t)(u >> 16);
}

static inline float lam_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t lam_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
  if (mag >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: infinity */
  if (mag < 0x38800000u) {                                   /* below the smallest normal half: subnormal */
    if (mag < 0x33000000u) return (uint16_t)sign;            /* below half the smallest subnormal: zero */
    uint32_t m = (mag & 0x7fffffu) | 0x800000u;
    int shift = 126 - (int)(mag >> 23); /* m * 2^(e - 150) in units of 2^-24, the smallest subnormal */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((mag - 0x38000000u) >> 13), rem = mag & 0x1fffu; /* rebias the exponent 127 -> 15 */
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
  return (uint16_t)(sign | r);
}

/* IEEE half to float: exact (every half is a float). For safetensors files of F16 weights. */
static inline float lam_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0x1fu) u = sign | 0x7f800000u | (m << 13); /* infinity, NaN */
  else if (e) u = sign | ((e + 112u) << 23) | (m << 13); /* rebias 15 -> 127 */
  else if (!m) u = sign;                                  /* zero */
  else {                                                  /* subnormal: normalize the mantissa */
    e = 113u;
    while (!(m & 0x400u)) m <<= 1, e--;
    u = sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Either 16-bit type by its dtype (prims.h: LAM_DT_BF16 = 1, LAM_DT_F16 = 2). */
static inline uint16_t lam_f32_to_half(int dt, float f) { return dt == 2 ? lam_f32_to_f16(f) : lam_f32_to_bf16(f); }
static inline float lam_half_to_f32(int dt, uint16_t h) { return dt == 2 ? lam_f16_to_f32(h) : lam_bf16_to_f32(h); }

#endif
