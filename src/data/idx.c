/* idx.c — the IDX format (MNIST's): its header, checked against what an image or label file may be.
 *
 * IDX is a big-endian header — a magic 0x000008DD (08: unsigned bytes, DD: how many dimensions), then
 * one uint32 per dimension — followed by the values, row-major. Images are 0x00000803 (n, rows, cols)
 * or 0x00000804 (n, rows, cols, channels: channels-last), clips 0x00000805 (n, frames, rows, cols, channels);
 * labels 0x00000801 (n: a class per image) or
 * 0x00000803 (n, rows, cols: a class per pixel). The payload is read by data_payload (source.c).
 */
#include <stdio.h>
#include <string.h>

#include "data.h"
#include "../status.h"

#define IDX_MAGIC(rank) (0x00000800u | (rank))

/* The ranks a role takes. */
static int idx_rank_ok(data_role role, int rank) {
  return role == DATA_IMAGES ? rank >= 3 && rank <= 5 : rank == 1 || rank == 3;
}

static const char *const IDX_DIM_NAMES[2][5] = {{"n", "rows", "cols", "channels"},
                                               {"n", "frames", "rows", "cols", "channels"}};

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* A wrong magic number, explained: what the file most likely is and what to do about it. */
static void magic_hint(const unsigned char raw[4], data_role role, char *buf, size_t cap) {
  uint32_t got = be32(raw);
  uint32_t swapped = (uint32_t)raw[3] << 24 | (uint32_t)raw[2] << 16 | (uint32_t)raw[1] << 8 | raw[0];
  if (raw[0] == 0xfd && raw[1] == '7' && raw[2] == 'z' && raw[3] == 'X')
    snprintf(buf, cap, "this is an xz file: decompress it (unxz) or recompress it with gzip");
  else if (raw[0] == 'B' && raw[1] == 'Z' && raw[2] == 'h')
    snprintf(buf, cap, "this is a bzip2 file: decompress it (bunzip2) or recompress it with gzip");
  else if (raw[0] == 'P' && raw[1] == 'K' && raw[2] == 3 && raw[3] == 4)
    snprintf(buf, cap, "this is a zip archive (an .npz?): extract the IDX or .npy file from it");
  else if (raw[0] == 0x93 && raw[1] == 'N' && raw[2] == 'U' && raw[3] == 'M')
    snprintf(buf, cap, "it starts like a NumPy .npy file but its magic is not \\x93NUMPY: the file is damaged");
  else if (role == DATA_IMAGES && got == IDX_MAGIC(1))
    snprintf(buf, cap, "that is an IDX label file: are the image and label paths swapped?");
  else if (role == DATA_LABELS && got == IDX_MAGIC(4))
    snprintf(buf, cap, "that is an IDX image file (n, rows, cols, channels): are the image and label paths swapped?");
  else if ((swapped >> 8) == 0x08 && idx_rank_ok(role, (int)(swapped & 0xff)))
    snprintf(buf, cap, "the header was written little-endian; IDX is big-endian");
  else if ((got >> 16) == 0 && ((got >> 8) & 0xff) != 0x08 && ((got >> 8) & 0xff) >= 0x09)
    snprintf(buf, cap, "an IDX file of type 0x%02x; lamina reads unsigned bytes (type 0x08)", (got >> 8) & 0xff);
  else if ((got >> 8) == 0x08)
    snprintf(buf, cap, "an IDX file of unsigned bytes with %u dimensions, where %s file has %s", got & 0xff,
             role == DATA_IMAGES ? "an image" : "a label",
             role == DATA_IMAGES ? "3 (n, rows, cols), 4 (n, rows, cols, channels) or 5 (n, frames, rows, cols, channels)"
                                 : "1 (n: a label per image) or 3 (n, rows, cols: a label per pixel)");
  else
    snprintf(buf, cap, "this is not an IDX file (nor a NumPy .npy file, which starts with \\x93NUMPY)");
}

