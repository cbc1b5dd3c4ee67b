/* hash.h — the counter-based hash behind dropout's masks, one definition for the CPU (cpu/act.c)
 * and the CUDA kernels (cuda/act.cu), so both draw the same mask bit for bit: element i of the draw
 * (seed, ctr) is a pure function of the three, with no state carried between elements or calls. */
#ifndef LAMINA_HASH_H
#define LAMINA_HASH_H

#include <stdint.h>

#include "../prims.h" /* LAM_HD */


#define LAM_GOLDEN64 0x9e3779b97f4a7c15ULL

/* splitmix64's output function (Steele, Lea & Flood): a bijection of 64 bits that mixes every input
 * bit into every output bit. */
LAM_HD uint64_t lam_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* The key of one draw: the seed and the counter (as unsigned 32 bits) mixed, so draws that differ in
 * either one share no stream. */
LAM_HD uint64_t lam_draw_key(uint64_t seed, int32_t ctr) {
  return lam_mix64(seed ^ lam_mix64((uint64_t)(uint32_t)ctr + LAM_GOLDEN64));
}

/* Element i of the draw as a uniform float in [0, 1): the top 24 bits of splitmix64's i-th output from
 * the key, exact in a float. */
LAM_HD float lam_draw_uniform(uint64_t key, uint64_t i) {
  return (float)(lam_mix64(key + (i + 1) * LAM_GOLDEN64) >> 40) * 0x1.0p-24f;
}

#endif
