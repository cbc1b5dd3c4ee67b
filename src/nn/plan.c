/* plan.c — the memory planner: every tensor's data and gradient and every node's saved buffer get a
 * place in one arena, by liveness over a training step. Time runs forward through the nodes (node i at
 * i), then the loss (at N), then backward (node i at 2N - i); a buffer is live from its first write to
 * its last read, and two buffers share bytes only where their lives do not overlap. A gradient that a node
 * adds through a temporary (nn_din) has the temporary for that node's backward alone. Placement is
 * first-fit, largest first — simple, deterministic, and near the lower bound for chain-like graphs. */
#include <stdlib.h>
#include <string.h>

#include "nn.h"

#define ALIGN 256

typedef struct block {
  size_t bytes, off;
  int t0, t1; /* live over [t0, t1] */
  void **ptr; /* where the address goes */
  int placed;
} block;

static int root(const lam_model *m, int t) {
  while (m->tensor[t].view_of >= 0) t = m->tensor[t].view_of;
  return t;
}
/* The node whose step runs node i: itself, or the conv that fused it. */
static int runner(const lam_model *m, int i) { return m->node[i].absorbed ? m->node[i].fused_by : i; }

static int imax(int a, int b) { return a > b ? a : b; }
static int imin(int a, int b) { return a < b ? a : b; }

/* Data and gradient lives of the (root) tensor r. */
static void tensor_lives(const lam_model *m, int r, int *d0, int *d1, int *g0, int *g1) {
  const int N = m->nnodes;
  int p = runner(m, m->tensor[r].producer);
  *d0 = p, *d1 = p;
  *g0 = 2 * N + 1, *g1 = 2 * N - p;
  const nn_node *prod = &m->node[m->tensor[r].producer];
  if (prod->op->flags & NN_OUT_BWD || m->node[p].fuse) *d1 = 2 * N - p; /* backward reads its output */
  if (r == m->output) *d1 = imax(*d1, N), *g0 = N;
  for (int i = 0; i < N; i++) {
    const nn_node *n = &m->node[i];
    for (int j = 0; j < n->nin; j++) {
      if (root(m, n->in[j]) != r) continue;
      int q = runner(m, i);
      *d1 = imax(*d1, q);
      if (nn_reads_input_bwd(n)) *d1 = imax(*d1, 2 * N - q);
      if (!n->view) *g0 = imin(*g0, 2 * N - q);
    }
  }
  /* a view's readers count for its base */
  for (int t = 0; t < m->ntensors; t++)
    if (t != r && root(m, t) == r && m->tensor[t].producer >= 0) {
      int q = runner(m, m->tensor[t].producer);
      *d1 = imax(*d1, q);
      if (m->node[m->tensor[t].producer].op->flags & NN_OUT_BWD) *d1 = imax(*d1, 2 * N - q); /* in place */
      if (t == m->output) *d1 = imax(*d1, N), *g0 = imin(*g0, N);
      for (int i = 0; i < N; i++)
        for (int j = 0; j < m->node[i].nin; j++)
          if (m->node[i].in[j] == t) {
            int q2 = runner(m, i);
            *d1 = imax(*d1, q2);
            if (nn_reads_input_bwd(&m->node[i])) *d1 = imax(*d1, 2 * N - q2);
            if (!m->node[i].view) *g0 = imin(*g0, 2 * N - q2);
          }
    }
  if (*g0 > *g1) *g0 = *g1;
}

static int cmp_size(const void *a, const void *b) {
  const block *x = *(block *const *)a, *y = *(block *const *)b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return x->t0 - y->t0;
}

