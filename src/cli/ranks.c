/* ranks.c — `lamina train` over several processes. Three ways to start the ranks:
 *   - an MPI launcher (mpirun -np N): MPI gives rank and local rank; CPU ranks sum through MPI_Allreduce,
 *     GPU ranks through NCCL, whose unique id rank 0 sends with MPI_Bcast;
 *   - a torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; Slurm's
 *     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID stand in for the first three): GPU ranks only, the NCCL id
 *     sent by rank 0 over TCP;
 *   - `lamina train --gpus N`: this process starts N ranks of itself on this machine, in that environment.
 * MPI is started only when a launcher says there are several ranks: MPI_Init costs ~0.4 s even alone,
 * which a plain run need not pay. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef LAMINA_WITH_MPI
#include <mpi.h>
#endif

#include "cli.h"

/* The world size an MPI launcher put in the environment (Open MPI's mpirun; MPICH's Hydra and Slurm's
 * PMI), or 1. */
static int mpi_world(const char **who) {
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

/* A whole number from the environment variable, in [lo, hi]; -1 when unset, -2 (said) when bad. */
static long env_long(const char *cmd, const char *name, long lo, long hi) {
  const char *v = getenv(name);
  if (!v || !*v) return -1;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < lo || x > hi) {
    fprintf(stderr, "lamina %s: %s='%s' is not a whole number from %ld to %ld; the launcher's environment is "
            "broken, or was set by hand wrongly\n", cmd, name, v, lo, hi);
    return -2;
  }
  return x;
}

/* The torchrun-style environment (or Slurm's), when it says there are several ranks: 0 and r filled,
 * 1 when it says nothing, EXIT_USAGE after saying what is wrong. */
static int env_ranks(const char *cmd, cli_ranks *r) {
  const char *n_world = "WORLD_SIZE", *n_rank = "RANK", *n_local = "LOCAL_RANK";
  if (!getenv("WORLD_SIZE") && getenv("SLURM_NTASKS") && getenv("MASTER_ADDR"))
    n_world = "SLURM_NTASKS", n_rank = "SLURM_PROCID", n_local = "SLURM_LOCALID";
  long world = env_long(cmd, n_world, 1, 1 << 20);
  if (world == -2) return EXIT_USAGE;
  if (world <= 1) return 1;
  long rank = env_long(cmd, n_rank, 0, world - 1), local = env_long(cmd, n_local, 0, world - 1);
  long lworld = env_long(cmd, "LOCAL_WORLD_SIZE", 1, world);
  long wait = env_long(cmd, "LAMINA_RENDEZVOUS_TIMEOUT", 1, 86400); /* read again where the ranks meet */
  if (rank == -2 || local == -2 || lworld == -2 || wait == -2) return EXIT_USAGE;
  if (rank < 0) {
    fprintf(stderr, "lamina %s: %s=%ld says this is one of several ranks, but %s (this one's, 0 to %ld) is not set\n",
            cmd, n_world, world, n_rank, world - 1);
    return EXIT_USAGE;
  }
  const char *addr = getenv("MASTER_ADDR");
  /* torchrun's agent holds MASTER_PORT for its own store (TORCHELASTIC_USE_AGENT_STORE): the next one up */
  const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
  long port = env_long(cmd, "LAMINA_PORT", 1, 65535);
  if (port == -1) {
    port = env_long(cmd, "MASTER_PORT", 1, 65534);
    if (port >= 0 && agent && !strcmp(agent, "True")) port++;
  }
  if (port == -2) return EXIT_USAGE;
  if (!addr || !*addr || port < 0) {
    fprintf(stderr, "lamina %s: %s=%ld says this is one of several ranks, but %s is not set: set MASTER_ADDR (rank "
            "0's host) and MASTER_PORT (a free port there) as torchrun does, or start the ranks with mpirun or "
            "'lamina train --gpus N'\n", cmd, n_world, world, !addr || !*addr ? "MASTER_ADDR" : "MASTER_PORT");
    return EXIT_USAGE;
  }
  *r = (cli_ranks){.rank = (int)rank, .world = (int)world, .local_rank = local >= 0 ? (int)local : (int)rank,
                   .local_world = lworld > 0 ? (int)lworld : 0, .port = (int)port};
  snprintf(r->addr, sizeof r->addr, "%s", addr);
  const char *via = getenv("LAMINA_LAUNCHER");
  r->launcher = via && !strcmp(via, "gpus") ? "--gpus" : "environment";
  return 0;
}