lam_status idx_read(data_src *s, data_array *a) {
  memset(a, 0, sizeof *a);
  unsigned char head[4 + 4 * 5];
  size_t got = 0;
  if (data_read(s, head, 4, &got) != 0)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s': cannot read the header: %s; the file is damaged, fetch it again",
                    s->what, s->path, data_reason(s));
  if (got < 4)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s' is truncated: it ends after %zu bytes, inside the IDX header%s",
                    s->what, s->path, got, data_empty_note(s, got));
  const uint32_t magic = be32(head);
  const int rank = (int)(magic & 0xff);
  if ((magic >> 8) != 0x08 || !idx_rank_ok(s->role, rank)) {
    char hint[200];
    magic_hint(head, s->role, hint, sizeof hint);
    const int lo = s->role == DATA_IMAGES ? 3 : 1, hi = s->role == DATA_IMAGES ? 5 : 3;
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s': magic number is 0x%08x, expected 0x%08x or 0x%08x (IDX %s file); %s",
                    s->what, s->path, magic, IDX_MAGIC(lo), IDX_MAGIC(hi), s->what, hint);
  }
  const size_t head_bytes = 4 + 4 * (size_t)rank;
  size_t more = 0;
  if (data_read(s, head + 4, head_bytes - 4, &more) != 0)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s': cannot read the header: %s; the file is damaged, fetch it again",
                    s->what, s->path, data_reason(s));
  if (4 + more < head_bytes)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s' is truncated: it ends after %zu bytes, inside the %zu-byte IDX header",
                    s->what, s->path, 4 + more, head_bytes);

  a->rank = rank;
  a->channels_last = rank >= 4;
  a->count = 1;
  const int clip = rank == 5;
  for (int d = 0; d < rank; d++) {
    a->dims[d] = be32(head + 4 + 4 * d);
    uint64_t limit = d == 0 ? DATA_MAX_N : d == rank - 1 && rank >= 4 ? DATA_MAX_CHANNELS
                                         : clip && d == 1 ? DATA_MAX_FRAMES : DATA_MAX_SIDE;
    LAM_TRY(data_check_dim(s, "an IDX", IDX_DIM_NAMES[clip][d], a->dims[d], limit));
  }
  /* Each dimension checked, the product checked as it grows: no overflow in 64 bits. */
  uint64_t count = 1;
  for (int d = 0; d < rank; d++) {
    if (a->dims[d] && count > UINT64_MAX / a->dims[d])
      return LAM_FAIL(LAM_ERR_IO, "%s file '%s': its header's dimensions multiply past 2^64; the file is damaged",
                      s->what, s->path);
    count *= a->dims[d];
  }
  const unsigned long long n = a->dims[0], h = a->dims[1], w = a->dims[2];
  if (s->role == DATA_IMAGES && rank == 3)
    snprintf(a->words, sizeof a->words, "%llu images of %llux%llu", n, h, w);
  else if (s->role == DATA_IMAGES && clip)
    snprintf(a->words, sizeof a->words, "%llu clips of %llu frames of %llux%llu with %llu channels", n,
             (unsigned long long)a->dims[1], (unsigned long long)a->dims[2], (unsigned long long)a->dims[3],
             (unsigned long long)a->dims[4]);
  else if (s->role == DATA_IMAGES)
    snprintf(a->words, sizeof a->words, "%llu images of %llux%llu with %llu channels", n, h, w,
             (unsigned long long)a->dims[3]);
  else if (rank == 1)
    snprintf(a->words, sizeof a->words, "%llu labels", n);
  else
    snprintf(a->words, sizeof a->words, "%llu label maps of %llux%llu", n, h, w);
  if (count > SIZE_MAX)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s file '%s': %s do not fit in this machine's address space", s->what,
                    s->path, a->words);
  a->count = (size_t)count;
  const data_elem byte = {1, 0, 0};
  return data_payload(s, head_bytes, &byte, a);
}
