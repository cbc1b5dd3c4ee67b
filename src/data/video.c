/* video.c — video files through FFmpeg's libraries (libavformat, libavcodec, libswscale; opened on first use): a clip
 * of T frames, every S-th from a first frame, decoded from a file and fitted to H x W as image folders fit images;
 * and a set of frames written as a video file (H.264 where libavcodec has an encoder for it, else MPEG-4 Part 2),
 * so tests and `lamina data clips --format mp4` have files to read.
 *
 * A clip is read by seeking to the key frame at or before its first frame and decoding forward, keeping only the
 * frames it takes: a clip of 16 frames from a 10 s video decodes about a GOP and its 16*S frames, not the video.
 * Frames are numbered by their presentation time against the stream's frame rate (variable-rate files: by the
 * nearest frame of the nominal rate). A video shorter than the clip repeats its last frame. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fit.h"
#include "../internal.h"
#include "../status.h"

#ifdef LAMINA_WITH_FFMPEG
#include <dlfcn.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/hwcontext.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>

/* FFmpeg's libraries are opened when a video is first read or written, not when lamina loads: linked, libavformat and
 * what it pulls in put some 27 MB in every process's resident memory (their relocations), video or not. The
 * functions are looked up by name from the sonames of the headers built against. */
#define FF_FUNCS(X) \
  X(0, avformat_open_input) \
  X(0, avformat_find_stream_info) \
  X(0, av_find_best_stream) \
  X(0, avformat_close_input) \
  X(0, av_read_frame) \
  X(0, av_seek_frame) \
  X(0, avio_seek) \
  X(0, avformat_alloc_output_context2) \
  X(0, avformat_new_stream) \
  X(0, avio_open) \
  X(0, avformat_write_header) \
  X(0, av_interleaved_write_frame) \
  X(0, av_write_trailer) \
  X(0, avio_closep) \
  X(0, avformat_free_context) \
  X(1, avcodec_alloc_context3) \
  X(1, avcodec_parameters_to_context) \
  X(1, avcodec_open2) \
  X(1, avcodec_free_context) \
  X(1, av_packet_alloc) \
  X(1, av_packet_unref) \
  X(1, av_packet_free) \
  X(1, avcodec_receive_frame) \
  X(1, avcodec_send_packet) \
  X(1, avcodec_flush_buffers) \
  X(1, avcodec_parameters_alloc) \
  X(1, avcodec_parameters_copy) \
  X(1, avcodec_parameters_free) \
  X(1, avcodec_find_encoder_by_name) \
  X(1, avcodec_find_encoder) \
  X(1, avcodec_parameters_from_context) \
  X(1, avcodec_send_frame) \
  X(1, avcodec_receive_packet) \
  X(1, av_packet_rescale_ts) \
  X(2, av_strerror) \
  X(2, av_rescale_q_rnd) \
  X(2, av_rescale_q) \
  X(2, av_frame_alloc) \
  X(2, av_frame_unref) \
  X(2, av_frame_free) \
  X(2, av_frame_move_ref) \
  X(2, av_opt_set) \
  X(2, av_frame_get_buffer) \
  X(2, av_frame_make_writable) \
  X(2, av_log_set_level) \
  X(2, av_hwdevice_ctx_create) \
  X(2, av_hwframe_transfer_data) \
  X(2, av_buffer_ref) \
  X(2, av_buffer_unref) \
  X(1, avcodec_get_hw_config) \
  X(1, avcodec_find_decoder_by_name) \
  X(2, av_dict_set) \
  X(2, av_dict_free) \
  X(3, sws_getCachedContext) \
  X(3, sws_scale) \
  X(3, sws_freeContext) \
  X(3, sws_getContext)
static struct {
#define X(lib, f) __typeof__(f) *f;
  FF_FUNCS(X)
#undef X
} ff;
static int ff_ok;
static char ff_error[600];

