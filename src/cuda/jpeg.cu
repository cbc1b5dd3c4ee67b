/* jpeg.cu — JPEG files decoded on the GPU through nvJPEG, for image folders (src/data/folder.c). Batches
 * go to the GPU's JPEG engines where it has them (nvJPEG's hardware backend: A100, H100/H200), else to
 * nvJPEG's default backend; the pixels come back to the host, where every image is fitted to the set's size
 * as the host-decoded ones are (one fit, so the two decoders differ only in their IDCT and upsampling).
 * What nvJPEG does not take — a header it cannot parse, another channel count, a stream its engines
 * refuse, a batch it fails on — is left to libjpeg, whose messages name the file and say what is wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvjpeg.h>

#include "cuda.h"
#include "../data/data.h"

/* Decoded bytes held on the GPU (and pinned on the host) at once: a batch larger than this is decoded in
 * parts. */
#define GPU_JPEG_MAX_BYTES ((size_t)256 << 20)

struct gpu_jpeg {
  nvjpegHandle_t h;
  nvjpegJpegState_t state;
  nvjpegJpegStream_t stream_info; /* a parsed header, for the engines' "can I decode this" */
  cudaStream_t stream;
  int hardware;
  uint8_t *dev, *host; /* the decoded part: device, then pinned host */
  size_t cap;
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
  if (g->stream_info) nvjpegJpegStreamDestroy(g->stream_info);
  if (g->state) nvjpegJpegStateDestroy(g->state);
  if (g->h) nvjpegDestroy(g->h);
  if (g->stream) cudaStreamDestroy(g->stream);
  cudaFree(g->dev);
  cudaFreeHost(g->host);
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
  if (e == NVJPEG_STATUS_SUCCESS) e = nvjpegJpegStreamCreate(g->h, &g->stream_info);
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

extern "C" const char *gpu_jpeg_backend(const gpu_jpeg *g) { return g->hardware ? "the JPEG engines" : "CUDA"; }

/* Whether nvJPEG takes this stream for a set of c channels: a header it parses, c components, sides within
 * lamina's limits, and (on the engines) a kind they decode; *h, *w its size. */
static int takes(gpu_jpeg *g, const uint8_t *buf, size_t len, int c, int *h, int *w) {
  int nc = 0, ws[NVJPEG_MAX_COMPONENT], hs[NVJPEG_MAX_COMPONENT];
  nvjpegChromaSubsampling_t sub;
  if (nvjpegGetImageInfo(g->h, buf, len, &nc, &sub, ws, hs) != NVJPEG_STATUS_SUCCESS) return 0;
  if (nc != c || (c != 1 && c != 3) || sub == NVJPEG_CSS_UNKNOWN) return 0;
  if (ws[0] < 1 || hs[0] < 1 || (unsigned)ws[0] > DATA_MAX_SIDE || (unsigned)hs[0] > DATA_MAX_SIDE) return 0;
  if (g->hardware) {
    int unsupported = 1; /* nvJPEG's convention: 0 is "supported" */
    if (nvjpegJpegStreamParseHeader(g->h, buf, len, g->stream_info) != NVJPEG_STATUS_SUCCESS ||
        nvjpegDecodeBatchedSupported(g->h, g->stream_info, &unsupported) != NVJPEG_STATUS_SUCCESS || unsupported)
      return 0;
  }
  *h = hs[0], *w = ws[0];
  return 1;
}

/* Grows the device and pinned buffers to bytes. */
static lam_status reserve(gpu_jpeg *g, size_t bytes) {
  if (bytes <= g->cap) return LAM_OK;
  cudaFree(g->dev), cudaFreeHost(g->host);
  g->dev = g->host = NULL, g->cap = 0;
  CUDA_TRY(cudaMalloc((void **)&g->dev, bytes));
  CUDA_TRY(cudaMallocHost((void **)&g->host, bytes));
  g->cap = bytes;
  return LAM_OK;
}

/* One part of a batch, whose decoded bytes fit the buffers: decoded together and brought back. A batch
 * nvJPEG refuses stays undone (the host decodes it and names the bad file). */
static lam_status decode_part(gpu_jpeg *g, int k, const int *at, const uint8_t *const *buf, const size_t *len,
                              const int *h, const int *w, int c, data_image *out, int *done) {
  const uint8_t **ptr = (const uint8_t **)malloc(k * sizeof *ptr);
  size_t *plen = (size_t *)malloc(k * sizeof *plen), *off = (size_t *)malloc((k + 1) * sizeof *off);
  nvjpegImage_t *dst = (nvjpegImage_t *)calloc(k, sizeof *dst);
  lam_status s = LAM_OK;
  if (!ptr || !plen || !off || !dst) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "nvJPEG: no host memory for a batch");
  if (s == LAM_OK) {
    off[0] = 0;
    for (int q = 0; q < k; q++) off[q + 1] = off[q] + (size_t)h[at[q]] * w[at[q]] * c;
    s = reserve(g, off[k]);
  }
  if (s == LAM_OK) {
    for (int q = 0; q < k; q++) {
      ptr[q] = buf[at[q]], plen[q] = len[at[q]];
      dst[q].channel[0] = g->dev + off[q];
      dst[q].pitch[0] = (size_t)w[at[q]] * c; /* interleaved RGB, or grey: one plane */
    }
    const nvjpegOutputFormat_t fmt = c == 3 ? NVJPEG_OUTPUT_RGBI : NVJPEG_OUTPUT_Y;
    nvjpegStatus_t e = nvjpegDecodeBatchedInitialize(g->h, g->state, k, 1, fmt);
    if (e == NVJPEG_STATUS_SUCCESS)
      e = nvjpegDecodeBatched(g->h, g->state, (const unsigned char *const *)ptr, plen, dst, g->stream);
    if (e != NVJPEG_STATUS_SUCCESS) {
      if (getenv("LAMINA_NVJPEG_DEBUG"))
        fprintf(stderr, "lamina: nvJPEG refused a batch of %d (%s, status %d): the host decodes it\n", k,
                nvjpeg_str(e), (int)e);
      k = 0; /* the host's decoder takes the part */
    }
  }
  if (s == LAM_OK && k) {
    s = cuda_status(cudaMemcpyAsync(g->host, g->dev, off[k], cudaMemcpyDeviceToHost, g->stream), "cudaMemcpyAsync",
                    __FILE__, __LINE__);
    if (s == LAM_OK) s = cuda_status(cudaStreamSynchronize(g->stream), "cudaStreamSynchronize", __FILE__, __LINE__);
    int q = 0;
    for (; q < k && s == LAM_OK; q++) {
      data_image *im = &out[at[q]];
      im->px = (uint8_t *)malloc(off[q + 1] - off[q]);
      if (!im->px) {
        s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "nvJPEG: no host memory for a decoded image");
        break;
      }
      memcpy(im->px, g->host + off[q], off[q + 1] - off[q]);
      im->h = h[at[q]], im->w = w[at[q]], im->c = c;
      done[at[q]] = 1;
    }
  }
  free(ptr), free(plen), free(off), free(dst);
  return s;
}

