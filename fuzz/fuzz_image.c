/* fuzz_image.c — image files (src/data/image.c): the input is a file's bytes, PNG or JPEG by its first bytes,
 * decoded as an image folder decodes it (as it is; and to be fitted to a size, where larger images are read and a
 * JPEG is decoded smaller by DCT scaling), converted to the other channel count and fitted as the folder does, and
 * read through lam_image_load, what `lamina predict --input` calls, as grey and as colour. A bad file must be an
 * error, never a crash, a read out of bounds, or an allocation over the decoders' bounds (data.h). */
#define _GNU_SOURCE /* memfd_create (fuzz_util.h) */
#include <string.h>

#include "../src/data/data.h"
#include "fuzz_util.h"

/* Every byte of the decoded image read (ASan sees a short buffer), then converted and fitted. */
static void use(data_image *im, int H, int W) {
  volatile uint8_t sum = 0;
  for (size_t i = 0; i < (size_t)im->h * im->w * im->c; i++) sum ^= im->px[i];
  if (image_to_channels(im, im->c == 1 ? 3 : 1) != LAM_OK) return;
  uint8_t *out = malloc((size_t)H * W * im->c);
  if (out) image_fit(im, H, W, out);
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  int h, w;
  image_jpeg_size(data, n, &h, &w); /* the header walk that picks nvJPEG's files */
  data_image im;
  if (image_decode("fuzz", data, n, &im) == LAM_OK) use(&im, 5, 7);
  free(im.px);
  if (image_decode_fit("fuzz", data, n, 16, 12, &im) == LAM_OK) use(&im, 16, 12);
  free(im.px);
  char path[64];
  int fd = fuzz_file(data, n, path, sizeof path);
  if (fd < 0) return 0;
  uint8_t px[3 * 8 * 8];
  lam_image_load(path, 1, 8, 8, px);
  lam_image_load(path, 3, 8, 8, px);
  close(fd);
  return 0;
}
