/* outpath.c — where lamina may write a file the user named (a checkpoint, a trace): only a regular file,
 * replaced atomically by a temporary file renamed over it. A symlink is followed: the file it points to is
 * replaced and the link stays (a link replaced by a plain file would leave its target stale). Refused, with
 * the reason: an empty path, a folder that is missing or not writable, a directory, a device node, FIFO or
 * socket, a dangling link, and an existing read-only file (the rename would replace it only because the
 * folder is writable; a file with no write permission bit is refused even to root). Checked before training, so that nothing is lost
 * to a bad path after an epoch. lam_output_write writes such a file: temporary, fsync, rename. What the run
 * reads and writes, and the kinds of file, are files.c's: every output is claimed there first. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

lam_status lam_output_path_resolve(const char *path, const char *what, char *out, size_t size) {
  LAM_CHECK_ARG(path && what && out && size, "lam_output_path_resolve: NULL argument");
  if (!*path) return LAM_FAIL(LAM_ERR_INVALID_ARG, "the %s path is empty: give a file name", what);
  size_t len = strlen(path);
  if (len + 32 >= size || len + 32 >= PATH_MAX)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "the %s path is too long (%zu characters)", what, len);
  if (path[len - 1] == '/')
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "the %s path '%s' names a folder: give a file name in it", what, path);
  snprintf(out, size, "%s", path);
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
    char real[PATH_MAX];
    if (!realpath(path, real))
      return LAM_FAIL(LAM_ERR_IO, "the %s path '%s' is a symbolic link that cannot be followed (%s): point it at a "
                      "file in an existing folder, or remove it", what, path, strerror(errno));
    if (strlen(real) + 32 >= size) return LAM_FAIL(LAM_ERR_INVALID_ARG, "the %s path '%s' resolves to too long a path", what, path);
    snprintf(out, size, "%s", real);
  }
  if (stat(out, &st) == 0) {
    if (!S_ISREG(st.st_mode))
      return LAM_FAIL(LAM_ERR_INVALID_ARG, "the %s path '%s' is %s: lamina writes only regular files; give another "
                      "file name", what, path, lam_file_mode_name(st.st_mode));
    /* read-only: no write permission for this user, or none for anybody (which root's access() ignores) */
    if (access(out, W_OK) != 0 || !(st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)))
      return LAM_FAIL(LAM_ERR_IO, "the %s file '%s' exists and is read-only: lamina does not replace a file it could "
                      "not write; change its permissions or give another name", what, path);
  } else if (errno != ENOENT) {
    return LAM_FAIL(LAM_ERR_IO, "the %s path '%s' cannot be used: %s", what, path, strerror(errno));
  }
  /* the folder: it must exist and take a new file (the temporary) */
  char dir[PATH_MAX];
  const char *slash = strrchr(out, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == out) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - out), out);
  if (stat(dir, &st) != 0)
    return LAM_FAIL(LAM_ERR_IO, "the %s path '%s' is in folder '%s', which cannot be used (%s): create it first",
                    what, path, dir, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return LAM_FAIL(LAM_ERR_IO, "the %s path '%s' is in '%s', which is not a folder", what, path, dir);
  if (access(dir, W_OK | X_OK) != 0)
    return LAM_FAIL(LAM_ERR_IO, "the %s path '%s' is in folder '%s', where this user cannot create files (%s)", what,
                    path, dir, strerror(errno));
  return LAM_OK;
}

lam_status lam_output_check(const char *path, const char *what, lam_file_kind kind) {
  char resolved[PATH_MAX];
  what = what ? what : "output";
  LAM_TRY(lam_output_path_resolve(path, what, resolved, sizeof resolved));
  return lam_output_claim(resolved, what, kind, 0); /* files.c */
}

lam_status lam_output_recheck(const char *path, const char *what, lam_file_kind kind) {
  char resolved[PATH_MAX];
  LAM_TRY(lam_output_path_resolve(path, what, resolved, sizeof resolved));
  return lam_output_claim(resolved, what, kind, 1);
}

lam_status lam_output_path_check(const char *path, const char *what) {
  return lam_output_check(path, what, LAM_FILE_NONE);
}

/* The folder's fsync makes the rename itself durable. Filesystems that cannot sync a folder say EINVAL
 * (EBADF, EROFS): the data is on disk already, so that is not a failure. */
