/* fuzz_coco.c — the COCO instances reader (src/data/coco.c): the input is the JSON itself. A bad file must be
 * an error, never a crash, a read out of bounds or an allocation the file merely claims; a file that parses
 * must render every image's mask (small images only: a fuzzer's input may name 2^28 pixels, which is valid
 * but slow to clear). */
#include <stdlib.h>
#include <string.h>

#include "../src/data/data.h"

#define FUZZ_MAX_PIXELS (1u << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  coco_set *s = NULL;
  if (coco_parse((const char *)data, n, &s) != LAM_OK) return 0;
  for (size_t i = 0; i < coco_n_images(s); i++) {
    const coco_image *im = coco_get_image(s, i);
    const size_t P = (size_t)im->h * im->w;
    if (P > FUZZ_MAX_PIXELS) continue;
    uint8_t *m = malloc(P);
    if (!m) break;
    if (coco_mask(s, i, m) == LAM_OK) { /* every pixel a class, the background or the crowd's 255 */
      for (size_t p = 0; p < P; p++)
        if (m[p] != 255 && m[p] > coco_n_classes(s)) abort();
    }
    free(m);
  }
  for (size_t k = 0; k < coco_n_classes(s); k++) (void)strlen(coco_class_name(s, k));
  coco_free(s);
  return 0;
}
