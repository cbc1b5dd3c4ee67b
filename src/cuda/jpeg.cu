/* jpeg.cu — JPEG files decoded on the GPU through nvJPEG, for image folders (src/data/folder.c). Batches
 * go to the GPU's JPEG engines where it has them (nvJPEG's hardware backend: A100, H100/H200), else to
 * nvJPEG's default backend; each image is fitted to the set's size on the GPU by the host's own arithmetic
 * (fit.h, one definition), and only the fitted pixels come back, so the two decoders differ only in their IDCT
 * and chroma upsampling.
 * What nvJPEG does not take — a header it cannot parse, another channel count, a stream its engines
 * refuse, a batch it fails on — is left to libjpeg, whose messages name the file and say what is wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvjpeg.h>
#include <omp.h>

#include "cuda.h"
#include "../data/data.h"
#include "../data/fit.h"

/* Decoded bytes held on the GPU (and pinned on the host) at once: a batch larger than this is decoded in
 * parts. */
#define GPU_JPEG_MAX_BYTES ((size_t)256 << 20)

typedef struct fit_job {
  size_t off; /* in gpu_jpeg.dev */
  int h, w;
} fit_job;

struct gpu_jpeg {
  nvjpegHandle_t h;
  nvjpegJpegState_t state;
  nvjpegJpegStream_t *stream_info; /* a parsed header per host thread, for the engines' "can I decode this" */
  int threads;
  cudaStream_t stream;
  int hardware;
  uint8_t *dev; /* a part's decoded images, full size */
  size_t cap;
  uint8_t *fitted, *host; /* its images fitted: device, then pinned host */
  size_t fitted_cap;
  fit_job *jobs, *djobs; /* where each image is in dev: pinned host, device */
  size_t jobs_cap;        /* bytes */
};

static const char *nvjpeg_str(nvjpegStatus_t s) {
  switch (s) {
  case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
  case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
  case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
  case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
  case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
  case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
  case NVJPEG_STATUS_ARCH_MISMATCH: return "no such backend on this GPU";
  case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
  default: return "error";
  }
}

extern "C" void gpu_jpeg_close(gpu_jpeg *g) {
  if (!g) return;
  for (int t = 0; g->stream_info && t < g->threads; t++)
    if (g->stream_info[t]) nvjpegJpegStreamDestroy(g->stream_info[t]);
  free(g->stream_info);
  if (g->state) nvjpegJpegStateDestroy(g->state);
  if (g->h) nvjpegDestroy(g->h);
  if (g->stream) cudaStreamDestroy(g->stream);
  cudaFree(g->dev), cudaFree(g->fitted), cudaFree(g->djobs);
  cudaFreeHost(g->host), cudaFreeHost(g->jobs);
  free(g);
}

extern "C" lam_status gpu_jpeg_open(gpu_jpeg **out) {
  *out = NULL;
  const char *why = NULL;
  if (cuda_device_count(&why) < 1) return LAM_FAIL(LAM_ERR_NO_DEVICE, "no CUDA device for nvJPEG: %s", why);
  gpu_jpeg *g = (gpu_jpeg *)calloc(1, sizeof *g);
  if (!g) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "nvJPEG: no host memory");
  /* LAMINA_NVJPEG=cuda keeps off the engines (to compare the two backends) */
  const char *env = getenv("LAMINA_NVJPEG");
  nvjpegStatus_t e = NVJPEG_STATUS_ARCH_MISMATCH;
  if (!env || strcmp(env, "cuda")) e = nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, NVJPEG_FLAGS_DEFAULT, &g->h);
  g->hardware = e == NVJPEG_STATUS_SUCCESS;
  if (!g->hardware) {
    g->h = NULL;
    e = nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, NULL, NULL, NVJPEG_FLAGS_DEFAULT, &g->h);
  }
  if (e == NVJPEG_STATUS_SUCCESS) e = nvjpegJpegStateCreate(g->h, &g->state);
  g->threads = omp_get_max_threads();
  g->stream_info = (nvjpegJpegStream_t *)calloc(g->threads, sizeof *g->stream_info);
  if (!g->stream_info) e = NVJPEG_STATUS_ALLOCATOR_FAILURE;
  for (int t = 0; t < g->threads && e == NVJPEG_STATUS_SUCCESS; t++) e = nvjpegJpegStreamCreate(g->h, &g->stream_info[t]);
  if (e != NVJPEG_STATUS_SUCCESS) {
    gpu_jpeg_close(g);
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "nvJPEG could not be started: %s (status %d)", nvjpeg_str(e), (int)e);
  }
  lam_status s = cuda_status(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
                             __FILE__, __LINE__);
  if (s != LAM_OK) {
    gpu_jpeg_close(g);
    return s;
  }
  *out = g;
  return LAM_OK;
}

