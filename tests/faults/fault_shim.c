/* fault_shim — an LD_PRELOAD library that makes file writes fail as a full
 * disk or a read-only file system would, for the paths that contain a
 * given string (the fault tests cannot mount file systems: CI has no
 * privileges, and root ignores permissions).
 *
 *   SG_FAULT_PATH=step_000004   paths containing this string are affected
 *   SG_FAULT=ENOSPC             such files open, but writes to them
 *                               (write, pwrite, writev, pwritev, fallocate)
 *                               fail with ENOSPC: the disk is full ...
 *   SG_FAULT_BYTES=N            ... once this process wrote N bytes to them
 *                               (default 0; the write that crosses N is
 *                               short, as on a real file system)
 *   SG_FAULT=STOP               the first write to such a file stops the
 *                               process (SIGSTOP): a rank lost inside a
 *                               write, alive but silent
 *   SG_FAULT_RANK=R             only the rank whose PMI_RANK is R
 *   SG_FAULT=EROFS              opening such a path for writing (O_WRONLY,
 *                               O_RDWR, O_CREAT, O_TRUNC; creat; fopen "w",
 *                               "a", "+") fails with EROFS, as do mkdir,
 *                               rename, unlink and truncate: read-only
 *
 * Without SG_FAULT_PATH everything passes through. The tests give it to the
 * ranks only (mpiexec -genv LD_PRELOAD=...). ROMIO, which PnetCDF writes
 * through, opens with open/open64 and writes with pwrite64 (seen with
 * strace -f); the wrappers cover the other spellings too. Writes through
 * stdio are not intercepted (glibc calls its internal write). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { MODE_OFF, MODE_ENOSPC, MODE_EROFS, MODE_STOP };
enum { MAX_FD = 65536 };

static int mode = -1; /* -1: not read yet */
static const char *pattern;
static atomic_llong budget;        /* bytes the doomed files may still take */
static atomic_char doomed[MAX_FD]; /* descriptors whose writes fail */

static void init(void) {
  if (mode >= 0) return;
  const char *f = getenv("SG_FAULT");
  pattern = getenv("SG_FAULT_PATH");
  const char *b = getenv("SG_FAULT_BYTES");
  atomic_store(&budget, b ? atoll(b) : 0);
  if (!pattern || !*pattern || !f)
    mode = MODE_OFF;
  else if (strcmp(f, "ENOSPC") == 0)
    mode = MODE_ENOSPC;
  else if (strcmp(f, "EROFS") == 0)
    mode = MODE_EROFS;
  else if (strcmp(f, "STOP") == 0)
    mode = MODE_STOP;
  else
    mode = MODE_OFF;
  const char *only = getenv("SG_FAULT_RANK"), *me = getenv("PMI_RANK");
  if (only && *only && (!me || strcmp(only, me) != 0)) mode = MODE_OFF;
}

static int hit(const char *path) {
  init();
  return mode != MODE_OFF && path && strstr(path, pattern) != NULL;
}

