/* data.h — what the data-set readers share (internal to src/data): a source file opened through zlib
 * (plain or gzip alike), whose first bytes are peeked to tell IDX from NumPy; the array that a
 * format's reader (idx.c, npy.c) makes of it; and the payload reader both formats end in, which
 * checks the length against the header before allocating and narrows wide integers to bytes.
 */
#ifndef LAMINA_DATA_H
#define LAMINA_DATA_H

#include <stdint.h>
#include <zlib.h>

#include "lamina.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DATA_MAX_N 100000000u  /* 100 M images: far above any real set, low enough to catch garbage */
#define DATA_MAX_SIDE 4096u
#define DATA_MAX_FRAMES 255u /* frames of a clip */
#define DATA_MAX_CHANNELS 1024u
#define DATA_PEEK 8 /* bytes data_open reads ahead: enough for both magics */

typedef enum data_role { DATA_IMAGES, DATA_LABELS } data_role;

/* One file being read. Reads go through data_read, which first hands out the peeked bytes. */
typedef struct data_src {
  const char *path;
  const char *what; /* "image" or "label", for messages */
  data_role role;
  gzFile gz;
  int gzip;            /* gzip data (else the file is read as it is) */
  int regular;         /* a regular file: file_bytes is its length */
  uint64_t file_bytes; /* on disk, compressed or not */
  unsigned char peek[DATA_PEEK];
  size_t peek_len, peek_pos;
} data_src;

/* How the file's elements become the array's bytes. */
typedef struct data_elem {
  int size;       /* bytes: 1, 2, 4 or 8 */
  int is_signed;
  int big_endian;
} data_elem;

/* An array read whole, as uint8. The dims are the file's, in its order; `channels_last` says where a
 * 4-d image array keeps its channels (a 5-d one, clips of frames, always keeps them last). `words` is the shape in words for messages ("7 images of 5x3"). */
typedef struct data_array {
  int rank;
  uint64_t dims[5];
  int channels_last; /* 4-d (n, h, w, c) and 5-d (n, t, h, w, c: clips) images */
  int npy;       /* read from a NumPy file (else IDX): messages speak its language */
  uint8_t *data; /* count bytes, malloc'd, owned by the caller */
  size_t count;
  char words[160];
} data_array;

/* Opens path for role and peeks its first bytes; on failure nothing is left open. */
lam_status data_open(const char *path, data_role role, data_src *s);
/* Closes s; returns `so_far`, or an error if that was LAM_OK and zlib reports one on closing. */
lam_status data_close(data_src *s, lam_status so_far);
/* Reads up to `bytes` into dst. Returns 0 with *got < bytes only at the end of the data; -1 on a read
 * or decompression error (data_reason says which). */
int data_read(data_src *s, void *dst, size_t bytes, size_t *got);
/* zlib's (or errno's) reason for the last failure on s, without the path zlib puts in front. */
const char *data_reason(data_src *s);
/* "(the file is empty)" / "(the gzip data is empty)" when got == 0, else "". */
const char *data_empty_note(const data_src *s, size_t got);

/* Reads the payload that follows a head_bytes-long header: a->count elements of kind e, into a->data
 * as bytes. Checks the length against the header first (plain files exactly, gzip files against
 * deflate's largest ratio) so a bad header never costs a huge malloc, then that nothing follows the
 * data. Elements wider than a byte (labels) must be 0..255; the first that is not is an error naming
 * its index. */
lam_status data_payload(data_src *s, uint64_t head_bytes, const data_elem *e, data_array *a);

/* 1 when p (n bytes) starts with the NumPy magic "\x93NUMPY". */
int npy_magic(const unsigned char *p, size_t n);
/* The format readers: each reads the header (the peeked bytes included), checks it against what the
 * role takes, and reads the payload through data_payload. On failure a->data is NULL. */
lam_status idx_read(data_src *s, data_array *a);
lam_status npy_read(data_src *s, data_array *a);

/* Checks one dimension against lamina's limits: dims[0] is n, the others sides or channels. */
lam_status data_check_dim(const data_src *s, const char *format, const char *name, uint64_t v, uint64_t limit);

/* Writes " (image 3, row 4, col 2)" for index i of per-pixel labels of h x w, or "" when h is 0 (one
 * label per image). */
void data_where(uint64_t h, uint64_t w, size_t i, char *buf, size_t cap);

/* The names in dir that are folders (folders = 1) or files want() takes (0), sorted, hidden ones left out; *names
 * malloc'd, freed by folder_names_free (folder.c). */
lam_status folder_list(const char *dir, int folders, int (*want)(const char *), char ***names, size_t *count);
void folder_names_free(char **v, size_t n);
/* Whether path is a folder; a regular file (folder.c). */
int data_is_dir(const char *path);
int data_is_file(const char *path);
/* A video set (videofolder.c): DIR/train/CLASS/ holding video files, or DIR/train.csv listing them (videolist.c);
 * read by lam_dataset_load_images. */
