/* ranks.c — `lamina train` over several processes: under an MPI launcher (mpirun -np N) each process is a
 * rank, and the trainer's sums (lam_collective) go through MPI_Allreduce. MPI is started only when a
 * launcher says there are several ranks: MPI_Init costs ~0.4 s even alone, which a plain run need not pay. */
#include <stdio.h>
#include <stdlib.h>

#ifdef LAMINA_WITH_MPI
#include <mpi.h>
#endif

#include "cli.h"

/* The world size a launcher put in the environment (Open MPI's mpirun; MPICH's Hydra and Slurm's PMI), or 1. */
static int launcher_world(const char **who) {
  static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    if (v && atoi(v) > 1) {
      *who = vars[i];
      return atoi(v);
    }
  }
  return 1;
}

int cli_ranks_mpi(void) {
#ifdef LAMINA_WITH_MPI
  return 1;
#else
  return 0;
#endif
}

int cli_ranks_start(const char *cmd, cli_ranks *r) {
  const char *who = NULL;
  *r = (cli_ranks){.rank = 0, .world = 1};
  int want = launcher_world(&who);
  if (want == 1) return 0;
#ifdef LAMINA_WITH_MPI
  int ok = 0;
  MPI_Initialized(&ok);
  if (!ok && MPI_Init(NULL, NULL) != MPI_SUCCESS) {
    fprintf(stderr, "lamina %s: %s=%d says this is one of several ranks, but MPI_Init failed\n", cmd, who, want);
    return 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &r->world);
  r->mpi = 1;
  return 0;
#else
  fprintf(stderr, "lamina %s: %s=%d says this is one of %d ranks, but this lamina was built without MPI: install "
          "Debian's libopenmpi-dev and build again (cmake finds it), or run one process\n", cmd, who, want, want);
  return EXIT_USAGE;
#endif
}

void cli_ranks_finish(cli_ranks *r, int rc) {
#ifdef LAMINA_WITH_MPI
  if (!r->mpi) return;
  /* A rank that fails (1) would leave the others waiting in a sum for ever: it takes them down with it.
   * Bad usage (2) is every rank's alike (the same command line), and a signal's stop (130, 143) comes
   * after the same step on every rank (the trainer sums the stop flags): those end on their own, and
   * rank 0's checkpoint is not cut short by an abort. */
  if (rc == 1) MPI_Abort(MPI_COMM_WORLD, rc);
  MPI_Finalize();
  r->mpi = 0;
#else
  (void)r, (void)rc;
#endif
}

lam_status cli_ranks_sum(void *user, double *x, size_t n) {
#ifdef LAMINA_WITH_MPI
  (void)user;
  for (size_t off = 0; off < n;) { /* MPI counts are ints */
    int k = n - off > (size_t)1 << 30 ? 1 << 30 : (int)(n - off);
    if (MPI_Allreduce(MPI_IN_PLACE, x + off, k, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
      fprintf(stderr, "lamina: MPI_Allreduce of %d values failed\n", k);
      return LAM_ERR_IO;
    }
    off += (size_t)k;
  }
  return LAM_OK;
#else
  (void)user, (void)x, (void)n;
  return LAM_ERR_UNSUPPORTED;
#endif
}
