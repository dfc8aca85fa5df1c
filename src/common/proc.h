/* proc — child processes the experiment depends on: the embedded server (`stallscope
 * serve`) and a user's server command (`--server-cmd`). One place starts a child in its own
 * process group with its output in a log file, waits for it to become ready (the caller's
 * readiness check, e.g. HTTP /health, polled until a deadline), stops it (SIGTERM to the
 * group, a grace period, then SIGKILL) and says in words how it ended.
 *
 * Every wait is bounded; nothing here calls exit(), installs a signal handler or prints. */
#ifndef STALLSCOPE_PROC_H
#define STALLSCOPE_PROC_H
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct proc_spec {
    char *const *argv;     /* program and arguments, NULL-terminated ... */
    const char *exe;       /* ... run from this path (NULL: argv[0] through PATH); "/proc/self/exe"
                            * runs this very binary */
    const char *shell;     /* or a command for /bin/sh -c (argv and exe unused) */
    const char *log_path;  /* stdout and stderr go here (created, truncated); NULL: /dev/null */
    bool die_with_parent;  /* SIGTERM the child when this process dies (PR_SET_PDEATHSIG) */
} proc_spec;

typedef struct proc {
    pid_t pid;        /* 0: never started */
    bool exited;      /* reaped; status holds the wait status */
    int status;
    char log_path[1024];
} proc;

/* Start it (own process group, stdin from /dev/null). 0, or -1 with err. */
int proc_start(proc *p, const proc_spec *spec, char *err);

/* True once the child has exited (it is reaped then); never blocks. */
bool proc_exited(proc *p);

/* The readiness check: true when ready; may fill why (the last reason it is not). */
typedef bool (*proc_ready_fn)(void *ctx, char *why, size_t size);

/* Poll ready() every poll_ns until it says yes (0), the child exits (-1, err: how it
 * ended and the last line of its log), timeout_ns passes or *stop becomes non-zero (-1,
 * err says which). stop may be NULL. The child is left running on failure: proc_stop it. */
int proc_wait_ready(proc *p, proc_ready_fn ready, void *ctx, int64_t timeout_ns, int64_t poll_ns,
                    const volatile sig_atomic_t *stop, char *err);

/* Wait at most timeout_ns for the child to exit by itself: true when it did. */
bool proc_wait_exit(proc *p, int64_t timeout_ns);

/* SIGTERM to its group, wait grace_ns, then SIGKILL the group and reap. Returns true when
 * it ended within the grace period. Harmless on a child that already exited. */
bool proc_stop(proc *p, int64_t grace_ns);

/* "exited with status 3", "killed by signal 9 (Killed)", "still running". */
void proc_describe(const proc *p, char *buf, size_t size);

/* The CPUs this process may run on (its affinity mask, which taskset and cgroup cpusets set,
 * and which its children inherit); the online CPUs when the mask cannot be read. At least 1. */
int proc_cpus(void);

/* The last non-empty line of a text file ("" when none): a child's own words on why it
 * stopped. */
void proc_log_last_line(const char *path, char *out, size_t size);

#endif
