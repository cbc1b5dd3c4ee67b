/* lab_video_decode — the clip decoder alone, host against NVDEC: N threads each decode clips of the files named on
 * the command line (one clip a file, round robin, from the video's middle), and the lab prints clips/s, frames/s,
 * the first clip's time on each thread (an NVDEC decoder's set-up) and the median of the rest. NVDEC runs both routes
 * (video_nvdec_route): FFmpeg's cuvid decoder ("cuvid") and its CUDA hwaccel ("hwacc"). With no GPU or no
 * FFmpeg the NVDEC rows say why and the host's still run.
 *   lab_video_decode [-t THREADS] [-n CLIPS] [-T FRAMES] [-S STRIDE] [-s HxW] [-c 1|3] [-m cpu|gpu|both] FILE...
 * Built on demand: cmake --build build --target lab_video_decode. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../src/data/data.h"

typedef struct job {
  char **files;
  int nfiles, T, S, C, H, W, gpu;
  int next; /* the next clip's number, under mu */
  int n;    /* clips in all */
  pthread_mutex_t mu;
  double *ms; /* each clip's time, by its number */
  int *thread_first; /* 1 where the clip was its thread's first */
  int failed;
  char error[512];
} job;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void *worker(void *arg) {
  job *j = arg;
  uint8_t *px = malloc((size_t)j->T * j->H * j->W * j->C);
  int first = 1;
  for (;;) {
    pthread_mutex_lock(&j->mu);
    const int k = j->failed ? j->n : j->next++;
    pthread_mutex_unlock(&j->mu);
    if (k >= j->n || !px) break;
    const char *path = j->files[k % j->nfiles];
    int64_t frames = 0;
    int h, w;
    lam_status s = video_probe(path, &frames, &h, &w);
    const double t0 = now_ms();
    if (s == LAM_OK)
      s = (j->gpu ? video_clip_nvdec : video_clip)(path, video_middle_first(frames, j->T, j->S), j->S, j->T, j->C,
                                                   j->H, j->W, px);
    j->ms[k] = now_ms() - t0;
    j->thread_first[k] = first, first = 0;
    if (s != LAM_OK) {
      pthread_mutex_lock(&j->mu);
      if (!j->failed) snprintf(j->error, sizeof j->error, "%s", lam_last_error());
      j->failed = 1;
      pthread_mutex_unlock(&j->mu);
    }
  }
  free(px);
  return NULL;
}

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void run(char **files, int nfiles, int threads, int n, int T, int S, int C, int H, int W, int gpu) {
  const char *why = "", *name = gpu == 2 ? "hwacc" : gpu ? "cuvid" : "cpu";
  video_nvdec_route(gpu == 2);
  if (gpu && !video_nvdec(&why)) {
    printf("%-5s %2d threads: NVDEC cannot be used: %s\n", name, threads, why);
    return;
  }
  job j = {.files = files, .nfiles = nfiles, .T = T, .S = S, .C = C, .H = H, .W = W, .gpu = gpu, .n = n};
  pthread_mutex_init(&j.mu, NULL);
  j.ms = calloc((size_t)n, sizeof *j.ms);
  j.thread_first = calloc((size_t)n, sizeof *j.thread_first);
  pthread_t *th = calloc((size_t)threads, sizeof *th);
  const double t0 = now_ms();
  for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, worker, &j);
  for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
  const double wall = now_ms() - t0;
  if (j.failed) {
    printf("%-5s %2d threads: failed: %s\n", name, threads, j.error);
  } else {
    double *rest = calloc((size_t)n, sizeof *rest), first_max = 0;
    int nr = 0;
    for (int k = 0; k < n; k++)
      if (j.thread_first[k]) first_max = j.ms[k] > first_max ? j.ms[k] : first_max;
      else rest[nr++] = j.ms[k];
    qsort(rest, (size_t)nr, sizeof *rest, cmp);
    printf("%-5s %2d threads: %8.0f clips/s %9.0f frames/s; first clip on a thread <= %7.2f ms, then median %6.2f ms "
           "(%d clips, %.2f s)\n", name, threads, n / (wall / 1e3), (double)n * T / (wall / 1e3),
           first_max, nr ? rest[nr / 2] : 0.0, n, wall / 1e3);
    free(rest);
  }
  fflush(stdout);
  free(th), free(j.ms), free(j.thread_first);
  pthread_mutex_destroy(&j.mu);
}

int main(int argc, char **argv) {
  int threads = 0, n = 400, T = 16, S = 2, C = 1, H = 112, W = 112, opt;
  const char *mode = "both";
  while ((opt = getopt(argc, argv, "t:n:T:S:s:c:m:")) != -1) {
    if (opt == 't') threads = atoi(optarg);
    else if (opt == 'n') n = atoi(optarg);
    else if (opt == 'T') T = atoi(optarg);
    else if (opt == 'S') S = atoi(optarg);
    else if (opt == 's' && sscanf(optarg, "%dx%d", &H, &W) != 2) H = W = atoi(optarg);
    else if (opt == 'c') C = atoi(optarg);
    else if (opt == 'm') mode = optarg;
    else if (opt == '?') return 2;
  }
  if (optind >= argc || n < 1 || T < 1 || S < 1 || H < 1 || W < 1 || (C != 1 && C != 3)) {
    fprintf(stderr, "usage: lab_video_decode [-t THREADS] [-n CLIPS] [-T FRAMES] [-S STRIDE] [-s HxW] [-c 1|3] "
                    "[-m cpu|gpu|both] FILE...\n");
    return 2;
  }
  if (!video_supported()) {
    fprintf(stderr, "lab_video_decode: %s\n", video_unsupported_why());
    return 1;
  }
  const int counts[] = {1, 4, 16};
  for (int g = 0; g < 3; g++) { /* the host; NVDEC through cuvid; NVDEC through the hwaccel */
    if ((g == 0 && !strcmp(mode, "gpu")) || (g > 0 && !strcmp(mode, "cpu"))) continue;
    for (int c = 0; c < 3; c++)
      if (!threads || threads == counts[c]) run(argv + optind, argc - optind, counts[c], n, T, S, C, H, W, g);
    if (threads && threads != 1 && threads != 4 && threads != 16)
      run(argv + optind, argc - optind, threads, n, T, S, C, H, W, g);
  }
  return 0;
}
