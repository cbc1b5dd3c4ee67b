/* clips.c — evaluation over several clips of a video (the Kinetics protocol): a set whose samples are K clips of each
 * video, K in a row (lam_dataset_clips), scored per video: the model's softmax averaged over the video's clips, its
 * class their argmax, its loss the negative log of the averaged probability of its label. The clips of a batch are
 * decoded on all host threads (lam_dataset_rows) and run through the model in evaluation mode; the averaging is on
 * the host in float64, as its cost (a few classes per clip) is nothing beside the forward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

static int clips_of(const lam_dataset *d) { return lam_dataset_clips(d); }

lam_status lam_predict_clips(lam_model *m, const lam_dataset *d, int batch, double *probs, uint8_t *labels) {
  LAM_CHECK_ARG(m && d && probs, "lam_predict_clips: %s is NULL", !m ? "the model" : !d ? "the set" : "probs");
  LAM_CHECK_ARG(batch >= 1 && batch <= 65536, "lam_predict_clips: batch %d is out of range (1 to 65536)", batch);
  const int K = clips_of(d), C = lam_model_outputs(m);
  int in_c, in_h, in_w, out_c, out_h, out_w;
  lam_model_input_shape(m, &in_c, &in_h, &in_w);
  lam_model_output_shape(m, &out_c, &out_h, &out_w);
  LAM_CHECK_ARG(d->n >= 1 && d->n % (size_t)K == 0, "lam_predict_clips: %zu samples are not whole videos of %d clips",
                d->n, K);
  LAM_CHECK_ARG(out_h == 1 && out_w == 1, "lam_predict_clips: the model gives %dx%dx%d a sample; it must give a class "
                "per sample", out_c, out_h, out_w);
  LAM_CHECK_ARG((d->c > 0 ? d->c : 1) == in_c && d->h == in_h && d->w == in_w &&
                (d->t > 0 ? d->t : 1) == lam_model_input_frames(m),
                "lam_predict_clips: the set's samples are %d frame(s) of %dx%dx%d, the model takes %d of %dx%dx%d",
                d->t > 0 ? d->t : 1, d->c > 0 ? d->c : 1, d->h, d->w, lam_model_input_frames(m), in_c, in_h, in_w);
  const size_t sample = lam_dataset_sample_bytes(d), videos = d->n / (size_t)K;
  const int B = d->n < (size_t)batch ? (int)d->n : batch;
  uint8_t *px = malloc((size_t)B * sample), *lab = malloc((size_t)B);
  float *logits = malloc((size_t)B * C * sizeof *logits);
  int32_t *idx = malloc((size_t)B * sizeof *idx);
  lam_status s = px && lab && logits && idx ? LAM_OK
                                            : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_predict_clips: no host memory for "
                                                       "a batch of %d samples", B);
  memset(probs, 0, videos * C * sizeof *probs);
  const int was = m->training; /* evaluation mode: BatchNorm's running statistics, no dropout */
  m->training = 0;
  for (size_t off = 0; s == LAM_OK && off < d->n; off += (size_t)B) {
    const int b = (int)(d->n - off < (size_t)B ? d->n - off : (size_t)B);
    for (int r = 0; r < b; r++) idx[r] = (int32_t)(off + (size_t)r);
    s = lam_dataset_rows(d, idx, (size_t)b, px, lab);
    if (s == LAM_OK) s = lam_model_forward_u8(m, b, px, logits);
    for (int r = 0; s == LAM_OK && r < b; r++) { /* the clip's softmax / K into its video's row */
      const float *l = logits + (size_t)r * C;
      double *p = probs + (off + (size_t)r) / (size_t)K * C, mx = l[0], sum = 0.0;
      for (int k = 1; k < C; k++) mx = l[k] > mx ? l[k] : mx;
      for (int k = 0; k < C; k++) sum += exp((double)l[k] - mx);
      for (int k = 0; k < C; k++) p[k] += exp((double)l[k] - mx) / sum / K;
      if (labels) labels[(off + (size_t)r) / (size_t)K] = lab[r]; /* a video's clips share its label */
    }
  }
  m->training = was;
  free(px), free(lab), free(logits), free(idx);
  return s;
}

lam_status nn_evaluate_clips(lam_model *m, const lam_dataset *d, int batch, double *accuracy, double *loss,
                             uint64_t *confusion) {
  const int C = lam_model_outputs(m);
  LAM_CHECK_ARG(d->classes == C, "lam_evaluate: the model gives %d outputs (classes) but the data set has %d classes",
                C, d->classes);
  const size_t videos = d->n / (size_t)clips_of(d);
  double *probs = malloc(videos * C * sizeof *probs);
  uint8_t *labels = malloc(videos);
  lam_status s = probs && labels ? LAM_OK : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_evaluate: no host memory for the "
                                                       "probabilities of %zu videos", videos);
  if (s == LAM_OK) s = lam_predict_clips(m, d, batch, probs, labels);
  if (s == LAM_OK) {
    double right = 0, nll = 0;
    if (confusion) memset(confusion, 0, (size_t)C * C * sizeof *confusion);
    for (size_t v = 0; v < videos; v++) {
      const double *p = probs + v * C;
      int best = 0;
      for (int k = 1; k < C; k++) best = p[k] > p[best] ? k : best;
      const int y = labels[v] < C ? labels[v] : 0;
      right += best == y;
      nll -= log(p[y] > 1e-300 ? p[y] : 1e-300); /* a probability that underflowed: a large loss, not an infinite one */
      if (confusion) confusion[(size_t)y * C + best]++;
    }
    *accuracy = right / (double)videos;
    if (loss) *loss = nll / (double)videos;
  }
  free(probs), free(labels);
  return s;
}