int video_folder(const char *dir);
lam_status video_folder_load(const char *dir, int train, lam_image_opts *o, lam_dataset **out);
#define VIDEO_MAX_CLASSES 256 /* a label is one byte */
/* 1 where name ends in a video file's extension (.mp4, .avi, .mkv, .webm, .mov, any case). */
int video_file_name(const char *name);
/* A part's videos, in order: file i's path (malloc'd) and class. */
typedef struct video_list {
  size_t n, cap;
  char **path;
  int *cls;
} video_list;
lam_status video_list_add(video_list *l, const char *path, int cls);
void video_list_free(video_list *l);
/* DIR/train.csv's kind (videolist.c): 1 path,label rows, 2 Kinetics' columns; 0 where there is no such list. */
int video_csv_layout(const char *dir);
/* 1 where a listed set has a test part's list: DIR/val.csv, validate.csv or test.csv. */
int video_csv_has_test(const char *dir);
/* The part's videos as its list names them (l, in the list's order) and the classes (the training list's labels,
 * sorted; *names as folder_list's). Missing files: path,label's an error naming the list's file and line, or with
 * o->skip_bad counted in o->skipped; Kinetics' left out and counted in o->missing and o->missing_note. */
lam_status video_csv_scan(const char *dir, int train, lam_image_opts *o, video_list *l, char ***names,
                          size_t *nclasses);

/* Checks o's size and stream (folder.c) and zeroes its out fields, for both folder readers. */
lam_status lam_image_opts_check(lam_image_opts *o);

/* 1 when the mask folder dir (maskfolder.c) has a test part: test/ or val/, VOC's val.txt. */
int mask_folder_has_test(const char *dir);

/* ---- image files (image.c) ---- */
enum { IMAGE_PNG = 1, IMAGE_JPEG = 2 };
/* The decoders' bounds, checked from the header before they allocate (decompression bombs: a few KB that ask
 * for GBs or minutes). An image decoded: at most IMAGE_MAX_PIXELS (Pillow's DecompressionBombError bound, 2 x
 * 89.5 M); a JPEG's source up to IMAGE_MAX_JPEG_PIXELS when DCT scaling decodes it smaller; libjpeg's own
 * memory (a progressive file's coefficients) and a progressive file's scans x pixels; libpng's sides (its
 * default, said here) and the memory a chunk may inflate to. */
#define IMAGE_MAX_PIXELS 178956970ull
#define IMAGE_MAX_JPEG_PIXELS (1ull << 30)
#define IMAGE_JPEG_MEMORY (1L << 30)
#define IMAGE_JPEG_MAX_SCANS 500 /* TurboJPEG's own advice for its scan limit */
#define IMAGE_JPEG_SCAN_WORK (1ull << 37) /* 768 scans of 179 M pixels: seconds of work, not minutes */
#define IMAGE_PNG_MAX_SIDE 1000000u
#define IMAGE_PNG_CHUNK_MAX (8u << 20)
/* A decoded image: h x w pixels of c channels (1 grey, 3 RGB), interleaved, row-major; px malloc'd. */
typedef struct data_image {
  int h, w, c;
  uint8_t *px;
} data_image;
/* The formats this build reads and writes (IMAGE_PNG | IMAGE_JPEG bits). */
int image_formats(void);
/* Decodes the PNG or JPEG file at path (told by content) into *out; an error names the file. 16-bit samples
 * by their high byte, alpha dropped (the colour kept), palettes as colours: as Pillow reads them. Up to
 * DATA_MAX_SIDE a side. */
lam_status image_read(const char *path, data_image *out);
/* The same for an image to be fitted to th x tw (image_fit): larger images too (up to the bounds above), a
 * JPEG over DATA_MAX_SIDE a side decoded smaller by DCT scaling, yet covering th x tw. th = tw = 0: image_read. */
lam_status image_read_fit(const char *path, int th, int tw, data_image *out);
/* A segmentation mask's PNG bytes (path for messages) as classes, 1 channel: a palette PNG's indices (not its
 * colours), an 8-bit grey PNG's values; any other kind is an error saying what it is. fit: the mask is to be fitted
 * (larger than DATA_MAX_SIDE allowed). */
lam_status image_decode_mask(const char *path, const uint8_t *buf, size_t len, int fit, data_image *out);
/* image_read(_fit) in its two steps: the whole file into *buf (malloc'd), then its bytes decoded (path for
 * messages). */
