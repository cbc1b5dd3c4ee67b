// lab_igemm_tma.cuh — the Hopper plumbing of dev/lab_igemm_conv.cu's v3 kernels: mbarriers, the tensor-memory
// accelerator's copies and stores, wgmma's fences and shared-memory descriptors (K-major and MN-major, 128-byte
// swizzled), and the host's tensor maps.
#pragma once
#include "lab_igemm.cuh"
#include <cuda.h>
#include <cudaTypedefs.h>
#include "lab_wgmma.cuh"

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint64_t *b, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
}
// a wait that never ends is a bug of the lab's: it traps (the run stops with an error) instead of hanging; no printf
// here, as a call inside the kernel makes ptxas serialize its wgmma pipeline
__device__ __forceinline__ void mbar_wait(uint64_t *b, int parity) {
  uint32_t done;
  for (long tries = 0;; tries++) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(smem_u32(b)), "r"(parity) : "memory");
    if (done) return;
    if (tries == (1l << 28)) __trap();
  }
}
__device__ __forceinline__ void tma_4d(void *dst, const CUtensorMap *m, int c0, int c1, int c2, int c3, uint64_t *bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
               ::"r"(smem_u32(dst)), "l"((uint64_t)m), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void tma_2d(void *dst, const CUtensorMap *m, int c0, int c1, uint64_t *bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(smem_u32(dst)), "l"((uint64_t)m), "r"(c0), "r"(c1), "r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *m, int c0, int c1, const void *src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
               ::"l"((uint64_t)m), "r"(c0), "r"(c1), "r"(smem_u32(src)) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// a K-major operand of 128-byte rows, 128-byte swizzled: 8-row groups 1024 bytes apart (the leading offset is unused)
__device__ __forceinline__ uint64_t sw128_desc(const void *p) {
  return (uint64_t)((smem_u32(p) & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// the accumulators are the asm's outputs: keep the compiler from reading them before the wait that completes them
template <int R> __device__ __forceinline__ void pin(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// an MN-major operand of 128-byte swizzled rows: 8-row groups 1024 bytes apart, 64-element slabs lbo bytes apart
__device__ __forceinline__ uint64_t sw128_mn_desc(const void *p, int lbo) {
  return (uint64_t)((smem_u32(p) & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
         (1ull << 62);
}
// the driver's tensor-map encoder, through the runtime (no -lcuda)
static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 f = NULL;
  if (!f) {
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !f) { printf("cuTensorMapEncodeTiled: not found in the driver\n"); exit(1); }
  }
  return f;
}
// a fp16 tensor of `dims` (innermost first, contiguous) as a map of boxes `box`, 128-byte swizzled; nan: what falls
// outside is filled with the engine's OOB-NaN (which fma.rn.oob turns into 0) instead of zeros
static CUtensorMap fp16_map(const char *what, const void *p, int rank, const cuuint64_t *dims, const cuuint32_t *box,
                            CUtensorMapL2promotion l2, bool nan) {
  CUtensorMap m;
  cuuint64_t strides[4];
  cuuint64_t stride = 2;
  for (int i = 0; i + 1 < rank; i++) strides[i] = stride *= dims[i];
  const cuuint32_t e[5] = {1, 1, 1, 1, 1};
  const CUresult r = encode_tiled()(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, rank, (void *)p, dims, strides, box, e,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, l2,
                                    nan ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) { printf("cuTensorMapEncodeTiled (%s): error %d\n", what, (int)r); exit(1); }
  return m;
}
// x (N, H, W, C) in boxes of 64 channels × bw × bh × bn, with zeros and with OOB-NaN outside
static void x_maps(const char *what, const conv_shape &s, const half *x, int bw, int bh, int bn, CUtensorMap *zero,
                   CUtensorMap *nan) {
  const cuuint64_t dims[4] = {(cuuint64_t)s.C, (cuuint64_t)s.W, (cuuint64_t)s.H, (cuuint64_t)s.N};
  const cuuint32_t box[4] = {64, (cuuint32_t)bw, (cuuint32_t)bh, (cuuint32_t)bn};
  *zero = fp16_map(what, x, 4, dims, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, false);
  *nan = fp16_map(what, x, 4, dims, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, true);
}
// a matrix of rows × cols (cols contiguous) in boxes of 64 columns × box_rows
static CUtensorMap rows_map(const char *what, const half *p, size_t cols, size_t rows, int box_rows, CUtensorMapL2promotion l2) {
  const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
  const cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
  return fp16_map(what, p, 2, dims, box, l2, false);
}
