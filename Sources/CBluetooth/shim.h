#ifndef ANCSD_CBLUETOOTH_SHIM_H
#define ANCSD_CBLUETOOTH_SHIM_H
/*
 * The kernel's Bluetooth socket interface, from libbluetooth-dev's headers only: the module
 * links nothing (no `link` in the module map), so ancsd does not depend on libbluetooth.
 * Everything below is a constant, a structure or a static inline function over glibc's
 * system calls.
 *
 * From <bluetooth/bluetooth.h> and <bluetooth/hci.h>: AF_BLUETOOTH, BTPROTO_HCI, HCI_DEV_NONE,
 * HCI_CHANNEL_MONITOR and struct sockaddr_hci. The monitor header (BlueZ's struct hci_mon_hdr:
 * opcode, index, length, each u16 little-endian) is not in the installed headers; Btsnoop's
 * MonitorFrame parses it.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>
#include <bluetooth/bluetooth.h>
#include <bluetooth/hci.h>

/* Typed copies of the macros, so Swift needs no conversions. */
static const int CBT_AF_BLUETOOTH = AF_BLUETOOTH;
static const int CBT_BTPROTO_HCI = BTPROTO_HCI;
static const unsigned short CBT_HCI_DEV_NONE = HCI_DEV_NONE;
static const unsigned short CBT_HCI_CHANNEL_MONITOR = HCI_CHANNEL_MONITOR;
/* The management interface (BlueZ doc/mgmt-api.txt), which `ancsd report` reads the
 * controllers from, and the raw channel it asks a controller's versions and features on. */
static const unsigned short CBT_HCI_CHANNEL_CONTROL = HCI_CHANNEL_CONTROL;
static const unsigned short CBT_HCI_CHANNEL_RAW = HCI_CHANNEL_RAW;
static const int CBT_SOL_HCI = SOL_HCI;
static const int CBT_HCI_FILTER = HCI_FILTER;

/* Lets a raw HCI socket receive Command Complete and Command Status events (struct hci_filter
 * and its bit helpers are inline functions and macros over a struct Swift imports poorly). */
static inline int cbt_filter_command_events(int fd) {
    struct hci_filter filter;
    memset(&filter, 0, sizeof filter);
    filter.type_mask = 1u << HCI_EVENT_PKT;
    filter.event_mask[0] = (1u << EVT_CMD_COMPLETE) | (1u << EVT_CMD_STATUS);
    return setsockopt(fd, SOL_HCI, HCI_FILTER, &filter, sizeof filter);
}

/*
 * Receives one datagram into `buffer` without blocking. Returns the datagram's full length
 * (MSG_TRUNC: more than `capacity` when it did not fit) or -1 with errno set. `*microseconds`
 * is set to the kernel's receive time (SO_TIMESTAMP, microseconds since the Unix epoch), or -1
 * when the datagram came without one. In C because CMSG_FIRSTHDR and CMSG_NXTHDR are macros
 * Swift cannot import.
 */
static inline ssize_t cbt_recv_timestamped(int fd, void *buffer, size_t capacity, long long *microseconds) {
    struct iovec iov;
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(sizeof(struct timeval))];
    } control;
    struct msghdr message;
    struct cmsghdr *header;
    ssize_t length;

    iov.iov_base = buffer;
    iov.iov_len = capacity;
    memset(&message, 0, sizeof message);
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control.bytes;
    message.msg_controllen = sizeof control.bytes;
    *microseconds = -1;
    length = recvmsg(fd, &message, MSG_DONTWAIT | MSG_TRUNC);
    if (length < 0) return -1;
    for (header = CMSG_FIRSTHDR(&message); header != NULL; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_TIMESTAMP
            && header->cmsg_len >= CMSG_LEN(sizeof(struct timeval))) {
            struct timeval time;
            memcpy(&time, CMSG_DATA(header), sizeof time);
            *microseconds = (long long)time.tv_sec * 1000000LL + (long long)time.tv_usec;
        }
    }
    return length;
}

/*
 * SIGINT and SIGTERM stop `ancsd capture`: their handler writes the signal's number to a
 * non-blocking pipe that the capture loop polls (a self-pipe). The handler must be
 * async-signal-safe (write(2) only, errno kept), which Swift code cannot promise, so it is C.
 * The state is static in this header: call these functions from one Swift file only.
 */
/* The handler's pipe, and the actions SIGINT and SIGTERM had before. Static locals: they are
 * emitted with the functions that use them (file-scope statics that Swift itself does not use
 * were left undefined at link time). */
static inline int *cbt_stop_pipe(void) {
    static int fd = -1;
    return &fd;
}

static inline struct sigaction *cbt_previous_actions(void) {
    static struct sigaction actions[2];
    return actions;
}

static inline void cbt_stop_handler(int signal_number) {
    int saved = errno;
    unsigned char byte = (unsigned char)signal_number;
    ssize_t written = write(*cbt_stop_pipe(), &byte, 1);
    (void)written;
    errno = saved;
}

/* Sends SIGINT and SIGTERM to the pipe whose (non-blocking) write end is `fd`, keeping their
 * previous actions. Returns 0, or -1 with errno set (nothing changed). */
static inline int cbt_catch_stop_signals(int fd) {
    struct sigaction action;
    struct sigaction *previous = cbt_previous_actions();
    memset(&action, 0, sizeof action);
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    action.sa_handler = cbt_stop_handler;
    *cbt_stop_pipe() = fd;
    if (sigaction(SIGINT, &action, &previous[0]) != 0) return -1;
    if (sigaction(SIGTERM, &action, &previous[1]) != 0) {
        int saved = errno;
        sigaction(SIGINT, &previous[0], NULL);
        errno = saved;
        return -1;
    }
    return 0;
}

/* Gives SIGINT and SIGTERM back the actions they had before cbt_catch_stop_signals. */
static inline void cbt_release_stop_signals(void) {
    struct sigaction *previous = cbt_previous_actions();
    sigaction(SIGINT, &previous[0], NULL);
    sigaction(SIGTERM, &previous[1], NULL);
}

#endif
