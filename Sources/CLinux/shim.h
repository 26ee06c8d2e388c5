#ifndef ANCSD_CLINUX_SHIM_H
#define ANCSD_CLINUX_SHIM_H
/*
 * Linux and glibc calls that Swift's Glibc module leaves out (pwritev2 and accept4 are declared
 * only under _GNU_SOURCE, signalfd in <sys/signalfd.h>). Headers only: the module links nothing beyond glibc.
 */
#include <stddef.h>

/* Declared with the 64-bit platforms' types (ssize_t and off_t are long there), so that this
 * module exports no glibc type of its own (mode_t and the like stay Glibc's). */
struct iovec;
long pwritev2(int fd, const struct iovec *iov, int iovcnt, long offset, int flags);

/* RWF_NOWAIT, <linux/fs.h>: fail with EAGAIN rather than wait. */
#define ANCSD_RWF_NOWAIT 0x00000008

/*
 * Writes `count` bytes at the descriptor's current position without ever waiting: a full pipe
 * or socket gives EAGAIN (or a short count), a descriptor that cannot do it EOPNOTSUPP.
 */
static inline long ancsd_write_nowait(int fd, const void *bytes, size_t count) {
    struct { const void *base; size_t length; } iov = { bytes, count };  /* struct iovec's layout */
    return pwritev2(fd, (const struct iovec *)(const void *)&iov, 1, -1, ANCSD_RWF_NOWAIT);
}

/* mallopt(3), from <malloc.h>, which Swift's Glibc module leaves out. */
int mallopt(int param, int value);

/* Fixes glibc's mmap threshold (M_MMAP_THRESHOLD, -3) and trim threshold (M_TRIM_THRESHOLD, -1)
 * at `bytes` each; 1 when both are set. Setting them turns off glibc's dynamic threshold, which
 * otherwise raises both after every free of a block mmap gave (up to 32 MiB and twice that). */
static inline int ancsd_fix_malloc_thresholds(int bytes) { return mallopt(-3, bytes) && mallopt(-1, bytes); }

/* accept4, declared only under _GNU_SOURCE: a new connection that is close-on-exec and
 * non-blocking from the start (SOCK_CLOEXEC 02000000, SOCK_NONBLOCK 04000 on Linux). */
struct sockaddr;
int accept4(int fd, struct sockaddr *address, unsigned int *length, int flags);
static inline int ancsd_accept_cloexec_nonblock(int fd) { return accept4(fd, 0, 0, 02000000 | 04000); }

/* signalfd(2), from <sys/signalfd.h>, which Swift's Glibc module leaves out; `mask` is a
 * sigset_t (Glibc's). A descriptor, close-on-exec and non-blocking (SFD_CLOEXEC 02000000,
 * SFD_NONBLOCK 04000), that reads the pending signals of `mask` as 128-byte records whose
 * first 4 bytes are the signal's number; -1 and errno on failure. */
int signalfd(int fd, const void *mask, int flags);
static inline int ancsd_signalfd(const void *mask) { return signalfd(-1, mask, 02000000 | 04000); }
#define ANCSD_SIGNALFD_RECORD_SIZE 128

/* memfd_create(2), declared only under _GNU_SOURCE: an anonymous file in memory, close-on-exec
 * (MFD_CLOEXEC 1), that `ancsd report` records its capture into before scrubbing it, so the
 * unscrubbed bytes never reach a disk; -1 and errno on failure. */
int memfd_create(const char *name, unsigned int flags);
static inline int ancsd_memfd(const char *name) { return memfd_create(name, 1); }
#endif
