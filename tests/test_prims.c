/* test_prims.c — every nn primitive of src/prims.h, called through the context's backend table, over a
 * set of shapes (odd sizes, C = 1, P = 1, 3 and 64 channels, sizes that split the CUDA reductions over
 * several blocks a channel) on fresh random inputs. The fused conv_pool_* are left to test_fused, which
 * checks them against the plain ops through whole models; here only their new NULL bias and NULL db.
 *
 * On the CPU backend each output element is checked against a float64 reference written here, and the
 * backward primitives (activations, BatchNorm, pooling, upsampling, cross-entropy with smoothing and
 * ignored labels) against central differences of their forward primitive. Run with "cuda", the same
 * calls run on the CUDA backend and each element is checked against the CPU backend's result (CTest
 * label gpu; exit 77 without a device). Outputs that a primitive overwrites are poisoned with NaN first
 * and those it accumulates into hold random values, so an element left unwritten fails; every device
 * buffer has guard bytes after it, so a write past the end fails. Tolerances are next to each check, as
 * |got - want| <= tol * scale with the element's scale (the sum of the magnitudes that went into it);
 * scale 0 asks for the exact value.
 *
 * The cases are in tests/prims/, a file per op family (gemm, conv, pool, norm, act, loss, optim, data, layout;
 * prims_test.h: what they share); this file parses the arguments, makes the contexts and runs every family's cases
 * as one group, with the check that each primitive has a case somewhere in those files and one in --perf's table.
 * With --perf it runs none of them: it times every primitive instead (tests/prims/perf.c, the kernel lab). */

#include "prims/prims_test.h"

int g_cuda;    /* prims_test.h says what each is */
lam_fmt g_fmt;
lam_ctx *g_ctx;
lam_ctx *g_cpu;
tu_rng g_r;
int g_half = LAM_DT_BF16;

/* Every primitive of the backend's list (prims.h's LAM_NN_PRIMS) is called by a case in test_prims' sources (the
 * build passes their paths as LAMINA_TEST_PRIMS_SRC, '|' between them): a primitive added without a test fails here. */
static void test_every_prim_has_a_case(void **state) {
  (void)state;
#define NAME_OF(name, args) #name,
  static const char *const prims[] = {LAM_NN_PRIMS(NAME_OF)};
#undef NAME_OF
  enum { N_PRIMS = sizeof prims / sizeof prims[0] };
  int found[N_PRIMS] = {0};
  static char src[1 << 20];
  size_t files = 0;
  for (const char *p = LAMINA_TEST_PRIMS_SRC; *p; files++) {
    const size_t len = strcspn(p, "|");
    char path[4096];
    snprintf(path, sizeof path, "%.*s", (int)len, p);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot read this test's source %s", path);
    size_t n = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    if (n == sizeof src - 1) fail_msg("%s: longer than the %zu bytes this check reads", path, sizeof src - 1);
    src[n] = 0;
    for (size_t i = 0; i < N_PRIMS; i++) {
      char call[80];
      snprintf(call, sizeof call, "->%s(", prims[i]);
      if (strstr(src, call)) found[i] = 1;
    }
    p += len + (p[len] == '|');
  }
  int missing = 0;
  for (size_t i = 0; i < N_PRIMS; i++)
    if (!found[i]) print_error("primitive %s has no case in test_prims' sources (files read: %zu)\n", prims[i], files), missing++;
  if (missing) fail_msg("%d of %zu primitives have no case in test_prims' sources", missing, (size_t)N_PRIMS);
  print_message("  each of the %zu primitives of prims.h has a case here\n", sizeof prims / sizeof prims[0]);
}

/* Every primitive of the list has a case in --perf's table too (tests/prims/perf_cases.c): a kernel without a way
 * to time it fails here. */
static void test_every_prim_has_a_perf_case(void **state) {
  (void)state;
#define NAME_OF(name, args) #name,
  static const char *const prims[] = {LAM_NN_PRIMS(NAME_OF)};
#undef NAME_OF
  enum { N_PRIMS = sizeof prims / sizeof prims[0] };
  int missing = 0;
  for (size_t i = 0; i < N_PRIMS; i++)
    if (!prims_perf_covers(prims[i]))
      print_error("primitive %s has no case in --perf's table (tests/prims/perf_cases.c)\n", prims[i]), missing++;
  if (missing) fail_msg("%d of %zu primitives have no perf case", missing, (size_t)N_PRIMS);
  print_message("  each of the %zu primitives of prims.h has a perf case\n", (size_t)N_PRIMS);
}

int main(int argc, char **argv) {
  g_fmt = LAM_FMT_NCHW;
  int perf = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "nhwc")) g_fmt = lam_fmt_of(LAM_DT_F32, 1);
    if (!strcmp(argv[i], "--perf")) perf = 1;
  }
  if (argc > 1 && !strcmp(argv[1], "cuda")) {
    const char *why = NULL;
    if (lam_cuda_device_count(&why) == 0) {
      printf("test_prims cuda: no CUDA device (%s): skipping\n", why ? why : "none");
      return 77;
    }
    g_cuda = 1;
  }
  if (lam_ctx_create(&g_ctx, g_cuda ? LAM_DEVICE_CUDA : LAM_DEVICE_CPU) != LAM_OK ||
      (g_cuda && lam_ctx_create(&g_cpu, LAM_DEVICE_CPU) != LAM_OK)) {
    fprintf(stderr, "test_prims: %s\n", lam_last_error());
    return 1;
  }
  if (lam_ctx_set_precision(g_ctx, LAM_PRECISION_FP32) != LAM_OK) { /* the CPU's matrix products are fp32 */
    fprintf(stderr, "test_prims: %s\n", lam_last_error());
    return 1;
  }
  if (perf) { /* the kernel lab (tests/prims/perf.c) instead of the tests */
    int rc = prims_perf(g_ctx, argc, argv);
    lam_ctx_free(g_ctx);
    if (g_cpu) lam_ctx_free(g_cpu);
    return rc;
  }
  /* every family's cases, then this file's own */
  const struct CMUnitTest *(*const families[])(size_t *) = {prims_gemm_tests,  prims_conv_tests, prims_pool_tests,
                                                             prims_norm_tests,  prims_act_tests,  prims_loss_tests,
                                                             prims_optim_tests, prims_data_tests, prims_layout_tests};
  const size_t nfam = sizeof families / sizeof families[0];
  size_t total = 2;
  for (size_t f = 0; f < nfam; f++) {
    size_t n = 0;
    families[f](&n);
    total += n;
  }
  struct CMUnitTest *tests = malloc(total * sizeof *tests);
  if (!tests) return 1;
  size_t nt = 0;
  for (size_t f = 0; f < nfam; f++) {
    size_t n = 0;
    const struct CMUnitTest *t = families[f](&n);
    for (size_t i = 0; i < n; i++) tests[nt++] = t[i];
  }
  tests[nt++] = (struct CMUnitTest)cmocka_unit_test(test_every_prim_has_a_case);
  tests[nt++] = (struct CMUnitTest)cmocka_unit_test(test_every_prim_has_a_perf_case);
  const char *name = g_cuda ? (g_fmt.nhwc ? "prims_nhwc_cuda" : "prims_cuda") : (g_fmt.nhwc ? "prims_nhwc" : "prims");
  int failed = tu_run_group(name, tests, nt, NULL, NULL);
  free(tests);
  lam_ctx_free(g_ctx);
  if (g_cpu) lam_ctx_free(g_cpu);
  return failed ? 1 : 0;
}
