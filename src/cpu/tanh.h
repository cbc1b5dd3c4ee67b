/* tanh.h — a float tanh that the compiler vectorizes (no libm call in the loop), accurate to about
 * 2e-7 absolute (the hidden layer's bound is 1e-6), and exact at the special values: tanh(+-0) = +-0,
 * tanh(+-inf) = +-1, NaN stays NaN. Shared by the CPU ops.
 *
 * Why the bit tricks: GCC 12 will not if-convert a float select next to this much arithmetic (it
 * threads the branches instead, and the loop stays scalar), so clamps and selects are done on the
 * integer bits, which it turns into vector min and blend. */
#ifndef LAMINA_CPU_TANH_H
#define LAMINA_CPU_TANH_H

#include <math.h>
#include <stdint.h>

typedef union lam_f32_bits {
  float f;
  int32_t i;
} lam_f32_bits;

/* c ? a : b, branch-free. */
static inline float lam_select(int c, float a, float b) {
  lam_f32_bits ua = {.f = a}, ub = {.f = b}, r;
  int32_t m = -(int32_t)(c != 0);
  r.i = (ua.i & m) | (ub.i & ~m);
  return r.f;
}

/* min(a, 30) for a >= 0 (NaN becomes 30: the caller restores it). Non-negative floats order like
 * their bit patterns. tanh(30) is 1 in float, and the clamp keeps the exponent below in range. */
static inline float lam_clamp30(float a) {
  lam_f32_bits u = {.f = a};
  const int32_t lim = 0x41f00000; /* 30.0f */
  u.i = u.i < lim ? u.i : lim;
  return u.f;
}

/* 2^t for t in [-87, 0]: t = k + f with k = -round(-t) and |f| <= 0.5; 2^f from a degree-7 Taylor
 * series of e^(f ln 2) (truncation below 6e-9 relative), 2^k by writing the exponent bits. */
static inline float lam_exp2_neg(float t) {
  int32_t ki = (int32_t)(0.5f - t); /* round(-t), t <= 0 */
  float u = (t + (float)ki) * 0.69314718f;
  float p = 1.0f / 5040.0f;
  p = p * u + 1.0f / 720.0f;
  p = p * u + 1.0f / 120.0f;
  p = p * u + 1.0f / 24.0f;
  p = p * u + 1.0f / 6.0f;
  p = p * u + 0.5f;
  p = p * u + 1.0f;
  p = p * u + 1.0f;
  lam_f32_bits scale = {.i = (127 - ki) << 23}; /* ki <= 87: a normal power of two */
  return p * scale.f;
}

static inline float lam_tanhf(float x) {
  float a = lam_clamp30(fabsf(x));
  /* e = exp(-2a); tanh(a) = (1 - e) / (1 + e): cancellation costs at most ~1.2e-7 absolute. */
  float e = lam_exp2_neg(a * -2.8853900817779268f); /* -2 / ln 2 */
  float big = (1.0f - e) / (1.0f + e);
  /* Near 0 the series keeps the relative accuracy too: the next term is < 1e-12 for a < 1/16. */
  float a2 = a * a;
  float small = a * (1.0f + a2 * (-1.0f / 3.0f + a2 * (2.0f / 15.0f + a2 * (-17.0f / 315.0f))));
  float r = copysignf(lam_select(a < 0.0625f, small, big), x);
  return lam_select(x != x, x, r);
}

#endif