static size_t place(block *b, int nb) {
  block **order = malloc((size_t)nb * sizeof *order);
  if (!order) return (size_t)-1;
  for (int i = 0; i < nb; i++) order[i] = &b[i];
  qsort(order, (size_t)nb, sizeof *order, cmp_size);
  size_t top = 0;
  for (int i = 0; i < nb; i++) {
    block *x = order[i];
    size_t off = 0;
    for (int again = 1; again;) { /* the lowest offset that clashes with no placed block alive at the same time */
      again = 0;
      for (int j = 0; j < i; j++) {
        block *y = order[j];
        if (y->t1 < x->t0 || x->t1 < y->t0) continue;
        if (off < y->off + y->bytes && y->off < off + x->bytes) {
          off = (y->off + y->bytes + ALIGN - 1) / ALIGN * ALIGN;
          again = 1;
        }
      }
    }
    x->off = off;
    if (off + x->bytes > top) top = off + x->bytes;
  }
  free(order);
  return top;
}

lam_status nn_plan(lam_model *m, int B, void *base, size_t *bytes) {
  const int N = m->nnodes;
  block *b = calloc((size_t)(3 + NN_MAX_IN) * (N + 1), sizeof *b);
  if (!b) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for the memory plan");
  int nb = 0;
  for (int t = 1; t < m->ntensors; t++) {
    nn_tensor *x = &m->tensor[t];
    x->data = x->grad = NULL;
    if (x->view_of >= 0 || x->fused_away) continue;
    size_t sz = nn_batch_size(x, B) * nn_esize(m);
    sz = (sz + ALIGN - 1) / ALIGN * ALIGN;
    int d0, d1, g0, g1;
    tensor_lives(m, t, &d0, &d1, &g0, &g1);
    b[nb++] = (block){sz, 0, d0, d1, (void **)&x->data, 0};
    if (x->need_grad) b[nb++] = (block){sz, 0, g0, g1, (void **)&x->grad, 0};
  }
  for (int i = 0; i < N; i++) {
    nn_node *n = &m->node[i];
    n->aux = NULL;
    size_t sz = n->op->aux_bytes ? n->op->aux_bytes(m, n, nn_rows(m, n, B)) : 0;
    if (!sz) continue;
    int q = runner(m, i);
    b[nb++] = (block){(sz + ALIGN - 1) / ALIGN * ALIGN, 0, q, 2 * N - q, &n->aux, 0};
  }
  for (int i = 0; i < N; i++) {
    nn_node *n = &m->node[i];
    for (int j = 0; j < NN_MAX_IN; j++) {
      n->gtmp[j] = NULL;
      if (j >= n->nin || !n->accum[j] || nn_adds(n, j) || !m->tensor[n->in[j]].need_grad) continue;
      size_t sz = nn_batch_size(&m->tensor[n->in[j]], B) * nn_esize(m);
      int q = 2 * N - runner(m, i);
      b[nb++] = (block){(sz + ALIGN - 1) / ALIGN * ALIGN, 0, q, q, &n->gtmp[j], 0};
    }
  }
  size_t top = place(b, nb);
  if (top == (size_t)-1) {
    free(b);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for the memory plan");
  }
  *bytes = top ? top : ALIGN;
  if (base)
    for (int i = 0; i < nb; i++) *b[i].ptr = (char *)base + b[i].off;
  free(b);
  if (base) /* views: their base's memory in a new shape */
    for (int t = 1; t < m->ntensors; t++) {
      nn_tensor *x = &m->tensor[t];
      if (x->view_of < 0) continue;
      int r = root(m, t);
      x->data = m->tensor[r].data;
      x->grad = m->tensor[r].grad;
    }
  return LAM_OK;
}

lam_status nn_scratch_floats(const lam_model *m, int B, size_t *floats) {
  size_t need = 1;
  for (int i = 0; i < m->nnodes; i++) {
    const nn_node *n = &m->node[i];
    if (n->absorbed || !n->op->scratch_floats) continue;
    size_t s = n->op->scratch_floats(m, n, nn_rows(m, n, B));
    if (s == (size_t)-1) return LAM_FAIL(LAM_ERR_INVALID_ARG, "node %d (%s): %s", i + 1, n->op->name, lam_last_error());
    if (s > need) need = s;
  }
  *floats = need;
  return LAM_OK;
}