int cli_ranks_start(const char *cmd, cli_ranks *r) {
  const char *who = NULL;
  *r = (cli_ranks){.rank = 0, .world = 1, .local_world = 1};
  int want = mpi_world(&who);
  if (want == 1) {
    int rc = env_ranks(cmd, r);
    return rc == 1 ? 0 : rc;
  }
#ifdef LAMINA_WITH_MPI
  int ok = 0;
  MPI_Initialized(&ok);
  if (!ok && MPI_Init(NULL, NULL) != MPI_SUCCESS) {
    fprintf(stderr, "lamina %s: %s=%d says this is one of several ranks, but MPI_Init failed\n", cmd, who, want);
    return 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &r->world);
  MPI_Comm local; /* the ranks of this machine: the local rank picks the GPU */
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r->rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
    MPI_Comm_rank(local, &r->local_rank);
    MPI_Comm_size(local, &r->local_world);
    MPI_Comm_free(&local);
  } else {
    r->local_rank = r->rank, r->local_world = r->world;
  }
  r->mpi = 1;
  r->launcher = "mpirun";
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

/* ---- NCCL's unique id from rank 0 to every rank over TCP (the torchrun-style launch) ----
 * Each rank connects to MASTER_ADDR:port and says who it is (magic, world, rank); rank 0 answers each
 * with the status of its id and the id. Anything else that connects is dropped. */