lam_status image_file_bytes(const char *path, uint8_t **buf, size_t *len);
lam_status image_decode(const char *path, const uint8_t *buf, size_t len, data_image *out);
lam_status image_decode_fit(const char *path, const uint8_t *buf, size_t len, int th, int tw, data_image *out);
/* Whether the bytes start as a JPEG does. */
int image_is_jpeg(const uint8_t *p, size_t n);
/* A JPEG's size from its frame header, found by walking its markers (no decoder): 1 and *h, *w where found. */
int image_jpeg_size(const uint8_t *p, size_t n, int *h, int *w);
/* The grey value of an RGB pixel as Pillow's convert("L") gives it (ITU-R 601-2 luma). */
uint8_t image_luma(const uint8_t *rgb);
/* im converted to c channels (1 or 3) in place: grey to RGB the value thrice, RGB to grey by image_luma (Pillow's
 * convert("RGB") and convert("L")). */
lam_status image_to_channels(data_image *im, int c);

/* ---- JPEG on the GPU (src/cuda/jpeg.cu, where the build has nvJPEG) ---- */
/* A decoder of batches of JPEG files through nvJPEG, on the GPU's JPEG engines where it has them (the
 * hardware backend), else nvJPEG's default (CUDA) backend. */
typedef struct gpu_jpeg gpu_jpeg;
/* Opens one on the current CUDA device; LAM_ERR_NO_DEVICE or LAM_ERR_UNSUPPORTED where it cannot. */
lam_status gpu_jpeg_open(gpu_jpeg **out);
void gpu_jpeg_close(gpu_jpeg *g);
/* Decodes the n streams buf[i] (len[i] bytes) it can take, each fitted to H x W as image_fit does (fit = 1;
 * with fit = 0 only those of H x W are taken), into dst[i] (H * W * c bytes, interleaved) and sets done[i] = 1;
 * a stream it does not take (not c channels, another size without fit, a kind its backend refuses, a header
 * it cannot parse, or a batch it fails on) keeps done[i] = 0, for the host's decoder, which names what is
 * wrong. An error only where the GPU itself fails (memory, a CUDA error). */
lam_status gpu_jpeg_decode(gpu_jpeg *g, int n, const uint8_t *const *buf, const size_t *len, int c, int H, int W,
                           int fit, uint8_t *const *dst, int *done);
/* out (H, W, im->c) = im scaled to cover H x W (its shorter side fitting) and the middle kept: the mean of
 * the covered pixels where it shrinks, bilinear where it grows; a copy at the same size. */
void image_fit(const data_image *im, int H, int W, uint8_t *out);
/* out (H, W) = the mask im (1 channel) fitted to H x W as image_fit fits images (fit_geometry), each pixel the
 * class of the nearest source pixel: classes are never blended. */
void image_fit_nearest(const data_image *im, int H, int W, uint8_t *out);
/* hwc (h x w pixels of c interleaved channels) as the set's planar (c, h, w) in chw. */
void image_planar(const uint8_t *hwc, int h, int w, int c, uint8_t *chw);
/* Encodes px (h, w, c: 1 or 3) as kind (IMAGE_PNG, or IMAGE_JPEG at quality 90) into *buf (malloc'd). */
lam_status image_encode(int kind, const uint8_t *px, int h, int w, int c, uint8_t **buf, size_t *len);

/* ---- video files (video.c, through FFmpeg's libraries where the build has them) ---- */
#define VIDEO_FPS 25 /* the frame rate lamina writes videos at */
/* What a damaged file's header may claim and a decode may cost before it is refused (video.c): the sides and pixels of
 * a frame (8192 x 8192; FFmpeg's decoders are given the bound, so they refuse before they allocate), the frames of a
 * video, and the packets read in a row with no frame decoded from them (nor, reading, a byte of the file taken). */
#define VIDEO_MAX_SIDE 16384
#define VIDEO_MAX_PIXELS (1 << 26)
#define VIDEO_MAX_FRAMES (INT64_C(1) << 30)
#define VIDEO_MAX_STALL 4096
/* 1 when this build reads and writes video files. */
int video_supported(void);
/* Why not, where video_supported() is 0: what to install. */
const char *video_unsupported_why(void);
/* The frames of the file's video stream (the container's count, else its duration at the frame rate, else its
 * video packets counted) and their size; an error names the file and what is wrong. */
lam_status video_probe(const char *path, int64_t *frames, int *h, int *w);
/* Frames first, first + stride, ... (T of them) into out (T, H, W, C: 1 grey, 3 RGB), each fitted as image_fit
 * fits; past the video's end its last frame again. Seeks to the key frame at or before `first`. */
lam_status video_clip(const char *path, int64_t first, int stride, int T, int C, int H, int W, uint8_t *out);
/* video_clip decoded by NVDEC (the GPU's video engines, through FFmpeg: video_nvdec_route): the same frames, fitted as
 * the host's (its YUV to RGB or grey, and the cuvid route's resize on the engine, may differ from the host's by a few
 * levels); an error where the file's codec has no NVDEC decoder in this FFmpeg or no CUDA device opens. */
