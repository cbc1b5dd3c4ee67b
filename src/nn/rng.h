/* rng.h — the generator behind parameter initialization and shuffling: xoshiro256** seeded through
 * splitmix64. Its whole state is four words, saved in checkpoints so a resumed run draws the same
 * numbers as an uninterrupted one. */
#ifndef LAMINA_NN_RNG_H
#define LAMINA_NN_RNG_H

#include <stdint.h>

typedef struct lam_rng {
  uint64_t s[4];
} lam_rng;

static inline uint64_t lam_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline void lam_rng_seed(lam_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = lam_splitmix64(&seed);
}

static inline uint64_t lam_rng_next(lam_rng *r) {
  uint64_t *s = r->s;
  uint64_t x = s[1] * 5, result = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = (s[3] << 45) | (s[3] >> 19);
  return result;
}

/* Uniform in [0, 1). */
static inline double lam_rng_uniform(lam_rng *r) { return (double)(lam_rng_next(r) >> 11) * 0x1.0p-53; }

/* Uniform in [0, n) without modulo bias (Lemire's method). */
static inline uint64_t lam_rng_below(lam_rng *r, uint64_t n) {
  __uint128_t m = (__uint128_t)lam_rng_next(r) * n;
  uint64_t lo = (uint64_t)m;
  if (lo < n) {
    uint64_t t = -n % n;
    while (lo < t) {
      m = (__uint128_t)lam_rng_next(r) * n;
      lo = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

#endif
