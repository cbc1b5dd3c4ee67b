/* cache.h — a caching allocator over any backend's raw alloc/free: freed blocks are kept by size class
 * and handed out again, so steady-state work allocates nothing from the system. Tracks the figures
 * that lam_mem_stats reports. */
#ifndef LAMINA_CACHE_H
#define LAMINA_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "lamina.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lam_cache_block {
  void *ptr;
  size_t size; /* rounded size actually reserved */
  int in_use;
} lam_cache_block;

typedef lam_status (*lam_raw_alloc_fn)(void *owner, void **ptr, size_t bytes);
typedef void (*lam_raw_free_fn)(void *owner, void *ptr);

typedef struct lam_cache {
  lam_cache_block *blocks;
  size_t nblocks, cap;
  size_t in_use, reserved, peak;
  size_t limit; /* most bytes the cache may hold from the system; 0: no cap */
  int limit_auto; /* the limit is the CPU's default: the memory the machine had available at the start */
  size_t held;    /* bytes held outside the cache that count against limit (lam_mem_hold: the CLI's host data set
                   * on the CPU); blocks fit in limit - held */
  uint64_t allocs, hits;
  void *owner;
  lam_raw_alloc_fn raw_alloc;
  lam_raw_free_fn raw_free;
  const char *what; /* "device memory" or "host memory", for messages */
} lam_cache;

void lam_cache_init(lam_cache *c, void *owner, lam_raw_alloc_fn a, lam_raw_free_fn f, const char *what);
/* Rounds bytes up to the size class the cache reserves for it. */
size_t lam_cache_round(size_t bytes);
lam_status lam_cache_alloc(lam_cache *c, void **ptr, size_t bytes);
lam_status lam_cache_free(lam_cache *c, void *ptr);
size_t lam_cache_release(lam_cache *c); /* frees every cached block; returns bytes released */
void lam_cache_destroy(lam_cache *c);   /* frees everything, in use or not */

#ifdef __cplusplus
}
#endif
#endif