/* Whether nvJPEG takes this stream for a set of c channels: a header it parses, c components, sides within
 * lamina's limits (H x W exactly unless fit), and (on the engines) a kind they decode; *h, *w its size. */
static int takes(gpu_jpeg *g, const uint8_t *buf, size_t len, int c, int H, int W, int fit, int *h, int *w) {
  int nc = 0, ws[NVJPEG_MAX_COMPONENT], hs[NVJPEG_MAX_COMPONENT];
  nvjpegChromaSubsampling_t sub;
  if (nvjpegGetImageInfo(g->h, buf, len, &nc, &sub, ws, hs) != NVJPEG_STATUS_SUCCESS) return 0;
  if (nc != c || (c != 1 && c != 3) || sub == NVJPEG_CSS_UNKNOWN) return 0;
  if (ws[0] < 1 || hs[0] < 1 || (unsigned)ws[0] > DATA_MAX_SIDE || (unsigned)hs[0] > DATA_MAX_SIDE) return 0;
  if (!fit && (hs[0] != H || ws[0] != W)) return 0; /* the host says what is wrong with it */
  if (g->hardware) {
    int unsupported = 1; /* nvJPEG's convention: 0 is "supported" */
    nvjpegJpegStream_t js = g->stream_info[omp_get_thread_num()];
    if (nvjpegJpegStreamParseHeader(g->h, buf, len, js) != NVJPEG_STATUS_SUCCESS ||
        nvjpegDecodeBatchedSupported(g->h, js, &unsupported) != NVJPEG_STATUS_SUCCESS || unsupported)
      return 0;
  }
  *h = hs[0], *w = ws[0];
  return 1;
}

/* Grows a device buffer (and its pinned host twin where host is not NULL) to bytes. */
static lam_status reserve(void **dev, void **host, size_t *cap, size_t bytes) {
  if (bytes <= *cap) return LAM_OK;
  cudaFree(*dev);
  *dev = NULL;
  if (host) cudaFreeHost(*host), *host = NULL;
  *cap = 0;
  CUDA_TRY(cudaMalloc(dev, bytes));
  if (host) CUDA_TRY(cudaMallocHost(host, bytes));
  *cap = bytes;
  return LAM_OK;
}

/* Image blockIdx.x of the part fitted to H x W: fit_sample for every output, as image_fit does on the host. */
__global__ void fit_kernel(const uint8_t *dev, const fit_job *jobs, int H, int W, int c, uint8_t *out) {
  const fit_job j = jobs[blockIdx.x];
  const uint8_t *px = dev + j.off;
  uint8_t *o = out + (size_t)blockIdx.x * H * W * c;
  const int n = H * W * c;
  if (j.h == H && j.w == W) {
    for (int t = threadIdx.x; t < n; t += blockDim.x) o[t] = px[t];
    return;
  }
  double scale, oy, ox;
  fit_geometry(j.h, j.w, H, W, &scale, &oy, &ox);
  for (int t = threadIdx.x; t < n; t += blockDim.x) {
    const int q = t % c, x = t / c % W, y = t / c / W;
    o[t] = fit_sample(px, j.h, j.w, c, scale, y + oy, x + ox, q);
  }
}

/* One part of a batch, whose decoded and fitted bytes fit the buffers: decoded together, fitted on the GPU, the
 * fitted pixels brought back into dst. A batch nvJPEG refuses stays undone (the host decodes it and names the
 * bad file). */
