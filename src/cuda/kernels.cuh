/* kernels.cuh — what the CUDA nn kernels of several op families share (cuda/<family>.cu): the check of a
 * grid's 32-bit indexing. */
#ifndef LAMINA_CUDA_KERNELS_CUH
#define LAMINA_CUDA_KERNELS_CUH

#include "cuda.h"

/* The grids that check here put a channel (or channel x sample) in blockIdx.y and index within it in 32 bits:
 * 64-bit divisions by run-time sizes cost dozens of instructions each. */
static inline lam_status check_grid(const char *what, size_t n, int y) {
  if (n >= (size_t)1 << 31 || y > 65535)
    return lam_fail_at(LAM_ERR_UNSUPPORTED, __FILE__, __LINE__,
                       "%s: %zu elements per channel or %d channels is beyond this kernel's 32-bit indexing; use a "
                       "smaller batch", what, n, y);
  return LAM_OK;
}

#endif
