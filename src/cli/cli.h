/* cli.h — pieces shared by the lamina CLI's subcommands: option-value parsing (a bad value is a message
 * naming the option and exit code 2), input generation, checking and statistics. */
#ifndef LAMINA_CLI_H
#define LAMINA_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "lamina.h"

enum { EXIT_USAGE = 2 };

/* Each returns 0 on success; on a bad value prints "lamina <cmd>: <opt>: ..." to stderr and returns -1. */
int cli_parse_count(const char *cmd, const char *opt, const char *s, size_t max, size_t *out);
int cli_parse_int(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out);
int cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out);
int cli_parse_decode(const char *cmd, const char *s, int *out);
/* "lamina <cmd>: <message>" plus a hint to --help on stderr; returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The course's inputs, deterministic for a seed whatever the thread count: greys = floor(uniform(0,
 * 255)) and weights = normal(0.5, 0.1). Either of g32/g8 may be NULL. */
void cli_make_inputs(uint64_t seed, size_t n, float *g32, uint8_t *g8, float *w);
/* Largest |out[i] - tanh(g[i] / 255 * w[i])| against a float64 reference; NaN if any out is NaN. */
double cli_max_abs_err(size_t n, const float *g32, const uint8_t *g8, const float *w, const float *out);
/* Fills with NaN (so an element nothing wrote cannot pass the check). */
void cli_poison(float *p, size_t n);
double cli_now_ms(void); /* monotonic clock */
double cli_median(double *v, int n); /* sorts v */
double cli_min(const double *v, int n);

/* --json output (json.c): a number, or null where it is not finite; a string (NULL as ""); prints obj as
 * one line and releases it (NULL: out of memory); returns 0, or 1 after saying why. */
json_t *cli_json_num(double v);
json_t *cli_json_str(const char *s); /* bytes that are not UTF-8 come out as \udcXX (json.c says why) */
int cli_json_print(json_t *obj);
/* s as one CSV field (RFC 4180): as is, or quoted where it holds a comma, a quote, CR or LF (quotes doubled). */
void cli_csv_field(FILE *f, const char *s);

/* Ranks (ranks.c): under an MPI launcher of several processes, MPI started and this one's rank; under a
 * torchrun-style environment (or --gpus's), the rank and where rank 0 serves NCCL's id; else rank 0 of 1.
 * cli_ranks_start returns 0, or an exit status after saying why; cli_ranks_finish ends MPI (a failing
 * rank, rc != 0, aborts them all); cli_ranks_sum is a lam_collective's sum (MPI's); cli_ranks_share_id
 * gives every rank rank 0's NCCL id (ok: rank 0 made it), 0 or 1 after saying why; cli_ranks_spawn runs
 * `lamina <argv>` as n ranks on this machine and returns their exit status. */
#define CLI_RANKS_ID_BYTES 128 /* LAM_NCCL_ID_BYTES */
typedef struct cli_ranks {
  int rank, world, local_rank, local_world; /* local_world 0: not known */
  int mpi;                                  /* MPI started */
  const char *launcher;                     /* "mpirun", "environment", "--gpus"; NULL alone */
  char addr[256];                           /* environment: rank 0's host (MASTER_ADDR) and port */
  int port;
} cli_ranks;
int cli_ranks_start(const char *cmd, cli_ranks *r);
int cli_ranks_mpi(void); /* built with MPI */
void cli_ranks_finish(cli_ranks *r, int rc);
int cli_ranks_share_id(const cli_ranks *r, int ok, unsigned char *id);
int cli_ranks_spawn(int n, int argc, char **argv);
lam_status cli_ranks_sum(void *user, double *x, size_t n);

/* A subcommand (lamina <command>, lamina data <kind>, lamina bench <benchmark>): its name, what it does in
 * a line, and what runs it (argv[0] its name). Each list is one table, NULL-terminated, from which its
 * help, its dispatch and its "unknown ..." message are all made, so that none lists fewer than there are. */
typedef struct cli_sub {
  const char *name, *summary;
  int (*run)(int argc, char **argv);
} cli_sub;
extern const cli_sub cli_data_kinds[]; /* cmd_data.c: the data makers */
extern const cli_sub cli_benchmarks[]; /* cmd_bench.c */
int bench_data(int argc, char **argv); /* cmd_bench_data.c */
/* The table's names, "a, b, c", in buf (returned). */
const char *cli_sub_names(const cli_sub *t, char *buf, size_t size);

int cmd_hidden(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_model(int argc, char **argv);
int cmd_export(int argc, char **argv); /* cmd_export.c: weights out as safetensors */
int cmd_import(int argc, char **argv); /* and in */
int cmd_data(int argc, char **argv);   /* cmd_data.c: data sets anyone can rebuild */
int cmd_predict(int argc, char **argv); /* cmd_predict.c: a saved model on images */

/* Model specs (cmd_model.c): the grammar (its layers from lam_model_layers), printed to f; --model's value as a
 * spec, read from the file of that name where one exists (*spec malloc'ed; returns 0, or an exit status after
 * printing why). */
void cli_print_model_grammar(FILE *f);
int cli_model_spec(const char *cmd, const char *arg, char **spec);

#endif