static int writes_to(int flags) {
  return (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0;
}

#define REAL(name) ((name##_fn)dlsym(RTLD_NEXT, #name))

/* Open with the real `name`; apply the fault of the path. */
#define OPEN_BODY(name, ...)                                       \
  mode_t m = 0;                                                    \
  if (flags & (O_CREAT | O_TMPFILE)) {                             \
    va_list ap;                                                    \
    va_start(ap, flags);                                           \
    m = (mode_t)va_arg(ap, int);                                   \
    va_end(ap);                                                    \
  }                                                                \
  const int h = hit(path);                                         \
  if (h && mode == MODE_EROFS && writes_to(flags)) {               \
    errno = EROFS;                                                 \
    return -1;                                                     \
  }                                                                \
  int fd = REAL(name)(__VA_ARGS__, m);                             \
  if (fd >= 0 && fd < MAX_FD)                                      \
    atomic_store(&doomed[fd],                                      \
                 h && (mode == MODE_ENOSPC || mode == MODE_STOP)); \
  return fd;

typedef int (*open_fn)(const char *, int, ...);
typedef int (*open64_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*openat64_fn)(int, const char *, int, ...);
int open(const char *path, int flags, ...) { OPEN_BODY(open, path, flags) }
int open64(const char *path, int flags, ...) { OPEN_BODY(open64, path, flags) }
int openat(int dir, const char *path, int flags, ...) {
  OPEN_BODY(openat, dir, path, flags)
}
int openat64(int dir, const char *path, int flags, ...) {
  OPEN_BODY(openat64, dir, path, flags)
}
int creat(const char *path, mode_t m) {
  return open(path, O_CREAT | O_WRONLY | O_TRUNC, m);
}
int creat64(const char *path, mode_t m) {
  return open(path, O_CREAT | O_WRONLY | O_TRUNC, m);
}

typedef FILE *(*fopen_fn)(const char *, const char *);
typedef FILE *(*fopen64_fn)(const char *, const char *);
static int fopen_writes(const char *how) {
  return how && strpbrk(how, "wa+") != NULL;
}
FILE *fopen(const char *path, const char *how) {
  if (hit(path) && mode == MODE_EROFS && fopen_writes(how)) {
    errno = EROFS;
    return NULL;
  }
  return REAL(fopen)(path, how);
}
FILE *fopen64(const char *path, const char *how) {
  if (hit(path) && mode == MODE_EROFS && fopen_writes(how)) {
    errno = EROFS;
    return NULL;
  }
  return REAL(fopen64)(path, how);
}

typedef int (*close_fn)(int);
int close(int fd) {
  if (fd >= 0 && fd < MAX_FD) atomic_store(&doomed[fd], 0);
  return REAL(close)(fd);
}

static int is_doomed(int fd) {
  init();
  const int d = fd >= 0 && fd < MAX_FD && atomic_load(&doomed[fd]);
  if (d && mode == MODE_STOP) raise(SIGSTOP); /* lost inside the write */
  return d && mode == MODE_ENOSPC;
}

/* A write of n bytes to fd: 1 (errno ENOSPC) if it must fail, else 0 with
 * *n cut to what the disk still takes. */
static int full_n(int fd, size_t *n) {
  if (!is_doomed(fd)) return 0;
  long long left = atomic_fetch_sub(&budget, (long long)*n);
  if (left <= 0) {
    atomic_store(&budget, 0);
    errno = ENOSPC;
    return 1;
  }
  if ((long long)*n > left) {
    *n = (size_t)left;
    atomic_store(&budget, 0);
  }
  return 0;
}

/* A vector write or an allocation of n bytes: all or nothing. */
static int full_all(int fd, long long n) {
  if (!is_doomed(fd)) return 0;
  if (atomic_fetch_sub(&budget, n) >= n) return 0;
  atomic_store(&budget, 0);
  errno = ENOSPC;
  return 1;
}

static long long iov_bytes(const struct iovec *v, int c) {
  long long n = 0;
  for (int i = 0; i < c; ++i) n += (long long)v[i].iov_len;
  return n;
}

typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*pwrite64_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec *, int, off_t);
typedef ssize_t (*pwritev64_fn)(int, const struct iovec *, int, off_t);
typedef ssize_t (*pwritev2_fn)(int, const struct iovec *, int, off_t, int);
typedef int (*fallocate_fn)(int, int, off_t, off_t);
typedef int (*posix_fallocate_fn)(int, off_t, off_t);
ssize_t write(int fd, const void *b, size_t n) {
  return full_n(fd, &n) ? -1 : REAL(write)(fd, b, n);
}
ssize_t pwrite(int fd, const void *b, size_t n, off_t o) {
  return full_n(fd, &n) ? -1 : REAL(pwrite)(fd, b, n, o);
}
ssize_t pwrite64(int fd, const void *b, size_t n, off_t o) {
  return full_n(fd, &n) ? -1 : REAL(pwrite64)(fd, b, n, o);
}
ssize_t writev(int fd, const struct iovec *v, int c) {
  return full_all(fd, iov_bytes(v, c)) ? -1 : REAL(writev)(fd, v, c);
}
ssize_t pwritev(int fd, const struct iovec *v, int c, off_t o) {
  return full_all(fd, iov_bytes(v, c)) ? -1 : REAL(pwritev)(fd, v, c, o);
}
ssize_t pwritev64(int fd, const struct iovec *v, int c, off_t o) {
  return full_all(fd, iov_bytes(v, c)) ? -1 : REAL(pwritev64)(fd, v, c, o);
}
ssize_t pwritev2(int fd, const struct iovec *v, int c, off_t o, int fl) {
  return full_all(fd, iov_bytes(v, c)) ? -1 : REAL(pwritev2)(fd, v, c, o, fl);
}
int fallocate(int fd, int m, off_t o, off_t n) {
  return full_all(fd, n) ? -1 : REAL(fallocate)(fd, m, o, n);
}
int posix_fallocate(int fd, off_t o, off_t n) {
  return full_all(fd, n) ? ENOSPC : REAL(posix_fallocate)(fd, o, n);
}

/* read-only: the namespace cannot change either */
static int ro(const char *path) {
  if (hit(path) && mode == MODE_EROFS) {
    errno = EROFS;
    return 1;
  }
  return 0;
}
typedef int (*mkdir_fn)(const char *, mode_t);
typedef int (*rename_fn)(const char *, const char *);
typedef int (*unlink_fn)(const char *);
typedef int (*truncate_fn)(const char *, off_t);
int mkdir(const char *p, mode_t m) { return ro(p) ? -1 : REAL(mkdir)(p, m); }
int rename(const char *a, const char *b) {
  return ro(a) || ro(b) ? -1 : REAL(rename)(a, b);
}
int unlink(const char *p) { return ro(p) ? -1 : REAL(unlink)(p); }
int truncate(const char *p, off_t n) {
  return ro(p) ? -1 : REAL(truncate)(p, n);
}
