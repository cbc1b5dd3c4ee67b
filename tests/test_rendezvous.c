/* test_rendezvous.c — the CLI's hand-out of NCCL's id over TCP (src/cli/ranks.c, the torchrun-style
 * launch), with processes in place of ranks, on any machine:
 *   - rank 0 gives its 128 bytes to 3 other ranks, each of which gets exactly them;
 *   - rank 0 that could not make its id tells the others, which fail (not hang);
 *   - a rank that counts another world size is refused, and says so;
 *   - a rank whose rank 0 never comes gives up after LAMINA_RENDEZVOUS_TIMEOUT, saying where it looked;
 *   - a stranger that connects first and says something else is dropped; the ranks still meet.
 * Plain C, TAP-like output; exit 1 on a failed check. */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/cli/cli.h"

static int failed;
static void check(int ok, const char *what) {
  printf("%s - %s\n", ok ? "ok" : "not ok", what);
  if (!ok) failed = 1;
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static cli_ranks rank_of(int rank, int world, int port) {
  cli_ranks r = {.rank = rank, .world = world, .local_rank = rank, .local_world = world, .port = port,
                 .launcher = "environment"};
  snprintf(r.addr, sizeof r.addr, "127.0.0.1");
  return r;
}

/* Starts a rank in a child: exit 0 when it got `want` (want NULL: when it failed, as it should). */
static pid_t child(int rank, int world, int port, const unsigned char *want) {
  pid_t p = fork();
  if (p) return p;
  cli_ranks r = rank_of(rank, world, port);
  unsigned char id[CLI_RANKS_ID_BYTES] = {0};
  int rc = cli_ranks_share_id(&r, 1, id);
  if (!want) _exit(rc != 0 ? 0 : 3);
  _exit(rc == 0 && !memcmp(id, want, sizeof id) ? 0 : 4);
}

static int wait_ok(pid_t p) {
  int st;
  return waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  setenv("LAMINA_RENDEZVOUS_TIMEOUT", "20", 1);
  unsigned char id[CLI_RANKS_ID_BYTES];
  srand((unsigned)time(NULL) ^ (unsigned)getpid());
  for (size_t i = 0; i < sizeof id; i++) id[i] = (unsigned char)(rand() >> 7);

  { /* the id reaches every rank; rank 0 starts last, so the others retry until it listens */
    int port = free_port();
    pid_t k[3];
    for (int r = 1; r < 4; r++) k[r - 1] = child(r, 4, port, id);
    usleep(300 * 1000);
    cli_ranks r0 = rank_of(0, 4, port);
    int rc = cli_ranks_share_id(&r0, 1, id);
    int all = rc == 0;
    for (int i = 0; i < 3; i++) all &= wait_ok(k[i]);
    check(all, "rank 0's id reaches ranks 1-3 byte for byte (they retry until rank 0 listens)");
  }
  { /* rank 0 without an id: the others fail at once */
    int port = free_port();
    pid_t k = child(1, 2, port, NULL);
    cli_ranks r0 = rank_of(0, 2, port);
    int rc = cli_ranks_share_id(&r0, 0, id);
    check(rc != 0 && wait_ok(k), "rank 0 that has no id fails, and so does the rank it tells");
  }
  { /* another world size: refused, on both sides */
    int port = free_port();
    pid_t k = child(1, 3, port, NULL); /* says 3 ranks; rank 0 says 2 */
    cli_ranks r0 = rank_of(0, 2, port);
    int rc = cli_ranks_share_id(&r0, 1, id);
    check(rc != 0 && wait_ok(k), "a rank that counts 3 ranks where rank 0 counts 2: both fail");
  }
  { /* no rank 0: a timeout, not a hang */
    setenv("LAMINA_RENDEZVOUS_TIMEOUT", "1", 1);
    int port = free_port();
    time_t t0 = time(NULL);
    pid_t k = child(1, 2, port, NULL);
    int ok = wait_ok(k);
    check(ok && time(NULL) - t0 <= 5, "a rank whose rank 0 never comes gives up after LAMINA_RENDEZVOUS_TIMEOUT");
    setenv("LAMINA_RENDEZVOUS_TIMEOUT", "20", 1);
  }
  { /* a stranger connects first, says something else and leaves: dropped, the ranks meet after it */
    int port = free_port();
    pid_t s = fork();
    if (s == 0) {
      usleep(100 * 1000);
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        if (write(fd, "GET / HTTP/1.0\r\n\r\n", 18) < 0) _exit(1);
      }
      sleep(1);
      close(fd);
      _exit(0);
    }
    pid_t k = child(1, 2, port, id);
    cli_ranks r0 = rank_of(0, 2, port);
    int rc = cli_ranks_share_id(&r0, 1, id);
    check(rc == 0 && wait_ok(k) && wait_ok(s), "a stranger's connection is dropped; rank 1 still gets the id");
  }
  return failed;
}
