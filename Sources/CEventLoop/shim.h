#ifndef ANCSD_CEVENTLOOP_SHIM_H
#define ANCSD_CEVENTLOOP_SHIM_H
/*
 * epoll, eventfd and timerfd for the EventLoop module: Swift's Glibc module leaves these headers
 * out. Headers only: the module links nothing beyond glibc. `struct epoll_event` is packed on
 * x86-64 and holds a union, so Swift never touches it: registrations and ready events cross as
 * plain integers.
 */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/prctl.h>
#include <time.h>

enum {
    ANCS_EPOLLIN = EPOLLIN,
    ANCS_EPOLLOUT = EPOLLOUT,
    ANCS_EPOLLERR = EPOLLERR,
    ANCS_EPOLLHUP = EPOLLHUP,
    ANCS_EPOLL_CTL_ADD = EPOLL_CTL_ADD,
    ANCS_EPOLL_CTL_DEL = EPOLL_CTL_DEL,
    ANCS_EPOLL_CTL_MOD = EPOLL_CTL_MOD,
};

/* One ready descriptor: the token it was registered with and its epoll event bits. */
struct ancs_ready {
    unsigned long long token;
    unsigned int events;
};

static inline int ancs_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

/* Adds, modifies or deletes `fd`'s registration (level-triggered) with `events` and `token`. */
static inline int ancs_epoll_ctl(int epfd, int op, int fd, unsigned int events, unsigned long long token) {
    struct epoll_event event;
    event.events = events;
    event.data.u64 = token;
    return epoll_ctl(epfd, op, fd, &event);
}

/* Waits up to `timeout_ms` (-1: forever) for at most 64 ready descriptors. */
static inline int ancs_epoll_wait(int epfd, struct ancs_ready *ready, int max, int timeout_ms) {
    struct epoll_event events[64];
    if (max > 64) max = 64;
    int count = epoll_wait(epfd, events, max, timeout_ms);
    for (int i = 0; i < count; i++) {
        ready[i].token = events[i].data.u64;
        ready[i].events = events[i].events;
    }
    return count;
}

/* A non-blocking, close-on-exec eventfd, or -1. */
static inline int ancs_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

/* A non-blocking, close-on-exec CLOCK_MONOTONIC timerfd, or -1. */
static inline int ancs_timerfd(void) { return timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC); }

/* Arms `fd` to expire once at the absolute CLOCK_MONOTONIC time `deadline_ns`, or disarms it
 * when `deadline_ns` is 0. Returns 0 or -1. */
static inline int ancs_timerfd_arm(int fd, unsigned long long deadline_ns) {
    struct itimerspec spec;
    spec.it_interval.tv_sec = 0;
    spec.it_interval.tv_nsec = 0;
    spec.it_value.tv_sec = (time_t)(deadline_ns / 1000000000ull);
    spec.it_value.tv_nsec = (long)(deadline_ns % 1000000000ull);
    return timerfd_settime(fd, TFD_TIMER_ABSTIME, &spec, 0);
}

/* CLOCK_MONOTONIC now, in nanoseconds. */
static inline unsigned long long ancs_monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (unsigned long long)now.tv_sec * 1000000000ull + (unsigned long long)now.tv_nsec;
}

/* Names the calling thread (the first 15 bytes), as `ps -L` and `top -H` show it. */
static inline void ancs_name_this_thread(const char *name) { prctl(PR_SET_NAME, name, 0, 0, 0); }
#endif
