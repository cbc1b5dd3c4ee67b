/* comm.cu — the CUDA backend's collectives over NCCL, for data-parallel GPU ranks (nn/train.c): the sum
 * of the flat gradient buffer on the context's stream (one call, capturable in the step's graph), and
 * sums of a few host doubles (an epoch's statistics, the replica check, the stop flags), staged through
 * the device. Built without nccl.h, every entry says so. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

#ifdef LAMINA_WITH_NCCL
#include <nccl.h>

/* NCCL is loaded at the first collective, not with liblamina, for the reason cuBLAS is (gemm.cu): a process
 * of one rank — every plain run — never maps it. The soname first, then the toolkit's folder. */
#define NCCL_SONAME "libnccl.so.2"
static struct {
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRank) init_rank;
  decltype(&ncclCommDestroy) destroy;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclRedOpCreatePreMulSum) premul_create;
  decltype(&ncclRedOpDestroy) op_destroy;
  decltype(&ncclGetErrorString) error_string;
  decltype(&ncclGetLastError) last_error;
} nc;
static char nc_error[600];
static pthread_once_t nc_once = PTHREAD_ONCE_INIT;

static void nc_load(void) {
  void *lib = cuda_dlopen(NCCL_SONAME);
  if (!lib) {
    snprintf(nc_error, sizeof nc_error,
             "cannot load NCCL (%s), which GPU ranks need for their sums: %s; install NCCL (the CUDA toolkit's, or "
             "Debian's libnccl2), or add the folder that holds it to LD_LIBRARY_PATH", NCCL_SONAME, dlerror());
    return;
  }
  const char *missing = NULL;
#define NC_SYM(field, name) \
  if (!(*(void **)&nc.field = dlsym(lib, name)) && !missing) missing = name;
  NC_SYM(get_unique_id, "ncclGetUniqueId")
  NC_SYM(init_rank, "ncclCommInitRank")
  NC_SYM(destroy, "ncclCommDestroy")
  NC_SYM(all_reduce, "ncclAllReduce")
  NC_SYM(premul_create, "ncclRedOpCreatePreMulSum")
  NC_SYM(op_destroy, "ncclRedOpDestroy")
  NC_SYM(error_string, "ncclGetErrorString")
  NC_SYM(last_error, "ncclGetLastError")
#undef NC_SYM
  if (missing) {
    snprintf(nc_error, sizeof nc_error, "%s has no %s: NCCL 2.11 or later is needed", NCCL_SONAME, missing);
    nc.get_unique_id = NULL;
  }
}

static lam_status nc_ready(void) {
  pthread_once(&nc_once, nc_load);
  if (!nc.get_unique_id) return LAM_FAIL(LAM_ERR_UNSUPPORTED, "%s", nc_error);
  return LAM_OK;
}

static lam_status nc_status(ncclResult_t r, ncclComm_t comm, const char *expr, const char *file, int line) {
  if (r == ncclSuccess) return LAM_OK;
  const char *detail = nc.last_error ? nc.last_error(comm) : "";
  return lam_fail_at(r == ncclUnhandledCudaError ? LAM_ERR_CUDA : LAM_ERR_IO, file, line, "%s failed: %s%s%s%s", expr,
                     nc.error_string(r), detail && *detail ? " (" : "", detail ? detail : "",
                     detail && *detail ? ")" : "");
}
#define NC_TRY(comm, expr) LAM_TRY(nc_status((expr), (comm), #expr, __FILE__, __LINE__))

typedef struct cuda_comm {
  ncclComm_t comm;
  int rank, world;
  double *stage; /* comm_sum_host's device copy of the doubles */
  size_t stage_n;
} cuda_comm;

extern "C" lam_status cuda_nccl_unique_id(unsigned char *id, size_t bytes) {
  LAM_TRY(nc_ready());
  LAM_CHECK_ARG(bytes >= sizeof(ncclUniqueId), "NCCL's unique id is %zu bytes, the buffer %zu", sizeof(ncclUniqueId),
                bytes);
  ncclUniqueId u;
  NC_TRY(NULL, nc.get_unique_id(&u));
  memcpy(id, &u, sizeof u);
  return LAM_OK;
}