#define ID_MAGIC "lamina-nccl-id-1"
typedef struct {
  char magic[16];
  int32_t world, rank; /* the asker's; in the answer, rank 0's */
  int32_t ok;          /* the answer: 1 when the id is good */
  unsigned char id[CLI_RANKS_ID_BYTES];
} id_msg;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Sends or receives exactly n bytes before the deadline; 0 on success. */
static int io_all(int fd, void *buf, size_t n, int send_it, double deadline) {
  char *p = buf;
  while (n) {
    struct pollfd pf = {.fd = fd, .events = send_it ? POLLOUT : POLLIN};
    int left_ms = (int)((deadline - now_s()) * 1e3);
    if (left_ms <= 0 || poll(&pf, 1, left_ms) <= 0) return -1;
    ssize_t k = send_it ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k <= 0) {
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return -1;
    }
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* LAMINA_RENDEZVOUS_TIMEOUT seconds (checked by env_ranks), else 300. */
static double rendezvous_timeout(void) {
  const char *e = getenv("LAMINA_RENDEZVOUS_TIMEOUT");
  double v = e && *e ? atof(e) : 0;
  return v > 0 ? v : 300.0;
}

/* The socket `lamina train --gpus` already listens on for rank 0 (LAMINA_LISTEN_FD), if it is one on this
 * rank's port; else -1. Handed over rather than bound again so that no other program can take the port between
 * the launcher's choice and rank 0's start (seen on a busy host: EADDRINUSE). */
static int inherited_listener(const cli_ranks *r) {
  const char *e = getenv("LAMINA_LISTEN_FD");
  if (!e || !*e) return -1;
  unsetenv("LAMINA_LISTEN_FD"); /* not for anything this rank starts */
  char *end;
  long fd = strtol(e, &end, 10);
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  if (*end || fd < 3 || fd > 65535 || fcntl((int)fd, F_GETFD) < 0) return -1;
  if (getsockname((int)fd, (struct sockaddr *)&a, &len) != 0 || a.sin_family != AF_INET || ntohs(a.sin_port) != r->port)
    return -1;
  fcntl((int)fd, F_SETFD, FD_CLOEXEC);
  return (int)fd;
}

static int serve_id(const cli_ranks *r, int ok, const unsigned char *id) {
  char port[16];
  snprintf(port, sizeof port, "%d", r->port);
  struct addrinfo hints = {.ai_family = AF_INET6, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
  int fd = inherited_listener(r), one = 1, zero = 0, have = fd >= 0;
  if (!have && getaddrinfo(NULL, port, &hints, &ai) == 0) { /* both IPv6 and IPv4 where the host allows */
    fd = socket(ai->ai_family, ai->ai_socktype, 0);
    if (fd >= 0) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || bind(fd, ai->ai_addr, ai->ai_addrlen))) {
      close(fd);
      fd = -1;
    }
    freeaddrinfo(ai);
  }
  if (fd < 0 && !have) { /* no IPv6 here: IPv4 alone */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->port), .sin_addr.s_addr = htonl(INADDR_ANY)};
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || bind(fd, (struct sockaddr *)&a, sizeof a))) {
      int e = errno;
      close(fd);
      fd = -1;
      errno = e;
    }
  }
  if (fd < 0 || (!have && listen(fd, r->world) != 0)) {
    fprintf(stderr, "lamina train: rank 0 cannot listen on port %d for the other ranks: %s; %s\n", r->port, strerror(errno),
            errno == EADDRINUSE ? "another program holds it: set LAMINA_PORT (or MASTER_PORT) to a free port"
                                : "set LAMINA_PORT to a port this host may open");
    if (fd >= 0) close(fd);
    return 1;
  }
  const double deadline = now_s() + rendezvous_timeout();
  int served = 0, refused = 0;
  while (served < r->world - 1) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int left_ms = (int)((deadline - now_s()) * 1e3);
    if (left_ms <= 0 || poll(&pf, 1, left_ms) <= 0) {
      fprintf(stderr, "lamina train: rank 0 heard from %d of the other %d ranks on port %d in %.0f s (is every rank "
              "started, with MASTER_ADDR=%s reaching this host? LAMINA_RENDEZVOUS_TIMEOUT sets the wait)\n", served,
              r->world - 1, r->port, rendezvous_timeout(), r->addr);
      close(fd);
      return 1;
    }
    int c = accept(fd, NULL, NULL);
    if (c < 0) continue;
    id_msg ask, ans = {.world = r->world, .rank = 0, .ok = ok};
    memcpy(ans.magic, ID_MAGIC, sizeof ans.magic);
    memcpy(ans.id, id, sizeof ans.id);
    double d = now_s() + 10.0 < deadline ? now_s() + 10.0 : deadline;
    if (io_all(c, &ask, sizeof ask, 0, d) == 0 && !memcmp(ask.magic, ID_MAGIC, sizeof ask.magic)) {
      if (ask.world != r->world) {
        ans.ok = 0, refused = 1; /* told, and said here too */
        fprintf(stderr, "lamina train: rank %d says there are %d ranks, rank 0 %d: every rank must be started with the "
                "same WORLD_SIZE\n", (int)ask.rank, (int)ask.world, r->world);
      }
      if (io_all(c, &ans, sizeof ans, 1, d) == 0) served++;
    }
    close(c);
  }
  close(fd);
  return refused;
}