static lam_status decode_part(gpu_jpeg *g, int k, const int *at, const uint8_t *const *buf, const size_t *len,
                              const int *h, const int *w, int c, int H, int W, uint8_t *const *dst, int *done) {
  const uint8_t **ptr = (const uint8_t **)malloc(k * sizeof *ptr);
  size_t *plen = (size_t *)malloc(k * sizeof *plen), *off = (size_t *)malloc((k + 1) * sizeof *off);
  nvjpegImage_t *img = (nvjpegImage_t *)calloc(k, sizeof *img);
  const size_t one = (size_t)H * W * c;
  lam_status s = LAM_OK;
  if (!ptr || !plen || !off || !img) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "nvJPEG: no host memory for a batch");
  if (s == LAM_OK) {
    off[0] = 0;
    for (int q = 0; q < k; q++) off[q + 1] = off[q] + (size_t)h[at[q]] * w[at[q]] * c;
    s = reserve((void **)&g->dev, NULL, &g->cap, off[k]);
    if (s == LAM_OK) s = reserve((void **)&g->fitted, (void **)&g->host, &g->fitted_cap, k * one);
    if (s == LAM_OK) s = reserve((void **)&g->djobs, (void **)&g->jobs, &g->jobs_cap, k * sizeof(fit_job));
  }
  if (s == LAM_OK) {
    for (int q = 0; q < k; q++) {
      ptr[q] = buf[at[q]], plen[q] = len[at[q]];
      img[q].channel[0] = g->dev + off[q];
      img[q].pitch[0] = (size_t)w[at[q]] * c; /* interleaved RGB, or grey: one plane */
      g->jobs[q] = fit_job{off[q], h[at[q]], w[at[q]]};
    }
    const nvjpegOutputFormat_t fmt = c == 3 ? NVJPEG_OUTPUT_RGBI : NVJPEG_OUTPUT_Y;
    nvjpegStatus_t e = nvjpegDecodeBatchedInitialize(g->h, g->state, k, 1, fmt);
    if (e == NVJPEG_STATUS_SUCCESS)
      e = nvjpegDecodeBatched(g->h, g->state, (const unsigned char *const *)ptr, plen, img, g->stream);
    if (e != NVJPEG_STATUS_SUCCESS) {
      if (getenv("LAMINA_NVJPEG_DEBUG"))
        fprintf(stderr, "lamina: nvJPEG refused a batch of %d (%s, status %d): the host decodes it\n", k,
                nvjpeg_str(e), (int)e);
      k = 0; /* the host's decoder takes the part */
    }
  }
  if (s == LAM_OK && k) {
    s = cuda_status(cudaMemcpyAsync(g->djobs, g->jobs, k * sizeof(fit_job), cudaMemcpyHostToDevice, g->stream),
                    "cudaMemcpyAsync", __FILE__, __LINE__);
    if (s == LAM_OK) {
      fit_kernel<<<k, 256, 0, g->stream>>>(g->dev, g->djobs, H, W, c, g->fitted);
      s = cuda_status(cudaGetLastError(), "fit_kernel", __FILE__, __LINE__);
    }
    if (s == LAM_OK)
      s = cuda_status(cudaMemcpyAsync(g->host, g->fitted, k * one, cudaMemcpyDeviceToHost, g->stream),
                      "cudaMemcpyAsync", __FILE__, __LINE__);
    if (s == LAM_OK) s = cuda_status(cudaStreamSynchronize(g->stream), "cudaStreamSynchronize", __FILE__, __LINE__);
    for (int q = 0; q < k && s == LAM_OK; q++) {
      memcpy(dst[at[q]], g->host + q * one, one);
      done[at[q]] = 1;
    }
  }
  free(ptr), free(plen), free(off), free(img);
  return s;
}

extern "C" lam_status gpu_jpeg_decode(gpu_jpeg *g, int n, const uint8_t *const *buf, const size_t *len, int c, int H,
                                      int W, int fit, uint8_t *const *dst, int *done) {
  for (int i = 0; i < n; i++) done[i] = 0;
  int *h = (int *)malloc(n * sizeof *h), *w = (int *)malloc(n * sizeof *w), *at = (int *)malloc(n * sizeof *at);
  int *ok = (int *)malloc(n * sizeof *ok);
  lam_status s = LAM_OK;
  if (!h || !w || !at || !ok) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "nvJPEG: no host memory for a batch");
  const size_t one = (size_t)H * W * c;
  if (s == LAM_OK) { /* the headers on all host threads (the handle is shared, each thread parses into its own stream) */
#pragma omp parallel for schedule(dynamic, 64) num_threads(g->threads)
    for (int i = 0; i < n; i++) ok[i] = takes(g, buf[i], len[i], c, H, W, fit, &h[i], &w[i]);
  }
  int k = 0;
  size_t bytes = 0;
  for (int i = 0; i < n && s == LAM_OK; i++) {
    if (!ok[i]) continue;
    const size_t b = (size_t)h[i] * w[i] * c;
    if (k && (bytes + b > GPU_JPEG_MAX_BYTES || (k + 1) * one > GPU_JPEG_MAX_BYTES)) { /* the part so far first */
      s = decode_part(g, k, at, buf, len, h, w, c, H, W, dst, done);
      k = 0, bytes = 0;
    }
    at[k++] = i, bytes += b;
  }
  if (s == LAM_OK && k) s = decode_part(g, k, at, buf, len, h, w, c, H, W, dst, done);
  free(h), free(w), free(at), free(ok);
  return s;
}
