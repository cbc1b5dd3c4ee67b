/* inputs.c — the hidden layer's inputs as the course draws them, the float64 reference check, and
 * small statistics. Inputs come from a counter-based generator (element i depends only on the seed
 * and i), so they are the same for any number of threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static inline uint64_t mix64(uint64_t z) { /* splitmix64's finalizer */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* A uniform double in [0, 1) from 53 random bits. */
static inline double uniform01(uint64_t seed, uint64_t stream, uint64_t i) {
  uint64_t z = mix64(seed * 0x9e3779b97f4a7c15ULL + stream * 0xd1b54a32d192ed03ULL + i + 1);
  return (double)(z >> 11) * 0x1.0p-53;
}

void cli_make_inputs(uint64_t seed, size_t n, float *g32, uint8_t *g8, float *w) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    double grey = floor(uniform01(seed, 1, i) * 255.0); /* 0..254, as floor(uniform(0, 255)) */
    if (g32) g32[i] = (float)grey;
    if (g8) g8[i] = (uint8_t)grey;
    /* Box-Muller: one normal from two uniforms. */
    double u1 = 1.0 - uniform01(seed, 2, i), u2 = uniform01(seed, 3, i);
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    w[i] = (float)(0.5 + 0.1 * z);
  }
}

double cli_max_abs_err(size_t n, const float *g32, const uint8_t *g8, const float *w, const float *out) {
  double worst = 0;
  int nan_seen = 0;
#pragma omp parallel for schedule(static) reduction(max : worst) reduction(| : nan_seen)
  for (size_t i = 0; i < n; i++) {
    double g = g32 ? (double)g32[i] : (double)g8[i];
    double ref = tanh(g / 255.0 * (double)w[i]);
    double e = fabs((double)out[i] - ref);
    if (e != e) nan_seen = 1;
    else if (e > worst) worst = e;
  }
  return nan_seen ? NAN : worst;
}

void cli_poison(float *p, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) p[i] = NAN;
}

double cli_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double cli_min(const double *v, int n) {
  double m = n > 0 ? v[0] : 0;
  for (int i = 1; i < n; i++)
    if (v[i] < m) m = v[i];
  return m;
}