static int fetch_id(const cli_ranks *r, unsigned char *id) {
  char port[16];
  snprintf(port, sizeof port, "%d", r->port);
  const double deadline = now_s() + rendezvous_timeout();
  const char *last = "no answer";
  while (now_s() < deadline) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL, *a;
    int g = getaddrinfo(r->addr, port, &hints, &ai);
    if (g != 0) {
      fprintf(stderr, "lamina train: MASTER_ADDR=%s: %s; set it to rank 0's host name or address\n", r->addr,
              gai_strerror(g));
      return 1;
    }
    for (a = ai; a; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype, 0);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        last = strerror(errno);
        close(fd);
        continue;
      }
      id_msg ask = {.world = r->world, .rank = r->rank}, ans;
      memcpy(ask.magic, ID_MAGIC, sizeof ask.magic);
      double d = now_s() + 30.0 < deadline ? now_s() + 30.0 : deadline;
      int bad = io_all(fd, &ask, sizeof ask, 1, d) || io_all(fd, &ans, sizeof ans, 0, d);
      close(fd);
      if (bad || memcmp(ans.magic, ID_MAGIC, sizeof ans.magic)) {
        last = "something else answered there";
        continue;
      }
      freeaddrinfo(ai);
      if (!ans.ok || ans.world != r->world) {
        fprintf(stderr, "lamina train: rank %d: rank 0 (%s:%d) %s\n", r->rank, r->addr, r->port,
                ans.world != r->world ? "counts another number of ranks: start every rank with the same WORLD_SIZE"
                                      : "could not make NCCL's id (it says why)");
        return 1;
      }
      memcpy(id, ans.id, CLI_RANKS_ID_BYTES);
      return 0;
    }
    freeaddrinfo(ai);
    usleep(100 * 1000); /* rank 0 may not be listening yet */
  }
  fprintf(stderr, "lamina train: rank %d could not reach rank 0 at %s:%d in %.0f s (last: %s); is rank 0 started, and "
          "MASTER_ADDR/MASTER_PORT (or LAMINA_PORT) the same for every rank?\n", r->rank, r->addr, r->port,
          rendezvous_timeout(), last);
  return 1;
}