static lam_status sync_folder_of(const char *path, const char *what) {
  char dir[PATH_MAX];
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return LAM_OK;
  int rc = fsync(fd), err = errno;
  close(fd);
  if (rc != 0 && err != EINVAL && err != EBADF && err != EROFS)
    return LAM_FAIL(LAM_ERR_IO, "the %s '%s' was written and renamed into place, but fsync of its folder '%s' failed: "
                    "%s; it may not survive a power loss", what, path, dir, strerror(err));
  return LAM_OK;
}

/* The temporary file being written, for lam_checkpoint_abort_cleanup (a signal handler's). */
static char g_tmp[PATH_MAX + 32];
static volatile sig_atomic_t g_tmp_live;
void lam_checkpoint_abort_cleanup(void) {
  if (g_tmp_live) unlink(g_tmp);
}

static void remove_stale_temporaries(const char *path); /* at the end */

lam_status lam_output_write(const char *asked, const char *what, lam_file_kind kind, const void *data, size_t n) {
  LAM_CHECK_ARG(asked && what && (data || !n), "lam_output_write: NULL argument");
  char path[PATH_MAX];
  LAM_TRY(lam_output_path_resolve(asked, what, path, sizeof path));
  LAM_TRY(lam_output_claim(path, what, kind, 1)); /* files.c: not an input, another output, or another kind */
  remove_stale_temporaries(path);
  g_tmp_live = 0;
  const char *tmp = g_tmp;
  snprintf(g_tmp, sizeof g_tmp, "%s.tmp.%ld", path, (long)getpid());
  g_tmp_live = 1;
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    int err = errno;
    g_tmp_live = 0;
    return LAM_FAIL(LAM_ERR_IO, "cannot write the %s '%s': fopen of the temporary file '%s' failed: %s; check that the "
                    "folder exists and is writable", what, path, tmp, strerror(err));
  }
  const char *call = NULL;
  int err = 0;
  if (n && fwrite(data, 1, n, f) != n) call = "fwrite", err = errno;
  else if (fflush(f) != 0) call = "fflush", err = errno;
  else if (fsync(fileno(f)) != 0) call = "fsync", err = errno;
  int rc = fclose(f);
  if (!call && rc != 0) call = "fclose", err = errno;
  if (!call && rename(tmp, path) != 0) call = "rename", err = errno;
  g_tmp_live = 0; /* renamed, or removed just below */
  if (call) {
    remove(tmp);
    return LAM_FAIL(LAM_ERR_IO, "cannot write the %s '%s': %s of the temporary file '%s' failed: %s (%zu bytes to "
                    "write); any file already at '%s' is unchanged", what, path, call, tmp,
                    err ? strerror(err) : "unknown error", n, path);
  }
  return sync_folder_of(path, what);
}

/* The public writer knows only the bytes: their kind is the one an existing file must have. */
lam_status lam_output_write_atomic(const char *path, const char *what, const void *data, size_t n) {
  LAM_CHECK_ARG(data || !n, "lam_output_write_atomic: data is NULL");
  return lam_output_write(path, what, lam_file_kind_of(data, n), data, n);
}

/* ---- temporaries left by a killed writer ----
 * A process killed while it writes (SIGKILL, a crash: no handler runs) leaves NAME.tmp.PID beside NAME, and
 * nothing removed it: each write of NAME now removes those whose process is gone. Only lamina's own, and
 * only dead ones: the exact name NAME.tmp. followed by digits only, a regular file (a link is not
 * followed), and a PID no process has (kill(pid, 0) fails with ESRCH: a live one, another lamina writing
 * NAME now perhaps, or one we may not signal, is left alone). Best effort: what cannot be read or removed
 * stays, and the write goes on. */
static void remove_stale_temporaries(const char *path) {
  char dir[PATH_MAX];
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  const size_t blen = strlen(base);
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    const char *name = e->d_name, *digits = name + blen + 5;
    if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".tmp.", 5) != 0) continue;
    size_t nd = strspn(digits, "0123456789");
    if (nd == 0 || nd > 9 || digits[nd] != '\0') continue; /* digits only, and a PID fits in 9 */
    long pid = strtol(digits, NULL, 10);
    if (pid <= 0 || pid == (long)getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    struct stat st;
    if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) unlinkat(dirfd(d), name, 0);
  }
  closedir(d);
}