/* Blocks until every rank has joined (ncclCommInitRank): the ranks must all call it. */
extern "C" lam_status cuda_comm_init(lam_ctx *ctx, void **out, int rank, int world, const unsigned char *id) {
  LAM_TRY(nc_ready());
  cuda_state *st = (cuda_state *)ctx->state;
  CUDA_TRY(cudaSetDevice(st->device));
  cuda_comm *c = (cuda_comm *)calloc(1, sizeof *c);
  if (!c) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for an NCCL communicator");
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  lam_status s = nc_status(nc.init_rank(&c->comm, world, u, rank), NULL, "ncclCommInitRank", __FILE__, __LINE__);
  if (s != LAM_OK) {
    free(c);
    return s;
  }
  c->rank = rank, c->world = world;
  *out = c;
  return LAM_OK;
}

extern "C" void cuda_comm_free(lam_ctx *ctx, void *comm) {
  (void)ctx;
  cuda_comm *c = (cuda_comm *)comm;
  if (!c) return;
  if (c->stage) cudaFree(c->stage);
  if (c->comm) nc.destroy(c->comm);
  free(c);
}

/* x = the sum over the ranks of weight · x, on the queue's stream (NCCL's pre-multiplied sum: one pass). The
 * operator may go as soon as the call returns (NCCL's documentation), also while the stream is being
 * captured: the weight travels by value. */
extern "C" lam_status cuda_comm_sum(lam_ctx *ctx, void *comm, int queue, float *x, size_t n, float weight) {
  cuda_state *st = (cuda_state *)ctx->state;
  cuda_comm *c = (cuda_comm *)comm;
  ncclRedOp_t op;
  NC_TRY(c->comm, nc.premul_create(&op, &weight, ncclFloat, ncclScalarHostImmediate, c->comm));
  lam_status s = nc_status(nc.all_reduce(x, x, n, ncclFloat, op, c->comm, queue ? st->copy_stream : st->stream),
                           c->comm, "ncclAllReduce", __FILE__, __LINE__);
  nc.op_destroy(op, c->comm);
  return s;
}

/* n host doubles summed over the ranks in place; waits for queue 0 (never called while capturing). */
extern "C" lam_status cuda_comm_sum_host(lam_ctx *ctx, void *comm, double *x, size_t n) {
  cuda_state *st = (cuda_state *)ctx->state;
  cuda_comm *c = (cuda_comm *)comm;
  if (n > c->stage_n) {
    if (c->stage) CUDA_TRY(cudaFree(c->stage));
    c->stage = NULL, c->stage_n = 0;
    CUDA_TRY(cudaMalloc((void **)&c->stage, n * sizeof(double)));
    c->stage_n = n;
  }
  CUDA_TRY(cudaMemcpyAsync(c->stage, x, n * sizeof(double), cudaMemcpyHostToDevice, st->stream));
  NC_TRY(c->comm, nc.all_reduce(c->stage, c->stage, n, ncclDouble, ncclSum, c->comm, st->stream));
  CUDA_TRY(cudaMemcpyAsync(x, c->stage, n * sizeof(double), cudaMemcpyDeviceToHost, st->stream));
  CUDA_TRY(cudaStreamSynchronize(st->stream));
  return LAM_OK;
}

#else /* built without NCCL */

#define NO_NCCL                                                                                                      \
  LAM_FAIL(LAM_ERR_UNSUPPORTED, "GPU ranks need NCCL, and this lamina was built without it (no nccl.h in the CUDA " \
           "toolkit at build time): install NCCL's headers (Debian's libnccl-dev) and build again")
extern "C" lam_status cuda_nccl_unique_id(unsigned char *id, size_t bytes) {
  (void)id, (void)bytes;
  return NO_NCCL;
}
extern "C" lam_status cuda_comm_init(lam_ctx *ctx, void **out, int rank, int world, const unsigned char *id) {
  (void)ctx, (void)out, (void)rank, (void)world, (void)id;
  return NO_NCCL;
}
extern "C" void cuda_comm_free(lam_ctx *ctx, void *comm) { (void)ctx, (void)comm; }
extern "C" lam_status cuda_comm_sum(lam_ctx *ctx, void *comm, int queue, float *x, size_t n, float weight) {
  (void)ctx, (void)comm, (void)queue, (void)x, (void)n, (void)weight;
  return NO_NCCL;
}
extern "C" lam_status cuda_comm_sum_host(lam_ctx *ctx, void *comm, double *x, size_t n) {
  (void)ctx, (void)comm, (void)x, (void)n;
  return NO_NCCL;
}
#endif