static void ff_load(void) {
  static const char *const so[4] = {"libavformat.so." AV_STRINGIFY(LIBAVFORMAT_VERSION_MAJOR),
                                    "libavcodec.so." AV_STRINGIFY(LIBAVCODEC_VERSION_MAJOR),
                                    "libavutil.so." AV_STRINGIFY(LIBAVUTIL_VERSION_MAJOR),
                                    "libswscale.so." AV_STRINGIFY(LIBSWSCALE_VERSION_MAJOR)};
  void *h[4];
  for (int k = 0; k < 4; k++)
    if (!(h[k] = dlopen(so[k], RTLD_NOW | RTLD_LOCAL))) {
      snprintf(ff_error, sizeof ff_error, "FFmpeg's %s cannot be loaded (%s): install the libraries this lamina was "
               "built against (Debian: libavformat59, libavcodec59, libavutil57, libswscale6)", so[k], dlerror());
      return;
    }
#define X(lib, f)                                                                                                    \
  if (!(ff.f = (__typeof__(f) *)dlsym(h[lib], #f))) {                                                              \
    snprintf(ff_error, sizeof ff_error, "FFmpeg's %s has no %s: it is not the version this lamina was built against", \
             so[lib], #f);                                                                                           \
    return;                                                                                                          \
  }
  FF_FUNCS(X)
#undef X
  ff.av_log_set_level(AV_LOG_QUIET); /* what goes wrong comes back as an error naming the file */
  ff_ok = 1;
}

static int ff_loaded(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, ff_load);
  return ff_ok;
}

/* LAM_OK once the libraries are there; else LAM_ERR_UNSUPPORTED saying what is missing, naming path. */
static lam_status ff_ready(const char *path) {
  return ff_loaded() ? LAM_OK : LAM_FAIL(LAM_ERR_UNSUPPORTED, "video file '%s': %s", path, ff_error);
}

int video_supported(void) { return ff_loaded(); }
const char *video_unsupported_why(void) { return ff_loaded() ? "" : ff_error; }



static const char *av_why(int err, char *buf, size_t cap) {
  ff.av_strerror(err, buf, cap);
  return buf;
}

/* NVDEC: the GPU's video engines, through FFmpeg's CUDA hwaccel (the nvdec decoders of h264, hevc, mpeg4, vp9), on
 * a CUDA context of device 0 that FFmpeg makes for itself, once for the process when first asked for (not the
 * runtime's primary context, lamina's: FFmpeg wants it with blocking synchronisation, and an active primary context
 * cannot change its flags). Decoded frames stay on the device until a clip takes them; those are copied back (NV12)
 * and fitted as the host's. */
static AVBufferRef *nvdec_dev;
static char nvdec_error[300];
static void nvdec_make(void) {
  int e = ff.av_hwdevice_ctx_create(&nvdec_dev, AV_HWDEVICE_TYPE_CUDA, "0", NULL, 0);
  if (e < 0) {
    char why[128];
    snprintf(nvdec_error, sizeof nvdec_error, "FFmpeg cannot open a CUDA device for NVDEC: %s (is there a GPU and its "
             "driver's libcuda and libnvcuvid?)", av_why(e, why, sizeof why));
    nvdec_dev = NULL;
  }
}

int video_nvdec(const char **why) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (!ff_loaded()) {
    if (why) *why = ff_error;
    return 0;
  }
  pthread_once(&once, nvdec_make);
  if (why) *why = nvdec_dev ? "" : nvdec_error;
  return nvdec_dev != NULL;
}

/* The decoder's get_format: frames on the device, or none (a stream the hwaccel cannot take is an error, not a
 * silent decode on the host). */
static enum AVPixelFormat nvdec_format(AVCodecContext *dec, const enum AVPixelFormat *fmts) {
  (void)dec;
  for (; *fmts != AV_PIX_FMT_NONE; fmts++)
    if (*fmts == AV_PIX_FMT_CUDA) return AV_PIX_FMT_CUDA;
  return AV_PIX_FMT_NONE;
}

/* The NVDEC route: FFmpeg's cuvid decoders (h264_cuvid, ...: NVDEC's own parser and a queue of decode surfaces, the
 * frame cropped and resized on the video engine, copied back at the clip's size) where the codec has one, else its
 * CUDA hwaccel (each frame mapped and copied at its full size). nvdec_hwaccel 1: the hwaccel always (the lab's
 * comparison, dev/lab_video_decode.c). */
static int nvdec_hwaccel;
void video_nvdec_route(int hwaccel) { nvdec_hwaccel = hwaccel; }

/* The cuvid decoder's get_format: NV12 frames in host memory (the copy back is the decoder's, at the clip's size). */
static enum AVPixelFormat cuvid_format(AVCodecContext *dec, const enum AVPixelFormat *fmts) {
  (void)dec;
  for (; *fmts != AV_PIX_FMT_NONE; fmts++)
    if (*fmts == AV_PIX_FMT_NV12) return AV_PIX_FMT_NV12;
  return AV_PIX_FMT_NONE;
}

/* The cuvid options that fit a w x h stream to H x W as image_fit does (cover, then the centre cropped): the crop of
 * the source (top x bottom x left x right) and the size it is resized to, both even (NV12); an odd H or W is
 * resized to the even size above it and fitted the last pixel by put_frame. */
static void cuvid_fit(int h, int w, int H, int W, char crop[64], char resize[32]) {
  double scale, oy, ox;
  fit_geometry(h, w, H, W, &scale, &oy, &ox);
  int top = (int)(oy / scale + 0.5) & ~1, left = (int)(ox / scale + 0.5) & ~1;
  int ch = (int)(H / scale + 0.5), cw = (int)(W / scale + 0.5);
  ch = (ch + 1) & ~1, cw = (cw + 1) & ~1;
  if (top + ch > h) top = (h - ch) & ~1;
  if (left + cw > w) left = (w - cw) & ~1;
  if (top < 0) top = 0;
  if (left < 0) left = 0;
  snprintf(crop, 64, "%dx%dx%dx%d", top, h - top - ch > 0 ? h - top - ch : 0, left, w - left - cw > 0 ? w - left - cw : 0);
  snprintf(resize, 32, "%dx%d", (W + 1) & ~1, (H + 1) & ~1);
}

/* An opened video: its container, its video stream's decoder, and the frame rate frames are numbered by. */
/* A thread's converter, frame buffer and last decoder, kept from clip to clip: clips are decoded many at once, one a
 * thread, and making a converter or a decoder costs more than a small clip's decoding (their tables, the H.264
 * decoder's state and frame pool: a third of a 16-frame clip's time; an NVDEC decoder's surfaces cost more again). A
 * decoder is taken again only for a stream of the same codec, size, pixel format and extradata (H.264's SPS and
 * PPS), flushed first: the same frames as a new one decodes. One a thread for the host and one for NVDEC (dec[gpu]).
 * Freed when the thread ends. */
typedef struct frame_tls {
  struct SwsContext *sws;
  uint8_t *px;
  size_t cap;
  AVCodecContext *dec[2]; /* the last clip's host [0] and NVDEC [1] decoder, or NULL */
  AVCodecParameters *par[2]; /* the streams they were opened for */
  int fit_h, fit_w; /* the NVDEC decoder's output size */
} frame_tls;
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static void tls_drop(void *p) {
  frame_tls *t = p;
  ff.sws_freeContext(t->sws);
  for (int g = 0; g < 2; g++) ff.avcodec_free_context(&t->dec[g]), ff.avcodec_parameters_free(&t->par[g]);
  free(t->px), free(t);
}
static void tls_make(void) {
  if (pthread_key_create(&tls_key, tls_drop) != 0) tls_key = (pthread_key_t)-1;
}
static frame_tls *tls_get(void) {
  pthread_once(&tls_once, tls_make);
  if (tls_key == (pthread_key_t)-1) return NULL;
  frame_tls *t = pthread_getspecific(tls_key);
  if (!t && (t = calloc(1, sizeof *t)) && pthread_setspecific(tls_key, t) != 0) free(t), t = NULL;
  return t;
}

typedef struct vid {
  AVFormatContext *fmt;
  AVCodecContext *dec;
  int stream;
  AVRational rate, tb;
  int64_t start_pts;
  int gpu;
  int fit_h, fit_w; /* NVDEC's cuvid route: the size its frames come out at (0: the stream's) */
  int64_t pos;  /* the file's byte position after the last packet read (vid_read) */
  int stalled;  /* packets read in a row that took no byte of the file */
  /* vid_next's: the decoder drained; video packets read, frames decoded, packets since the last frame; the packets
   * and frames a read may take (budget) and the frame it reads up to (last, for the error), -1 the whole video */
  int draining;
  int64_t packets, frames, idle, budget, last;
} vid;

/* Whether a decoder opened for a and one for b decode alike. */
static int same_stream(const AVCodecParameters *a, const AVCodecParameters *b) {
  return a->codec_id == b->codec_id && a->width == b->width && a->height == b->height && a->format == b->format &&
         a->profile == b->profile && a->extradata_size == b->extradata_size &&
         (!a->extradata_size || !memcmp(a->extradata, b->extradata, (size_t)a->extradata_size));
}

/* Closes v; its decoder is kept for the thread's next clip where reuse says it decoded without error. */
static void vid_close_keep(vid *v, int reuse) {
  frame_tls *t = reuse && v->dec && v->fmt ? tls_get() : NULL;
  AVCodecParameters *par = t ? ff.avcodec_parameters_alloc() : NULL;
  if (par && ff.avcodec_parameters_copy(par, v->fmt->streams[v->stream]->codecpar) >= 0) {
    const int g = v->gpu;
    ff.avcodec_free_context(&t->dec[g]);
    ff.avcodec_parameters_free(&t->par[g]);
    t->dec[g] = v->dec, t->par[g] = par, v->dec = NULL;
    if (g) t->fit_h = v->fit_h, t->fit_w = v->fit_w;
  } else {
    ff.avcodec_parameters_free(&par);
  }
  ff.avcodec_free_context(&v->dec);
  ff.avformat_close_input(&v->fmt);
}

static void vid_close(vid *v) { vid_close_keep(v, 0); }

/* 1 for frames of w x h within the bounds (data.h): what a frame may cost before it is allocated. */
static int frame_ok(int w, int h) {
  return w >= 1 && h >= 1 && w <= VIDEO_MAX_SIDE && h <= VIDEO_MAX_SIDE && (int64_t)w * h <= VIDEO_MAX_PIXELS;
}

static lam_status vid_open(const char *path, int gpu, int H, int W, vid *v) {
  memset(v, 0, sizeof *v);
  LAM_TRY(ff_ready(path));
  char why[128], max_pixels[32];
  snprintf(max_pixels, sizeof max_pixels, "%d", VIDEO_MAX_PIXELS);
  /* the file itself only: a file that is a playlist (HLS, concat) makes FFmpeg fetch no URL it names */
  AVDictionary *opt = NULL;
  ff.av_dict_set(&opt, "protocol_whitelist", "file", 0);
  int e = ff.avformat_open_input(&v->fmt, path, NULL, &opt);
  ff.av_dict_free(&opt);
  if (e < 0)
    return LAM_FAIL(LAM_ERR_IO, "video file '%s' cannot be opened: %s (is it a video file?)", path,
                    av_why(e, why, sizeof why));
  lam_status s = LAM_OK;
  /* what the container's header says is enough (MP4/MOV: the codec, the size, the rate, the frame count; the pixel
   * format each decoded frame carries): probing the streams would open a second decoder and decode frames only to
   * find them out again (a fifth of a 16-frame clip's time at 112x112) */
  int told = 0;
  for (unsigned k = 0; k < v->fmt->nb_streams; k++) {
    const AVStream *st = v->fmt->streams[k];
    const AVCodecParameters *p = st->codecpar;
    if (p->codec_type == AVMEDIA_TYPE_VIDEO && p->codec_id != AV_CODEC_ID_NONE && p->width > 0 && p->height > 0 &&
        st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0 && st->r_frame_rate.num > 0 && st->nb_frames > 0)
      told = 1;
  }

  /* the decoders stream probing opens refuse frames over the bound before they allocate them (a header claims any
   * size), as ours below does */
  const unsigned ns = v->fmt->nb_streams;
  AVDictionary **sopt = ns ? calloc(ns, sizeof *sopt) : NULL;
  if (ns && !sopt) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video file '%s': no memory for its %u streams", path, ns);
  for (unsigned k = 0; sopt && k < ns; k++) ff.av_dict_set(&sopt[k], "max_pixels", max_pixels, 0);
  if (s == LAM_OK && !told && (e = ff.avformat_find_stream_info(v->fmt, sopt)) < 0)
    s = LAM_FAIL(LAM_ERR_IO, "video file '%s': its streams cannot be read: %s; the file is damaged", path,
                 av_why(e, why, sizeof why));
  for (unsigned k = 0; sopt && k < ns; k++) ff.av_dict_free(&sopt[k]);
  free(sopt);
  const AVCodec *codec = NULL;
  if (s == LAM_OK && (v->stream = ff.av_find_best_stream(v->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0)) < 0)
    s = LAM_FAIL(LAM_ERR_IO, "video file '%s' has no video stream%s", path,
                 v->stream == AVERROR_DECODER_NOT_FOUND ? " this FFmpeg build can decode" : "");
  v->gpu = gpu;
  /* NVDEC's cuvid decoder for the codec (h264_cuvid for h264), where this FFmpeg has one */
  const AVCodec *cuvid = NULL;
  if (s == LAM_OK && gpu && !nvdec_hwaccel) {
    char name[64];
    snprintf(name, sizeof name, "%s_cuvid", codec->name);
    cuvid = ff.avcodec_find_decoder_by_name(name);
  }
  if (cuvid) v->fit_h = H, v->fit_w = W;
  frame_tls *t = s == LAM_OK ? tls_get() : NULL;
  if (t && t->dec[gpu] && same_stream(t->par[gpu], v->fmt->streams[v->stream]->codecpar) &&
      (!gpu || (t->fit_h == v->fit_h && t->fit_w == v->fit_w))) { /* the thread's last decoder */
    AVStream *st = v->fmt->streams[v->stream];
    v->dec = t->dec[gpu], t->dec[gpu] = NULL;
    ff.avcodec_flush_buffers(v->dec);
    v->rate = st->r_frame_rate.num > 0 && st->r_frame_rate.den > 0 ? st->r_frame_rate : st->avg_frame_rate;
    if (v->rate.num <= 0 || v->rate.den <= 0) v->rate = (AVRational){25, 1};
    v->tb = st->time_base;
    v->start_pts = st->start_time != AV_NOPTS_VALUE ? st->start_time : 0;
  } else if (s == LAM_OK) {
    AVStream *st = v->fmt->streams[v->stream];
    AVDictionary *dopt = NULL;
    if (cuvid) codec = cuvid;
    v->dec = ff.avcodec_alloc_context3(codec);
    if (v->dec) v->dec->thread_count = 1; /* clips are decoded many at once, one a thread */
    if (v->dec) v->dec->max_pixels = VIDEO_MAX_PIXELS;
    if (!v->dec) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video file '%s': no memory for a decoder", path);
    else if (gpu) {
      int cuda = cuvid != NULL;
      for (int k = 0; !cuda; k++) {
        const AVCodecHWConfig *hc = ff.avcodec_get_hw_config(codec, k);
        if (!hc) break;
        cuda = hc->device_type == AV_HWDEVICE_TYPE_CUDA && (hc->methods & AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX);
      }
      if (!cuda || !video_nvdec(NULL))
        s = LAM_FAIL(LAM_ERR_UNSUPPORTED, "video file '%s': --decode gpu: %s", path,
                     !cuda ? "its codec has no NVDEC decoder in this FFmpeg (decode it on the host: --decode cpu)"
                           : nvdec_error);
      else if (!(v->dec->hw_device_ctx = ff.av_buffer_ref(nvdec_dev)))
        s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video file '%s': no memory for a decoder", path);
      v->dec->get_format = cuvid ? cuvid_format : nvdec_format;
      if (cuvid && H > 0 && W > 0 && frame_ok(st->codecpar->width, st->codecpar->height)) {
        char crop[64], resize[32];
        cuvid_fit(st->codecpar->height, st->codecpar->width, H, W, crop, resize);
        ff.av_dict_set(&dopt, "crop", crop, 0), ff.av_dict_set(&dopt, "resize", resize, 0);
      }
      v->dec->pkt_timebase = st->time_base;
    }
    if (s != LAM_OK) {
    } else if ((e = ff.avcodec_parameters_to_context(v->dec, st->codecpar)) < 0 || (e = ff.avcodec_open2(v->dec, codec, &dopt)) < 0)
      s = LAM_FAIL(LAM_ERR_IO, "video file '%s': its %s decoder cannot be opened: %s", path, codec->name,
                   av_why(e, why, sizeof why));
    ff.av_dict_free(&dopt);
    /* the rate frames are numbered by: the stream's base rate (every timestamp a whole frame of it, for a file of
     * one rate); the average (a short file's frames over its duration, 25.6 for 40 frames at 25) otherwise */
    v->rate = st->r_frame_rate.num > 0 && st->r_frame_rate.den > 0 ? st->r_frame_rate : st->avg_frame_rate;
    if (v->rate.num <= 0 || v->rate.den <= 0) v->rate = (AVRational){25, 1};
    v->tb = st->time_base;
    v->start_pts = st->start_time != AV_NOPTS_VALUE ? st->start_time : 0;
  }
  if (s == LAM_OK && !frame_ok(v->dec->width, v->dec->height))
    s = LAM_FAIL(LAM_ERR_IO, "video file '%s': frames of %dx%d (1 to %d a side, %d pixels at most); the file is "
                 "damaged or too large", path, v->dec->width, v->dec->height, VIDEO_MAX_SIDE, VIDEO_MAX_PIXELS);
  if (s != LAM_OK) vid_close(v);
  return s;
}

/* The next packet of the file (any stream), or an AVERROR: AVERROR_EOF at its end, VID_STALLED where
 * VIDEO_MAX_STALL packets in a row took no byte of it (a demuxer going round in a damaged file: never a hang). */
#define VID_STALLED FFERRTAG('L', 'S', 'T', 'L')
static int vid_read(vid *v, AVPacket *pkt) {
  const int e = ff.av_read_frame(v->fmt, pkt);
  if (e < 0) return e;
  const int64_t pos = v->fmt->pb ? ff.avio_seek(v->fmt->pb, 0, SEEK_CUR) : -1;
  if (pos >= 0 && pos != v->pos) v->pos = pos, v->stalled = 0;
  else if (++v->stalled > VIDEO_MAX_STALL) {
    ff.av_packet_unref(pkt);
    return VID_STALLED;
  }
  return 0;
}

/* A damaged file's error for av_read_frame's e (not AVERROR_EOF). */
static lam_status read_failed(const char *path, int e) {
  char why[128];
  if (e == VID_STALLED)
    return LAM_FAIL(LAM_ERR_IO, "video file '%s': reading it makes no progress (%d packets in a row from the same "
                    "place); the file is damaged", path, VIDEO_MAX_STALL);
  return LAM_FAIL(LAM_ERR_IO, "video file '%s': reading it failed: %s; the file is damaged", path,
                  av_why(e, why, sizeof why));
}

/* The decoder's next frame into f, reading the packets it needs: 1 a frame, 0 the video's end, -1 an error (in *s):
 * a damaged file, or a decode that makes no progress (more than v->budget video packets or frames, or VIDEO_MAX_STALL
 * packets in a row without a frame: never a hang). */
static int vid_next(vid *v, const char *path, AVPacket *pkt, AVFrame *f, lam_status *s) {
  char why[128];
  for (;;) {
    if (v->packets > v->budget || v->frames > v->budget || v->idle > VIDEO_MAX_STALL) {
      *s = LAM_FAIL(LAM_ERR_IO, "video file '%s': decoding makes no progress (%lld video packets read and %lld frames "
                    "decoded for a clip ending at frame %lld, %lld packets since the last frame); the file is damaged",
                    path, (long long)v->packets, (long long)v->frames, (long long)v->last, (long long)v->idle);
      return -1;
    }
    int e = ff.avcodec_receive_frame(v->dec, f);
    if (e == AVERROR(EAGAIN)) {
      if (v->draining) return 0;
      e = vid_read(v, pkt);
      if (e == AVERROR_EOF) {
        ff.avcodec_send_packet(v->dec, NULL), v->draining = 1;
        continue;
      }
      if (e < 0) {
        *s = read_failed(path, e);
        return -1;
      }
      v->idle++;
      v->packets += pkt->stream_index == v->stream;
      if (pkt->stream_index == v->stream && (e = ff.avcodec_send_packet(v->dec, pkt)) < 0 && e != AVERROR(EAGAIN))
        *s = LAM_FAIL(LAM_ERR_IO, "video file '%s': a packet cannot be decoded: %s; the file is damaged", path,
                      av_why(e, why, sizeof why));
      ff.av_packet_unref(pkt);
      if (*s != LAM_OK) return -1;
      continue;
    }
    if (e == AVERROR_EOF) return 0;
    if (e < 0) {
      *s = LAM_FAIL(LAM_ERR_IO, "video file '%s': a frame cannot be decoded: %s; the file is damaged", path,
                    av_why(e, why, sizeof why));
      return -1;
    }
    v->frames++, v->idle = 0;
    return 1;
  }
}

/* The frame number of a presentation time; INT64_MIN where it has none (out of int64's range: a damaged file), the
 * rest kept within +-2^62 so that the clip's arithmetic on it cannot overflow. */
static int64_t frame_of(const vid *v, int64_t pts) {
  int64_t d;
  if (pts == AV_NOPTS_VALUE || __builtin_sub_overflow(pts, v->start_pts, &d)) return INT64_MIN;
  const int64_t f = ff.av_rescale_q_rnd(d, v->tb, av_inv_q(v->rate), AV_ROUND_NEAR_INF);
  if (f == INT64_MIN) return INT64_MIN; /* av_rescale's overflow */
  const int64_t lim = INT64_C(1) << 62;
  return f > lim ? lim : f < -lim ? -lim : f;
}

/* The number of decoded frame f, following last_idx: its own time (best_effort_timestamp guesses from the packets'
 * decode times, and after a seek guesses one frame early), or where it has none the frame after last_idx. */
static int64_t frame_number(const vid *v, const AVFrame *f, int64_t last_idx) {
  const int64_t idx = frame_of(v, f->pts != AV_NOPTS_VALUE ? f->pts : f->best_effort_timestamp);
  return idx == INT64_MIN ? last_idx + 1 : idx;
}

lam_status video_probe(const char *path, int64_t *frames, int *h, int *w) {
  vid v;
  LAM_TRY(vid_open(path, 0, 0, 0, &v));
  *h = v.dec->height, *w = v.dec->width;
  AVStream *st = v.fmt->streams[v.stream];
  int64_t n = st->nb_frames;
  if ((n <= 0 || n > VIDEO_MAX_FRAMES) && st->duration > 0)
    n = ff.av_rescale_q(st->duration, st->time_base, av_inv_q(v.rate));
  lam_status s = LAM_OK;
  /* the container does not say (MKV, WebM), or claims more than a video has: its video packets counted, nothing
   * decoded */
  if (n <= 0 || n > VIDEO_MAX_FRAMES) {
    AVPacket *pkt = ff.av_packet_alloc();
    if (!pkt) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video file '%s': no memory", path);
    n = 0;
    int e = 0;
    while (pkt && n <= VIDEO_MAX_FRAMES && (e = vid_read(&v, pkt)) >= 0) {
      n += pkt->stream_index == v.stream;
      ff.av_packet_unref(pkt);
    }
    if (pkt && e == VID_STALLED) s = read_failed(path, e);
    ff.av_packet_free(&pkt);
  }
  vid_close(&v);
  LAM_TRY(s);
  if (n <= 0 || n > VIDEO_MAX_FRAMES)
    return LAM_FAIL(LAM_ERR_IO, "video file '%s' holds %s frames (1 to 2^30); the file is damaged", path,
                    n <= 0 ? "no" : "too many");
  *frames = n;
  return LAM_OK;
}

/* Frame f (decoded, any pixel format) into out (H, W, C) fitted as image_fit fits: converted to grey or RGB at its
 * own size by swscale, then fitted. */
static lam_status put_frame(const char *path, const AVFrame *f, int C, int H, int W, uint8_t *out) {
  const enum AVPixelFormat want = C == 1 ? AV_PIX_FMT_GRAY8 : AV_PIX_FMT_RGB24;
  if (!frame_ok(f->width, f->height)) /* a size changed mid-stream is bounded as the header's was */
    return LAM_FAIL(LAM_ERR_IO, "video file '%s': a frame of %dx%d (1 to %d a side, %d pixels at most); the file is "
                    "damaged", path, f->width, f->height, VIDEO_MAX_SIDE, VIDEO_MAX_PIXELS);
  frame_tls *t = tls_get();
  /* swscale writes its rows in blocks, past a row's last pixel (24 bytes past a 24-pixel RGB frame's end): it is given
   * rows of a 64-byte multiple and 256 bytes more, then the rows are packed for image_fit */
  const size_t row = (size_t)f->width * C, pitch = (row + 63) & ~(size_t)63, bytes = pitch * f->height + 256;
  if (t && t->cap < bytes) {
    free(t->px);
    t->cap = (t->px = malloc(bytes)) ? bytes : 0;
  }
  if (!t || !t->px) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video file '%s': no memory for a frame", path);
  t->sws = ff.sws_getCachedContext(t->sws, f->width, f->height, f->format, f->width, f->height, want, SWS_BILINEAR,
                                   NULL, NULL, NULL);
  if (!t->sws) return LAM_FAIL(LAM_ERR_IO, "video file '%s': frames of format %d cannot be converted", path, f->format);
  data_image im = {f->height, f->width, C, t->px};
  uint8_t *dst[4] = {im.px, NULL, NULL, NULL};
  int stride[4] = {(int)pitch, 0, 0, 0};
  ff.sws_scale(t->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, dst, stride);
  for (int y = 1; y < f->height; y++) memmove(im.px + y * row, im.px + y * pitch, row);
  image_fit(&im, H, W, out);
  return LAM_OK;
}

/* put_frame for a frame that may be on the device (NVDEC's): copied back to host memory first, into sw. */
static lam_status put_any(const char *path, const AVFrame *f, AVFrame *sw, int C, int H, int W, uint8_t *out) {
  if (f->format != AV_PIX_FMT_CUDA) return put_frame(path, f, C, H, W, out);
  char why[128];
  int e = ff.av_hwframe_transfer_data(sw, f, 0);
  lam_status s = e < 0 ? LAM_FAIL(LAM_ERR_IO, "video file '%s': a frame cannot be copied from the GPU: %s", path,
                                  av_why(e, why, sizeof why))
                       : put_frame(path, sw, C, H, W, out);
  ff.av_frame_unref(sw);
  return s;
}

static lam_status clip_read(const char *path, int gpu, int64_t first, int stride, int T, int C, int H, int W,
                            uint8_t *out) {
  LAM_CHECK_ARG(first >= 0 && first < VIDEO_MAX_FRAMES && stride >= 1 && stride <= 1 << 20 && T >= 1 &&
                T <= 1 << 20 && (C == 1 || C == 3) && H >= 1 && W >= 1,
                "video_clip: first %lld (below 2^30), stride %d, %d frames (1 to 2^20) of %dx%dx%d", (long long)first,
                stride, T, C, H, W);
  vid v;
  LAM_TRY(vid_open(path, gpu, H, W, &v));
  const size_t frame = (size_t)H * W * C;
  /* the key frame at or before the clip's first frame; a file that cannot seek (or whose times do not reach the
   * frame: a damaged file's) is read from its start */
  const int64_t off = ff.av_rescale_q(first, av_inv_q(v.rate), v.tb);
  int64_t ts;
  if (first > 0 && (off == INT64_MIN || __builtin_add_overflow(v.start_pts, off, &ts) ||
                    ff.av_seek_frame(v.fmt, v.stream, ts, AVSEEK_FLAG_BACKWARD) < 0))
    ff.av_seek_frame(v.fmt, v.stream, v.start_pts, AVSEEK_FLAG_BACKWARD);
  /* what the clip may cost: its last frame's number of video packets twice over (a key frame before it at worst the
   * file's first, a frame of two fields two packets) and VIDEO_MAX_STALL more; and VIDEO_MAX_STALL packets in a row
   * without a frame. A decode that makes no progress is a damaged file, never a hang. */
  v.last = first + (int64_t)(T - 1) * stride, v.budget = 2 * (v.last + 1) + VIDEO_MAX_STALL;
  AVPacket *pkt = ff.av_packet_alloc();
  AVFrame *f = ff.av_frame_alloc(), *sw = gpu ? ff.av_frame_alloc() : NULL;
  AVFrame *tail = ff.av_frame_alloc(); /* the last frame decoded past the clip's */
  int tail_held = 0;
  lam_status s = pkt && f && tail && (sw || !gpu) ? LAM_OK
                                                 : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video file '%s': no memory", path);
  int got = 0, from_start = 0;
  int64_t last_idx = -1;
  while (s == LAM_OK && got < T && vid_next(&v, path, pkt, f, &s) > 0) {
    const int64_t idx = frame_number(&v, f, last_idx);
    if (got == 0 && idx > first && first > 0 && !from_start) {
      /* the seek landed past the clip's first frame (a file whose index marks frames key that are not, so the
       * decoder waits for a real one): read it from its start instead */
      ff.av_frame_unref(f);
      ff.avcodec_flush_buffers(v.dec);
      ff.av_seek_frame(v.fmt, v.stream, v.start_pts, AVSEEK_FLAG_BACKWARD);
      from_start = 1, v.draining = 0, last_idx = -1;
      continue;
    }
    last_idx = idx;
    /* the frames the clip takes at or before this one: this frame stands for them (a frame a variable-rate file
     * skipped is its predecessor's, as a player shows it) */
    const int took = got;
    while (got < T && first + (int64_t)got * stride <= idx && s == LAM_OK) {
      if (first + (int64_t)got * stride < idx && got > 0) { /* skipped: the previous frame again */
        memcpy(out + (size_t)got * frame, out + (size_t)(got - 1) * frame, frame);
      } else {
        s = put_any(path, f, sw, C, H, W, out + (size_t)got * frame);
      }
      got++;
    }
    if (tail_held) ff.av_frame_unref(tail), tail_held = 0;
    if (got == took && took > 0) ff.av_frame_move_ref(tail, f), tail_held = 1; /* past the last frame taken: kept */
    ff.av_frame_unref(f);
  }
  /* the video ended before the clip: its last frame (decoded after the last one taken, where the stride skipped it)
   * is the clip's next, then repeated — SlowFast's clamp of the indices to the last frame */
  if (s == LAM_OK && got > 0 && got < T && tail_held) s = put_any(path, tail, sw, C, H, W, out + (size_t)got++ * frame);
  if (s == LAM_OK && got == 0) s = LAM_FAIL(LAM_ERR_IO, "video file '%s': no frame could be decoded from frame %lld on",
                                            path, (long long)first);
  for (int k = got; s == LAM_OK && k < T; k++) /* a video shorter than the clip: its last frame again */
    memcpy(out + (size_t)k * frame, out + (size_t)(got - 1) * frame, frame);
  ff.av_frame_free(&f);
  ff.av_frame_free(&sw);
  ff.av_frame_free(&tail);
  ff.av_packet_free(&pkt);
  vid_close_keep(&v, s == LAM_OK);
  return s;
}

lam_status video_clip(const char *path, int64_t first, int stride, int T, int C, int H, int W, uint8_t *out) {
  return clip_read(path, 0, first, stride, T, C, H, W, out);
}

lam_status video_clip_nvdec(const char *path, int64_t first, int stride, int T, int C, int H, int W, uint8_t *out) {
  return clip_read(path, 1, first, stride, T, C, H, W, out);
}

/* Every frame from the start, in the order the decoder gives them, each with its number as video_clip numbers it
 * (videocache.c keeps them, and picks a clip's frames from them as video_clip picks them). */
lam_status video_frames(const char *path, int C, int H, int W, video_frame_fn fn, void *arg) {
  LAM_CHECK_ARG((C == 1 || C == 3) && H >= 1 && W >= 1 && fn, "video_frames: frames of %dx%dx%d", H, W, C);
  vid v;
  LAM_TRY(vid_open(path, 0, 0, 0, &v));
  AVPacket *pkt = ff.av_packet_alloc();
  AVFrame *f = ff.av_frame_alloc();
  uint8_t *px = malloc((size_t)H * W * C);
  lam_status s = pkt && f && px ? LAM_OK : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video file '%s': no memory", path);
  v.last = -1, v.budget = INT64_MAX; /* the whole video: bounded by VIDEO_MAX_STALL alone */
  int64_t last_idx = -1;
  while (s == LAM_OK && vid_next(&v, path, pkt, f, &s) > 0) {
    const int64_t idx = frame_number(&v, f, last_idx); /* as clip_read numbers it */
    last_idx = idx;
    s = put_frame(path, f, C, H, W, px);
    if (s == LAM_OK) s = fn(arg, idx, px);
    ff.av_frame_unref(f);
  }
  ff.av_frame_free(&f);
  ff.av_packet_free(&pkt);
  free(px);
  vid_close_keep(&v, s == LAM_OK);
  return s;
}

lam_status video_write(const char *path, const uint8_t *frames, int n, int h, int w, int c, int fps) {
  LAM_CHECK_ARG(frames && n >= 1 && h >= 2 && w >= 2 && h % 2 == 0 && w % 2 == 0 && (c == 1 || c == 3) && fps >= 1,
                "video_write: %d frames of %dx%dx%d at %d fps (even sides)", n, h, w, c, fps);
  LAM_TRY(ff_ready(path));
  char why[128];
  AVFormatContext *fmt = NULL;
  int e = ff.avformat_alloc_output_context2(&fmt, NULL, NULL, path);
  if (e < 0 || !fmt)
    return LAM_FAIL(LAM_ERR_IO, "video file '%s': no container for its name: %s (use .mp4, .avi or .mkv)", path,
                    av_why(e, why, sizeof why));
  const AVCodec *codec = ff.avcodec_find_encoder_by_name("libx264");
  if (!codec) codec = ff.avcodec_find_encoder(AV_CODEC_ID_MPEG4);
  lam_status s = codec ? LAM_OK : LAM_FAIL(LAM_ERR_UNSUPPORTED, "video_write: this FFmpeg has no H.264 or MPEG-4 encoder");
  AVStream *st = s == LAM_OK ? ff.avformat_new_stream(fmt, NULL) : NULL;
  AVCodecContext *enc = s == LAM_OK ? ff.avcodec_alloc_context3(codec) : NULL;
  AVFrame *f = ff.av_frame_alloc();
  AVPacket *pkt = ff.av_packet_alloc();
  uint8_t *pad = NULL; /* a frame in rows swscale may read past (below) */
  size_t pitch = 0;
  struct SwsContext *sws = NULL;
  if (s == LAM_OK && (!st || !enc || !f || !pkt)) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video_write: no memory");
  if (s == LAM_OK) {
    enc->width = w, enc->height = h, enc->time_base = (AVRational){1, fps}, enc->framerate = (AVRational){fps, 1};
    enc->pix_fmt = AV_PIX_FMT_YUV420P, enc->gop_size = 12, enc->max_b_frames = 2;
    enc->thread_count = 1; /* the callers write many files at once, one a thread */
    if (fmt->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if (!strcmp(codec->name, "libx264")) ff.av_opt_set(enc->priv_data, "preset", "veryfast", 0);
    else enc->bit_rate = (int64_t)w * h * fps * 2; /* MPEG-4: enough that small test frames come back close */
    if ((e = ff.avcodec_open2(enc, codec, NULL)) < 0 || (e = ff.avcodec_parameters_from_context(st->codecpar, enc)) < 0)
      s = LAM_FAIL(LAM_ERR_IO, "video_write: the %s encoder cannot be opened: %s", codec->name, av_why(e, why, sizeof why));
    st->time_base = enc->time_base;
  }
  if (s == LAM_OK && !(fmt->oformat->flags & AVFMT_NOFILE) && (e = ff.avio_open(&fmt->pb, path, AVIO_FLAG_WRITE)) < 0)
    s = LAM_FAIL(LAM_ERR_IO, "cannot write video file '%s': %s", path, av_why(e, why, sizeof why));
  if (s == LAM_OK && (e = ff.avformat_write_header(fmt, NULL)) < 0)
    s = LAM_FAIL(LAM_ERR_IO, "video file '%s': its header cannot be written: %s", path, av_why(e, why, sizeof why));
  if (s == LAM_OK) {
    f->format = enc->pix_fmt, f->width = w, f->height = h;
    if (ff.av_frame_get_buffer(f, 0) < 0) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video_write: no memory for a frame");
    sws = ff.sws_getContext(w, h, c == 1 ? AV_PIX_FMT_GRAY8 : AV_PIX_FMT_RGB24, w, h, enc->pix_fmt, SWS_BILINEAR, NULL,
                         NULL, NULL);
    pitch = ((size_t)w * c + 63) & ~(size_t)63;
    if (s == LAM_OK && !(pad = calloc(1, pitch * h + 256)))
      s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video_write: no memory for a frame");
    if (s == LAM_OK && !sws) s = LAM_FAIL(LAM_ERR_UNSUPPORTED, "video_write: no converter to YUV 4:2:0");
  }
  for (int i = 0; s == LAM_OK && i <= n; i++) { /* i == n: the encoder flushed */
    if (i < n) {
      if (ff.av_frame_make_writable(f) < 0) {
        s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video_write: no memory for a frame");
        break;
      }
      /* swscale reads its rows in blocks too, past a row's last pixel (and past the last row's end: past the
       * caller's buffer): each frame goes to it from rows of a 64-byte multiple with 256 bytes after them */
      const size_t row = (size_t)w * c;
      for (int y = 0; y < h; y++) memcpy(pad + y * pitch, frames + ((size_t)i * h + y) * row, row);
      const uint8_t *src[4] = {pad, NULL, NULL, NULL};
      const int sstride[4] = {(int)pitch, 0, 0, 0};
      ff.sws_scale(sws, src, sstride, 0, h, f->data, f->linesize);
      f->pts = i;
    }
    e = ff.avcodec_send_frame(enc, i < n ? f : NULL);
    while (e >= 0) {
      e = ff.avcodec_receive_packet(enc, pkt);
      if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) break;
      if (e < 0) break;
      if (pkt->duration <= 0) pkt->duration = 1; /* a frame: MP4 keeps a last sample of no duration out of the file */
      ff.av_packet_rescale_ts(pkt, enc->time_base, st->time_base);
      pkt->stream_index = st->index;
      e = ff.av_interleaved_write_frame(fmt, pkt);
    }
    if (e < 0 && e != AVERROR(EAGAIN) && e != AVERROR_EOF)
      s = LAM_FAIL(LAM_ERR_IO, "video file '%s': encoding frame %d failed: %s", path, i, av_why(e, why, sizeof why));
  }
  if (s == LAM_OK && (e = ff.av_write_trailer(fmt)) < 0)
    s = LAM_FAIL(LAM_ERR_IO, "video file '%s': its trailer cannot be written: %s", path, av_why(e, why, sizeof why));
  if (fmt && fmt->pb && !(fmt->oformat->flags & AVFMT_NOFILE)) ff.avio_closep(&fmt->pb);
  free(pad);
  ff.sws_freeContext(sws);
  ff.av_packet_free(&pkt);
  ff.av_frame_free(&f);
  ff.avcodec_free_context(&enc);
  ff.avformat_free_context(fmt);
  return s;
}

#else /* built without FFmpeg's libraries */

int video_supported(void) { return 0; }

#define NO_FFMPEG "this lamina was built without FFmpeg's libraries: install libavformat-dev, libavcodec-dev and " \
                  "libswscale-dev and build it again"
const char *video_unsupported_why(void) { return NO_FFMPEG; }
lam_status video_probe(const char *path, int64_t *frames, int *h, int *w) {
  (void)frames, (void)h, (void)w;
  return LAM_FAIL(LAM_ERR_UNSUPPORTED, "video file '%s': %s", path, NO_FFMPEG);
}
lam_status video_clip(const char *path, int64_t first, int stride, int T, int C, int H, int W, uint8_t *out) {
  (void)first, (void)stride, (void)T, (void)C, (void)H, (void)W, (void)out;
  return LAM_FAIL(LAM_ERR_UNSUPPORTED, "video file '%s': %s", path, NO_FFMPEG);
}
lam_status video_clip_nvdec(const char *path, int64_t first, int stride, int T, int C, int H, int W, uint8_t *out) {
  return video_clip(path, first, stride, T, C, H, W, out);
}
int video_nvdec(const char **why) {
  if (why) *why = NO_FFMPEG;
  return 0;
}
void video_nvdec_route(int hwaccel) { (void)hwaccel; }
lam_status video_frames(const char *path, int C, int H, int W, video_frame_fn fn, void *arg) {
  (void)C, (void)H, (void)W, (void)fn, (void)arg;
  return LAM_FAIL(LAM_ERR_UNSUPPORTED, "video file '%s': %s", path, NO_FFMPEG);
}
lam_status video_write(const char *path, const uint8_t *frames, int n, int h, int w, int c, int fps) {
  (void)frames, (void)n, (void)h, (void)w, (void)c, (void)fps;
  return LAM_FAIL(LAM_ERR_UNSUPPORTED, "video file '%s': %s", path, NO_FFMPEG);
}
#endif

int lam_video_supported(const char **why) {
  const int ok = video_supported();
  if (why) *why = ok ? "" : video_unsupported_why();
  return ok;
}

int64_t video_middle_first(int64_t frames, int T, int stride) {
  const int64_t span = (int64_t)(T - 1) * stride + 1, last = frames > span ? frames - span : 0;
  return last / 2;
}

lam_status lam_video_read_clip(const char *path, int64_t first, int stride, int T, int C, int H, int W, uint8_t *out) {
  LAM_CHECK_ARG(path && *path && out, "lam_video_read_clip: path is %s, out is %s", !path ? "NULL" : *path ? "set" : "empty",
                out ? "set" : "NULL");
  LAM_CHECK_ARG(first >= -1 && stride >= 1 && stride <= 1000 && T >= 1 && T <= (int)DATA_MAX_FRAMES && (C == 1 || C == 3) &&
                    H >= 1 && H <= 65535 && W >= 1 && W <= 65535,
                "lam_video_read_clip('%s'): first frame %lld (-1: the middle clip), every %d-th (1 to 1000), %d frames "
                "(1 to %u) of %dx%d, %d channels (1 or 3)",
                path, (long long)first, stride, T, DATA_MAX_FRAMES, H, W, C);
  if (first < 0) { /* the middle clip, as a video folder's test part takes it */
    int64_t frames;
    int h, w;
    LAM_TRY(video_probe(path, &frames, &h, &w));
    first = video_middle_first(frames, T, stride);
  }
  return video_clip(path, first, stride, T, C, H, W, out);
}
