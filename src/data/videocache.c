/* videocache.c — a video folder's decoded cache (--cache DIR, asked for: none by default). A video's entry keeps every
 * frame of it decoded and fitted to the run's size and channels (uint8, H x W x C), with each frame's number, in one
 * file of the cache folder; a clip is then T reads from that file instead of a seek and a decode.
 *
 * Why every frame, not the frames at the run's stride: a training clip starts at a frame drawn anew each epoch, so
 * any frame may be the first of a clip, and an entry of every frame serves any --frames and --frame-stride alike.
 *
 * A clip from the cache is the clip video_clip decodes, byte for byte: the entry holds the frames as video_clip gets
 * them (decoded by the same code, fitted by the same code) with the numbers video_clip gives them, and the frames of
 * a clip are picked from them by video_clip's own rule (a frame number a variable-rate file skipped shows the
 * clip's previous frame; past the end, the video's last frame again). So an epoch reads the same samples cached or
 * streamed, for a seed (tests/test_video.c and test_cli check it).
 *
 * An entry is named by the source's canonical path and the frames' geometry (video-<16 hex digits>-frames), and its
 * header holds the source's size and modification time: a changed video's entry is stale, decoded again and
 * replaced under the same name (so a changed set leaves nothing behind). It is written to a temporary file beside
 * it and renamed into place, so a reader never sees half an entry; two threads making one entry both write the
 * same bytes. A file in the cache folder is replaced only where it is an entry lamina wrote (its magic); nothing else
 * there is touched. Entries of videos since deleted stay until the folder is removed.
 *
 * Memory: making an entry holds one frame and the frame numbers (8 bytes a frame); reading a clip, the numbers and
 * the clip. Nothing holds the set. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "../internal.h"
#include "../status.h"

#define VCACHE_MAGIC "lamina video cache 1" /* the format's version is its last word */
#define VCACHE_ORDER 0x01020304u            /* written natively: an entry of the other byte order is stale */

/* An entry's header; then the source's path (path_len bytes, padded to 8), the frames' pixels (frames x h x w x c)
 * and the frames' numbers (frames x int64). */
typedef struct vc_head {
  char magic[24]; /* VCACHE_MAGIC, zero-padded */
  uint32_t order;
  int32_t c, h, w;
  int64_t size, mtime_ns; /* the source file's when it was decoded */
  int64_t frames;         /* frames kept */
  uint32_t path_len, zero;
} vc_head;
_Static_assert(sizeof(vc_head) == 72, "vc_head is written as it is laid out");

struct video_cache {
  char dir[PATH_MAX];
  _Atomic size_t hits, misses;
};

lam_status video_cache_open(const char *data, const char *dir, video_cache **out) {
  *out = NULL;
  LAM_CHECK_ARG(dir && *dir && strlen(dir) < PATH_MAX - 64, "video folder '%s': the cache folder's name is %s", data,
                dir && *dir ? "too long" : "empty");
  struct stat st;
  if (stat(dir, &st) != 0 && mkdir(dir, 0777) != 0 && errno != EEXIST)
    return LAM_FAIL(LAM_ERR_IO, "video folder '%s': cannot make the cache folder '%s': %s (give another, or leave "
                    "--cache out to decode every clip from its file)", data, dir, strerror(errno));
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0)
    return LAM_FAIL(LAM_ERR_IO, "video folder '%s': the cache folder '%s' is %s (give a folder lamina may write in)",
                    data, dir, S_ISDIR(st.st_mode) ? "not writable" : "not a folder");
  video_cache *vc = calloc(1, sizeof *vc);
  if (!vc) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video folder '%s': no host memory", data);
  snprintf(vc->dir, sizeof vc->dir, "%s", dir);
  atomic_init(&vc->hits, 0);
  atomic_init(&vc->misses, 0);
  *out = vc;
  return LAM_OK;
}

void video_cache_free(video_cache *vc) { free(vc); }

