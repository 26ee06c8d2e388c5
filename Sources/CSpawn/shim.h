#ifndef ANCSD_CSPAWN_SHIM_H
#define ANCSD_CSPAWN_SHIM_H
/*
 * Starting a command for `ancsd run --exec` with posix_spawn, and watching it with a pidfd.
 * Headers only: glibc's own calls, nothing linked. In C because posix_spawn's attribute and
 * file-action calls, the signal sets and syscall(2) are awkward or unavailable from Swift.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * Runs `/bin/sh -c command` with `envp` in a process group of its own, its standard input
 * `stdin_fd`, standard output `stdout_fd` and standard error `stderr_fd`; every other
 * descriptor closed, every signal at its default action and none blocked (the daemon ignores
 * SIGPIPE and blocks SIGHUP, SIGINT and SIGTERM; a command must not inherit that). Returns 0 and the
 * child's pid, or an errno value.
 */
static inline int ancsd_spawn_shell(const char *command, char *const envp[], int stdin_fd, int stdout_fd, int stderr_fd, pid_t *pid) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int error = posix_spawn_file_actions_init(&actions);
    if (error != 0) return error;
    error = posix_spawnattr_init(&attributes);
    if (error != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return error;
    }
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    if (error == 0) error = posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0);
    if (error == 0) error = posix_spawn_file_actions_adddup2(&actions, stdout_fd, 1);
    if (error == 0) error = posix_spawn_file_actions_adddup2(&actions, stderr_fd, 2);
    /* Everything the daemon opens is close-on-exec; this is the second line of defence. */
    if (error == 0) error = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    if (error == 0) error = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (error == 0) error = posix_spawnattr_setpgroup(&attributes, 0);
    if (error == 0) error = posix_spawnattr_setsigmask(&attributes, &none);
    if (error == 0) error = posix_spawnattr_setsigdefault(&attributes, &all);
    if (error == 0) {
        char *const argv[] = {"sh", "-c", (char *)command, NULL};
        error = posix_spawn(pid, "/bin/sh", &actions, &attributes, argv, envp);
    }
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return error;
}

/* pidfd_open(2) (Linux 5.3): a descriptor that becomes readable when the process exits; -1 and errno if unavailable. */
static inline int ancsd_pidfd_open(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* pipe2(fds, O_CLOEXEC): a pipe whose ends are close-on-exec from the start (pipe2 needs _GNU_SOURCE). */
static inline int ancsd_pipe_cloexec(int fds[2]) {
    return (int)syscall(SYS_pipe2, fds, O_CLOEXEC);
}

/* The macros of <sys/wait.h>, which do not import into Swift. */
static inline int ancsd_exited(int status) { return WIFEXITED(status); }
static inline int ancsd_exit_status(int status) { return WEXITSTATUS(status); }
static inline int ancsd_signaled(int status) { return WIFSIGNALED(status); }
static inline int ancsd_term_signal(int status) { return WTERMSIG(status); }

#endif