extern "C" lam_status gpu_jpeg_decode(gpu_jpeg *g, int n, const uint8_t *const *buf, const size_t *len, int c,
                                      data_image *out, int *done) {
  for (int i = 0; i < n; i++) done[i] = 0, out[i] = data_image{0, 0, 0, NULL};
  int *h = (int *)malloc(n * sizeof *h), *w = (int *)malloc(n * sizeof *w), *at = (int *)malloc(n * sizeof *at);
  lam_status s = LAM_OK;
  if (!h || !w || !at) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "nvJPEG: no host memory for a batch");
  int k = 0;
  size_t bytes = 0;
  for (int i = 0; i < n && s == LAM_OK; i++) {
    if (!takes(g, buf[i], len[i], c, &h[i], &w[i])) continue;
    const size_t b = (size_t)h[i] * w[i] * c;
    if (k && bytes + b > GPU_JPEG_MAX_BYTES) { /* the part so far, then this one starts the next */
      s = decode_part(g, k, at, buf, len, h, w, c, out, done);
      k = 0, bytes = 0;
    }
    at[k++] = i, bytes += b;
  }
  if (s == LAM_OK && k) s = decode_part(g, k, at, buf, len, h, w, c, out, done);
  if (s != LAM_OK)
    for (int i = 0; i < n; i++) free(out[i].px), out[i].px = NULL, done[i] = 0;
  free(h), free(w), free(at);
  return s;
}