lam_status video_clip_nvdec(const char *path, int64_t first, int stride, int T, int C, int H, int W, uint8_t *out);
/* 1 when NVDEC can be used (FFmpeg loaded and a CUDA device opened for it, once a process); else 0 and why. */
int video_nvdec(const char **why);
/* The NVDEC route: 0 (the default) FFmpeg's cuvid decoder where the codec has one (the frame cropped and resized on
 * the video engine), else the CUDA hwaccel; 1 the hwaccel always (dev/lab_video_decode.c compares them). */
void video_nvdec_route(int hwaccel);
/* The first frame of a video's middle clip (T frames, every stride-th; 0 where the video is shorter than the clip): what a
 * video folder's test part and lam_video_read_clip(first -1) take. */
int64_t video_middle_first(int64_t frames, int T, int stride);
/* frames (n, h, w, c), even sides, as a video file at path (its name's container: .mp4, .avi, .mkv), H.264 where
 * libavcodec has an encoder for it, else MPEG-4 Part 2, fps frames a second. */
lam_status video_write(const char *path, const uint8_t *frames, int n, int h, int w, int c, int fps);

/* Called by video_frames with each decoded frame (H, W, C) and its number (the presentation time at the stream's
 * frame rate, as video_clip numbers frames); a status other than LAM_OK stops the decoding with it. */
typedef lam_status (*video_frame_fn)(void *arg, int64_t idx, const uint8_t *frame);
/* Every frame of the file from its start, in presentation order, fitted as video_clip fits them, to fn. */
lam_status video_frames(const char *path, int C, int H, int W, video_frame_fn fn, void *arg);

/* ---- a video folder's decoded cache (videocache.c) ---- */
typedef struct video_cache video_cache;
/* The cache in folder dir (made where it is not there; an error where it cannot be made or written: it was asked
 * for); data: the video folder, for messages. */
lam_status video_cache_open(const char *data, const char *dir, video_cache **out);
void video_cache_free(video_cache *vc);
/* video_clip's clip (the same bytes, for the same arguments) from the file's cache entry, which is made first
 * where it is missing or stale (the file's size or time changed). An entry that cannot be written is left out:
 * the clip is then decoded from the file. */
lam_status video_cache_clip(video_cache *vc, const char *path, int64_t first, int stride, int T, int C, int H, int W,
                            uint8_t *out);
/* Clips read from entries already there (hits), and videos decoded into an entry (misses), so far. */
void video_cache_counts(const video_cache *vc, size_t *hits, size_t *misses);
/* The entry's name in the cache folder for this file and frame geometry: video-<16 hex digits>-frames. */
void video_cache_entry_path(const video_cache *vc, const char *path, int C, int H, int W, char *out, size_t cap);

/* ---- COCO instances files (coco.c) ---- */
/* One image of the file: its id, file name (a plain name, no folders) and size. */
typedef struct coco_image {
  long long id;
  char *file_name;
  int h, w;
} coco_image;
typedef struct coco_set coco_set;
/* Reads a COCO instances file's JSON (len bytes) and checks all of it: keys, types, ids, sizes (1 to 65535 a
 * side, at most 2^28 pixels), polygons (3 points or more) and RLE (counts summing to the image's pixels). An
 * error names what is wrong and where (an annotation by its id). Categories become classes 1..K in increasing
 * id order (K at most 254). */
lam_status coco_parse(const char *json, size_t len, coco_set **out);
void coco_free(coco_set *s);
size_t coco_n_images(const coco_set *s);
const coco_image *coco_get_image(const coco_set *s, size_t i);
size_t coco_n_classes(const coco_set *s);
const char *coco_class_name(const coco_set *s, size_t k); /* class k + 1's name, k < coco_n_classes */
/* Image i's mask (h, w) row-major: 0 background, 1..K the class, 255 a crowd region; instances drawn largest
 * first (by their mask's pixels; equal areas by annotation id), so the smaller is on top; polygons as
 * pycocotools' rleFrPoly rasterizes them. */
lam_status coco_mask(const coco_set *s, size_t i, uint8_t *mask);
/* m (h, w) fitted to out (H, W) with image_fit's geometry (scaled to cover, the middle kept), each output pixel
 * the class of the source pixel under its centre (nearest: a label is never blended). */
void coco_fit_mask(const uint8_t *m, int h, int w, int H, int W, uint8_t *out);

#ifdef __cplusplus
}
#endif
/* Writes n bytes to path as they are (make.c): a file of a data set being made in a folder of its own, made
 * again by running the maker again, so written without fsync; the caller renames the whole folder into place
 * or checked it was new. */
lam_status lam_data_write_plain(const char *path, const uint8_t *p, size_t n);

#endif