void video_cache_counts(const video_cache *vc, size_t *hits, size_t *misses) {
  *hits = vc ? atomic_load(&vc->hits) : 0;
  *misses = vc ? atomic_load(&vc->misses) : 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

/* The source's canonical path (where it resolves; else as given): one file read by two spellings is one entry. */
static void canonical(const char *path, char *out) {
  if (!realpath(path, out)) snprintf(out, PATH_MAX, "%s", path);
}

static void entry_path(const video_cache *vc, const char *canon, int C, int H, int W, char *out, size_t cap) {
  uint64_t h = fnv(1469598103934665603ULL, VCACHE_MAGIC, sizeof VCACHE_MAGIC);
  h = fnv(h, canon, strlen(canon) + 1);
  const int32_t g[3] = {C, H, W};
  h = fnv(h, g, sizeof g);
  snprintf(out, cap, "%s/video-%016llx-frames", vc->dir, (unsigned long long)h);
}

void video_cache_entry_path(const video_cache *vc, const char *path, int C, int H, int W, char *out, size_t cap) {
  char canon[PATH_MAX];
  canonical(path, canon);
  entry_path(vc, canon, C, H, W, out, cap);
}

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

static int read_all(int fd, void *buf, size_t n, off_t at) {
  for (size_t done = 0; done < n;) {
    const ssize_t r = pread(fd, (uint8_t *)buf + done, n - done, at + (off_t)done);
    if (r <= 0) return -1;
    done += (size_t)r;
  }
  return 0;
}

static int write_all(int fd, const void *buf, size_t n, off_t at) {
  for (size_t done = 0; done < n;) {
    const ssize_t r = pwrite(fd, (const uint8_t *)buf + done, n - done, at + (off_t)done);
    if (r <= 0) return -1;
    done += (size_t)r;
  }
  return 0;
}

/* 1 where fd is an entry lamina wrote (its magic and byte order), whatever it was made from. */
static int is_entry(int fd, vc_head *h) {
  char magic[sizeof h->magic] = VCACHE_MAGIC;
  return read_all(fd, h, sizeof *h, 0) == 0 && !memcmp(h->magic, magic, sizeof magic) && h->order == VCACHE_ORDER;
}

/* 1 where fd is this source's entry as it is now (st: the source's stat) for these frames, whole. */
static int entry_fresh(int fd, const char *canon, const struct stat *st, int C, int H, int W, vc_head *h) {
  struct stat es;
  const size_t plen = strlen(canon);
  if (!is_entry(fd, h) || h->c != C || h->h != H || h->w != W || h->size != (int64_t)st->st_size ||
      h->mtime_ns != (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec || h->path_len != plen ||
      h->frames < 1 || fstat(fd, &es) != 0)
    return 0;
  const uint64_t frame = (uint64_t)C * H * W, data = sizeof *h + pad8(plen);
  if ((uint64_t)h->frames > ((uint64_t)1 << 40) / (frame + 8) ||
      (uint64_t)es.st_size != data + (uint64_t)h->frames * (frame + 8))
    return 0; /* cut short (a crash before the rename reached the disk) */
  char *p = malloc(plen + 1);
  const int same = p && read_all(fd, p, plen, sizeof *h) == 0 && !memcmp(p, canon, plen);
  free(p);
  return same;
}

/* The clip from an entry: video_clip's rule over the entry's frames in order (see video_clip): clip frame k is
 * frame first + k * stride; the decoded frame numbered so shows it, the first decoded frame at or after it where
 * it is the clip's first, else the clip's previous frame (a skipped number); past the video's end its last frame. */
static lam_status clip_from(int fd, const vc_head *h, const char *path, int64_t first, int stride, int T, uint8_t *out) {
  const size_t frame = (size_t)h->c * h->h * h->w, n = (size_t)h->frames;
  const off_t data = (off_t)(sizeof *h + pad8(h->path_len));
  int64_t *num = malloc(n * sizeof *num);
  int64_t *pick = malloc((size_t)T * sizeof *pick);
  lam_status s = num && pick ? LAM_OK : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video file '%s': no memory", path);
  if (s == LAM_OK && read_all(fd, num, n * sizeof *num, data + (off_t)(n * frame)) != 0)
    s = LAM_FAIL(LAM_ERR_IO, "video file '%s': its cache entry cannot be read: %s", path, strerror(errno));
  int got = 0;
  int64_t tail = -1; /* the last frame, where it came after the last one taken and took none (as video_clip's) */
  for (size_t j = 0; s == LAM_OK && j < n && got < T; j++) {
    const int took = got;
    while (got < T && first + (int64_t)got * stride <= num[j]) {
      pick[got] = first + (int64_t)got * stride < num[j] && got > 0 ? pick[got - 1] : (int64_t)j;
      got++;
    }
    tail = got == took && took > 0 ? (int64_t)j : -1;
  }
  if (s == LAM_OK && got == 0)
    s = LAM_FAIL(LAM_ERR_IO, "video file '%s': no frame could be decoded from frame %lld on", path, (long long)first);
  if (s == LAM_OK && got < T && tail >= 0) pick[got++] = tail; /* past the end: the video's last frame, then again */
  for (int k = got; s == LAM_OK && k < T; k++) pick[k] = pick[got - 1];
  for (int k = 0; s == LAM_OK && k < T; k++) {
    if (k > 0 && pick[k] == pick[k - 1]) memcpy(out + (size_t)k * frame, out + (size_t)(k - 1) * frame, frame);
    else if (read_all(fd, out + (size_t)k * frame, frame, data + (off_t)((size_t)pick[k] * frame)) != 0)
      s = LAM_FAIL(LAM_ERR_IO, "video file '%s': its cache entry cannot be read: %s", path, strerror(errno));
  }
  free(num), free(pick);
  return s;
}

/* ---- making an entry ---- */

typedef struct maker {
  int fd;
  off_t at;      /* where the next frame's pixels go */
  size_t frame;  /* bytes of a frame */
  int64_t *num;  /* the frames' numbers */
  size_t n, cap;
} maker;

static lam_status keep_frame(void *arg, int64_t idx, const uint8_t *px) {
  maker *m = arg;
  if (idx < 0) return LAM_OK; /* before the stream's start: no clip takes it (video_clip's first frame is >= 0) */
  if (m->n == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 256;
    int64_t *p = realloc(m->num, cap * sizeof *p);
    if (!p) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video cache: no host memory for a video's frame numbers");
    m->num = p, m->cap = cap;
  }
  if (write_all(m->fd, px, m->frame, m->at) != 0)
    return LAM_FAIL(LAM_ERR_IO, "video cache: writing an entry failed: %s", strerror(errno));
  m->num[m->n++] = idx, m->at += (off_t)m->frame;
  return LAM_OK;
}

/* Decodes the source into a new entry at `entry` (through a temporary file renamed into place); *fd the entry
 * opened, its header in *h. Fails where the video does not decode to its end or the entry cannot be written: the
 * caller then decodes the clip from the file. */
static lam_status make_entry(const char *path, const char *canon, const struct stat *st, const char *entry, int C,
                             int H, int W, int *fd, vc_head *h) {
  *fd = -1;
  char tmp[PATH_MAX + 96];
  snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", entry);
  maker m = {.fd = mkstemp(tmp), .frame = (size_t)C * H * W};
  if (m.fd < 0) return LAM_FAIL(LAM_ERR_IO, "video cache: cannot make '%s': %s", tmp, strerror(errno));
  const size_t plen = strlen(canon);
  *h = (vc_head){.order = VCACHE_ORDER, .c = C, .h = H, .w = W, .size = (int64_t)st->st_size,
                 .mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec,
                 .path_len = (uint32_t)plen};
  memcpy(h->magic, VCACHE_MAGIC, sizeof VCACHE_MAGIC);
  m.at = (off_t)(sizeof *h + pad8(plen));
  char zeros[8] = {0};
  lam_status s = write_all(m.fd, canon, plen, sizeof *h) == 0 &&
                         write_all(m.fd, zeros, pad8(plen) - plen, (off_t)(sizeof *h + plen)) == 0
                     ? LAM_OK
                     : LAM_FAIL(LAM_ERR_IO, "video cache: writing '%s' failed: %s", tmp, strerror(errno));
  if (s == LAM_OK) s = video_frames(path, C, H, W, keep_frame, &m);
  if (s == LAM_OK && m.n == 0) s = LAM_FAIL(LAM_ERR_IO, "video file '%s': no frame decoded", path);
  h->frames = (int64_t)m.n;
  if (s == LAM_OK && (write_all(m.fd, m.num, m.n * sizeof *m.num, m.at) != 0 || write_all(m.fd, h, sizeof *h, 0) != 0))
    s = LAM_FAIL(LAM_ERR_IO, "video cache: writing '%s' failed: %s", tmp, strerror(errno));
  free(m.num);
  if (s == LAM_OK) { /* only an entry lamina wrote is replaced */
    vc_head old;
    int e = open(entry, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat es;
    const int foreign = e >= 0 && fstat(e, &es) == 0 && (!S_ISREG(es.st_mode) || !is_entry(e, &old));
    if (e >= 0) close(e);
    if (foreign)
      s = LAM_FAIL(LAM_ERR_INVALID_ARG, "video cache: '%s' is there and is not a lamina video cache entry: lamina "
                   "replaces only what it wrote; move that file away, or give another --cache folder", entry);
    else if (rename(tmp, entry) != 0)
      s = LAM_FAIL(LAM_ERR_IO, "video cache: cannot rename '%s' to '%s': %s", tmp, entry, strerror(errno));
  }
  if (s != LAM_OK) {
    unlink(tmp);
    close(m.fd);
    return s;
  }
  *fd = m.fd; /* the entry now, renamed */
  return LAM_OK;
}

lam_status video_cache_clip(video_cache *vc, const char *path, int64_t first, int stride, int T, int C, int H, int W,
                            uint8_t *out) {
  LAM_CHECK_ARG(vc && first >= 0 && stride >= 1 && T >= 1 && (C == 1 || C == 3) && H >= 1 && W >= 1,
                "video_cache_clip: first %lld, stride %d, %d frames of %dx%dx%d", (long long)first, stride, T, C, H, W);
  char canon[PATH_MAX], entry[PATH_MAX + 64];
  canonical(path, canon);
  entry_path(vc, canon, C, H, W, entry, sizeof entry);
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) /* as streamed: video_clip says what is wrong */
    return video_clip(path, first, stride, T, C, H, W, out);
  vc_head h;
  int fd = open(entry, O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && entry_fresh(fd, canon, &st, C, H, W, &h)) {
    lam_status s = clip_from(fd, &h, path, first, stride, T, out);
    close(fd);
    if (s == LAM_OK) atomic_fetch_add(&vc->hits, 1);
    return s;
  }
  if (fd >= 0) close(fd);
  atomic_fetch_add(&vc->misses, 1);
  lam_status s = make_entry(path, canon, &st, entry, C, H, W, &fd, &h);
  if (s == LAM_ERR_INVALID_ARG || s == LAM_ERR_OUT_OF_MEMORY) return s;
  if (s != LAM_OK) return video_clip(path, first, stride, T, C, H, W, out); /* as streamed, file and all */
  s = clip_from(fd, &h, path, first, stride, T, out);
  close(fd);
  return s;
}