int cli_ranks_share_id(const cli_ranks *r, int ok, unsigned char *id) {
  if (r->mpi) {
#ifdef LAMINA_WITH_MPI
    unsigned char buf[CLI_RANKS_ID_BYTES + 1];
    buf[0] = (unsigned char)ok;
    memcpy(buf + 1, id, CLI_RANKS_ID_BYTES);
    if (MPI_Bcast(buf, (int)sizeof buf, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
      fprintf(stderr, "lamina train: MPI_Bcast of NCCL's id failed\n");
      return 1;
    }
    memcpy(id, buf + 1, CLI_RANKS_ID_BYTES);
    if (!buf[0]) {
      if (r->rank > 0) fprintf(stderr, "lamina train: rank %d: rank 0 could not make NCCL's id (it says why)\n", r->rank);
      return 1;
    }
    return 0;
#endif
  }
  if (r->rank == 0) return serve_id(r, ok, id) || !ok;
  return fetch_id(r, id);
}

/* ---- lamina train --gpus N ---- */

static volatile sig_atomic_t g_forward; /* a signal the parent passes on to its ranks */
static void on_parent_signal(int sig) { g_forward = sig; }

int cli_ranks_spawn(int n, int argc, char **argv) {
  /* A free port for rank 0, the kernel's pick, listened on here and handed to rank 0 open (LAMINA_LISTEN_FD):
   * closed and bound again, another program's connection could take it in between. */
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, n) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (!port) {
    fprintf(stderr, "lamina train --gpus: no free local port for the ranks to meet on: %s\n", strerror(errno));
    if (fd >= 0) close(fd);
    return 1;
  }
  char self[4096];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k <= 0) {
    fprintf(stderr, "lamina train --gpus: cannot find this program (/proc/self/exe): %s\n", strerror(errno));
    close(fd);
    return 1;
  }
  self[k] = 0;
  char **args = calloc((size_t)argc + 2, sizeof *args);
  pid_t *pids = calloc((size_t)n, sizeof *pids);
  int *codes = calloc((size_t)n, sizeof *codes);
  if (!args || !pids || !codes) {
    free(args), free(pids), free(codes);
    fprintf(stderr, "lamina train --gpus: out of host memory\n");
    close(fd);
    return 1;
  }
  args[0] = self;
  for (int i = 0; i < argc; i++) args[i + 1] = argv[i]; /* "train", its options */
  /* The terminal's Ctrl-C reaches every rank itself (one process group); SIGTERM and SIGHUP sent to
   * this process are passed on, so that the ranks stop after the same step and rank 0 saves. */
  struct sigaction sa = {.sa_handler = on_parent_signal}, ign = {.sa_handler = SIG_IGN}, old[3];
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &ign, &old[0]);
  sigaction(SIGTERM, &sa, &old[1]);
  sigaction(SIGHUP, &sa, &old[2]);
  fflush(NULL);
  int started = 0, rc = 0;
  for (; started < n; started++) {
    pid_t p = fork();
    if (p < 0) {
      fprintf(stderr, "lamina train --gpus: cannot start rank %d: %s\n", started, strerror(errno));
      rc = 1;
      break;
    }
    if (p == 0) {
      char v[32];
      sigaction(SIGINT, &old[0], NULL);
      sigaction(SIGTERM, &old[1], NULL);
      sigaction(SIGHUP, &old[2], NULL);
      snprintf(v, sizeof v, "%d", n);
      setenv("WORLD_SIZE", v, 1);
      setenv("LOCAL_WORLD_SIZE", v, 1);
      snprintf(v, sizeof v, "%d", started);
      setenv("RANK", v, 1);
      setenv("LOCAL_RANK", v, 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      snprintf(v, sizeof v, "%d", port);
      setenv("MASTER_PORT", v, 1);
      setenv("LAMINA_PORT", v, 1);
      unsetenv("TORCHELASTIC_USE_AGENT_STORE");
      setenv("LAMINA_LAUNCHER", "gpus", 1);
      if (started == 0) {
        snprintf(v, sizeof v, "%d", fd);
        setenv("LAMINA_LISTEN_FD", v, 1);
      } else {
        close(fd);
      }
      execv(self, args);
      fprintf(stderr, "lamina train --gpus: cannot run %s: %s\n", self, strerror(errno));
      _exit(1);
    }
    pids[started] = p;
  }
  close(fd); /* rank 0 has it */
  /* Wait for all; when one fails (not a signal's orderly stop), the others would wait in NCCL for ever:
   * they are ended. The status is rank 0's, else the first failure's. */
  int left = started, first_bad = -1, killed = 0;
  double end_at = rc ? now_s() : 0, term_at = 0; /* when they are to be ended; when SIGTERM went */
  while (left > 0) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      int i = 0;
      while (i < started && pids[i] != p) i++;
      if (i == started) continue;
      codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (WIFSIGNALED(st) && !(end_at && (WTERMSIG(st) == SIGTERM || WTERMSIG(st) == SIGKILL)))
        fprintf(stderr, "lamina train --gpus: rank %d was killed by signal %d (%s)\n", i, WTERMSIG(st),
                strsignal(WTERMSIG(st)));
      pids[i] = 0;
      left--;
      int orderly = codes[i] == 0 || codes[i] == 128 + SIGINT || codes[i] == 128 + SIGTERM || codes[i] == EXIT_USAGE;
      if (!orderly && first_bad < 0) {
        first_bad = i;
        if (!end_at) end_at = now_s();
      }
      continue;
    }
    if (g_forward) {
      for (int i = 0; i < started; i++)
        if (pids[i]) kill(pids[i], (int)g_forward);
      g_forward = 0;
    }
    /* SIGTERM first; SIGKILL 10 s later for a rank stuck in a collective */
    int sig = end_at && !term_at ? SIGTERM : term_at && !killed && now_s() - term_at > 10.0 ? SIGKILL : 0;
    if (sig) {
      for (int i = 0; i < started; i++)
        if (pids[i]) kill(pids[i], sig);
      if (sig == SIGTERM) term_at = now_s();
      else killed = 1;
    }
    usleep(20 * 1000);
  }
  sigaction(SIGINT, &old[0], NULL);
  sigaction(SIGTERM, &old[1], NULL);
  sigaction(SIGHUP, &old[2], NULL);
  if (!rc) rc = codes[0] ? codes[0] : first_bad >= 0 ? codes[first_bad] : 0;
  if (!rc)
    for (int i = 1; i < started; i++)
      if (codes[i]) rc = codes[i];
  free(args), free(pids), free(codes);
  return rc;
}
