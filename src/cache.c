/* cache.c — the caching allocator (see cache.h). Blocks live in one array; lookups are linear, which
 * is fine for the tens of live buffers a context holds (tensors are views into a few big buffers). */
#include "cache.h"

#include <stdio.h>
#include <stdlib.h>

#include "status.h"

#define SMALL_ROUND ((size_t)512)       /* small blocks: multiples of 512 B */
#define LARGE_LIMIT ((size_t)1 << 20)   /* from 1 MiB on: multiples of 2 MiB */
#define LARGE_ROUND ((size_t)2 << 20)

void lam_cache_init(lam_cache *c, void *owner, lam_raw_alloc_fn a, lam_raw_free_fn f, const char *what) {
  *c = (lam_cache){0};
  c->owner = owner;
  c->raw_alloc = a;
  c->raw_free = f;
  c->what = what;
}

size_t lam_cache_round(size_t bytes) {
  if (bytes == 0) bytes = 1;
  size_t r = bytes < LARGE_LIMIT ? SMALL_ROUND : LARGE_ROUND;
  return (bytes + r - 1) / r * r;
}

static lam_status push_block(lam_cache *c, void *ptr, size_t size) {
  if (c->nblocks == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 64;
    lam_cache_block *b = realloc(c->blocks, cap * sizeof *b);
    if (!b) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "cache: no host memory for the block table (%zu entries)", cap);
    c->blocks = b;
    c->cap = cap;
  }
  c->blocks[c->nblocks++] = (lam_cache_block){ptr, size, 1};
  return LAM_OK;
}

lam_status lam_cache_alloc(lam_cache *c, void **ptr, size_t bytes) {
  if (!ptr) return LAM_FAIL(LAM_ERR_INVALID_ARG, "lam_mem_alloc: ptr is NULL");
  *ptr = NULL;
  if (bytes > ((size_t)1 << 50))
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "lam_mem_alloc: %zu bytes is not a plausible size", bytes);
  size_t size = lam_cache_round(bytes);
  c->allocs++;
  /* Exact size class first: reuse without splitting keeps the bookkeeping trivial. */
  for (size_t i = 0; i < c->nblocks; i++) {
    lam_cache_block *b = &c->blocks[i];
    if (!b->in_use && b->size == size) {
      b->in_use = 1;
      c->hits++;
      c->in_use += size;
      if (c->in_use > c->peak) c->peak = c->in_use;
      *ptr = b->ptr;
      return LAM_OK;
    }
  }
  const size_t held = c->held;
  if (c->limit && held + c->reserved + size > c->limit && c->reserved > c->in_use) lam_cache_release(c);
  if (c->limit && held + c->reserved + size > c->limit) {
    char also[96] = "";
    if (held) snprintf(also, sizeof also, " and %zu held by the data set", held);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY,
                    "the memory cap of %zu bytes%s would be exceeded: asked for %zu bytes of %s with %zu in use%s "
                    "(peak %zu); use less (a smaller --batch or model), or %s",
                    c->limit, c->limit_auto ? " (the memory this machine had available when lamina started)" : "", size,
                    c->what, c->in_use, also, c->peak,
                    c->limit_auto ? "set a cap yourself (--max-memory) if the machine can take more" : "raise the cap (--max-memory)");
  }
  void *p = NULL;
  lam_status s = c->raw_alloc(c->owner, &p, size);
  if (s == LAM_ERR_OUT_OF_MEMORY && c->reserved > c->in_use) {
    lam_cache_release(c); /* cached blocks of other sizes may be what stands in the way */
    s = c->raw_alloc(c->owner, &p, size);
  }
  if (s != LAM_OK) {
    if (s == LAM_ERR_OUT_OF_MEMORY) {
      /* the allocator's reason, copied out first: lam_last_error() is the buffer LAM_FAIL writes */
      char why[512];
      snprintf(why, sizeof why, "%s", lam_last_error());
      return LAM_FAIL(s, "out of %s: asked for %zu bytes with %zu in use and %zu reserved (%s)", c->what, size,
                      c->in_use, c->reserved, why);
    }
    return s;
  }
  s = push_block(c, p, size);
  if (s != LAM_OK) {
    c->raw_free(c->owner, p);
    return s;
  }
  c->reserved += size;
  c->in_use += size;
  if (c->in_use > c->peak) c->peak = c->in_use;
  *ptr = p;
  return LAM_OK;
}

lam_status lam_cache_free(lam_cache *c, void *ptr) {
  if (!ptr) return LAM_OK;
  for (size_t i = 0; i < c->nblocks; i++) {
    lam_cache_block *b = &c->blocks[i];
    if (b->ptr == ptr) {
      if (!b->in_use) return LAM_FAIL(LAM_ERR_INVALID_ARG, "lam_mem_free: %p was already freed", ptr);
      b->in_use = 0;
      c->in_use -= b->size;
      return LAM_OK;
    }
  }
  return LAM_FAIL(LAM_ERR_INVALID_ARG,
                  "lam_mem_free: %p did not come from lam_mem_alloc on this context (free it where it was allocated)", ptr);
}

size_t lam_cache_release(lam_cache *c) {
  size_t released = 0, j = 0;
  for (size_t i = 0; i < c->nblocks; i++) {
    lam_cache_block b = c->blocks[i];
    if (b.in_use) {
      c->blocks[j++] = b;
    } else {
      c->raw_free(c->owner, b.ptr);
      released += b.size;
    }
  }
  c->nblocks = j;
  c->reserved -= released;
  return released;
}

void lam_cache_destroy(lam_cache *c) {
  for (size_t i = 0; i < c->nblocks; i++) c->raw_free(c->owner, c->blocks[i].ptr);
  free(c->blocks);
  *c = (lam_cache){0};
}
