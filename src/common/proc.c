#include "common/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"

#define PROC_POLL_NS (20 * CLOCK_NS_PER_MS)

int proc_start(proc *p, const proc_spec *spec, char *err)
{
    memset(p, 0, sizeof *p);
    if (!spec->shell && (!spec->argv || !spec->argv[0]))
        return err_set(err, "proc_start: nothing to run");
    if (spec->log_path)
        snprintf(p->log_path, sizeof p->log_path, "%s", spec->log_path);
    int log_fd = open(spec->log_path ? spec->log_path : "/dev/null",
                      (spec->log_path ? O_WRONLY | O_CREAT | O_TRUNC : O_WRONLY) | O_CLOEXEC, 0644);
    if (log_fd < 0)
        return err_set(err, "cannot create %s: %s", spec->log_path, strerror(errno));
    /* Buffered output written before the fork would be written twice. */
    fflush(NULL);
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(log_fd);
        return err_set(err, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        setpgid(0, 0);
        if (spec->die_with_parent) {
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent) /* the parent died before prctl took effect */
                _exit(127);
        }
        int in = open("/dev/null", O_RDONLY);
        if (in >= 0)
            dup2(in, STDIN_FILENO);
        dup2(log_fd, STDOUT_FILENO);
        dup2(log_fd, STDERR_FILENO);
        if (spec->shell)
            execl("/bin/sh", "sh", "-c", spec->shell, (char *)NULL);
        else if (spec->exe)
            execv(spec->exe, spec->argv);
        else
            execvp(spec->argv[0], spec->argv);
        dprintf(STDERR_FILENO, "exec %s: %s\n",
                spec->shell ? "/bin/sh" : spec->exe ? spec->exe : spec->argv[0], strerror(errno));
        _exit(127);
    }
    /* Both sides set the group, so a kill(-pid) right after fork cannot miss it. */
    setpgid(pid, pid);
    close(log_fd);
    p->pid = pid;
    return 0;
}

bool proc_exited(proc *p)
{
    if (p->pid <= 0 || p->exited)
        return p->pid <= 0 || p->exited;
    pid_t r;
    do
        r = waitpid(p->pid, &p->status, WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == p->pid || (r < 0 && errno == ECHILD))
        p->exited = true;
    return p->exited;
}

bool proc_wait_exit(proc *p, int64_t timeout_ns)
{
    int64_t deadline = clock_now_ns() + timeout_ns;
    for (;;) {
        if (proc_exited(p))
            return true;
        int64_t now = clock_now_ns();
        if (now >= deadline)
            return false;
        int64_t nap = deadline - now < PROC_POLL_NS ? deadline - now : PROC_POLL_NS;
        clock_sleep_until_ns(now + nap);
    }
}

bool proc_stop(proc *p, int64_t grace_ns)
{
    if (p->pid <= 0 || proc_exited(p))
        return true;
    kill(-p->pid, SIGTERM);
    kill(p->pid, SIGTERM); /* in case it left its group */
    if (proc_wait_exit(p, grace_ns))
        return true;
    kill(-p->pid, SIGKILL);
    kill(p->pid, SIGKILL);
    while (waitpid(p->pid, &p->status, 0) < 0 && errno == EINTR) {
    }
    p->exited = true;
    return false;
}

void proc_describe(const proc *p, char *buf, size_t size)
{
    if (p->pid <= 0)
        snprintf(buf, size, "was never started");
    else if (!p->exited)
        snprintf(buf, size, "is still running");
    else if (WIFSIGNALED(p->status))
        snprintf(buf, size, "was killed by signal %d (%s)", WTERMSIG(p->status),
                 strsignal(WTERMSIG(p->status)));
    else
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(p->status));
}

void proc_log_last_line(const char *path, char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = path && path[0] ? fopen(path, "r") : NULL;
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n > 0)
            snprintf(out, size, "%s", line);
    }
    fclose(f);
}

int proc_wait_ready(proc *p, proc_ready_fn ready, void *ctx, int64_t timeout_ns, int64_t poll_ns,
                    const volatile sig_atomic_t *stop, char *err)
{
    int64_t deadline = clock_now_ns() + timeout_ns;
    char why[256] = "";
    for (;;) {
        if (ready(ctx, why, sizeof why))
            return 0;
        if (proc_exited(p)) {
            char how[128], tail[256];
            proc_describe(p, how, sizeof how);
            proc_log_last_line(p->log_path, tail, sizeof tail);
            return err_set(err, "the process %s before it was ready%s%s%s%s", how,
                           tail[0] ? ": " : "", tail, p->log_path[0] ? "; log: " : "",
                           p->log_path);
        }
        if (stop && *stop)
            return err_set(err, "interrupted");
        int64_t now = clock_now_ns();
        if (now >= deadline)
            return err_set(err, "not ready within %.1f s%s%s", (double)timeout_ns / 1e9,
                           why[0] ? ": " : "", why);
        int64_t nap = deadline - now < poll_ns ? deadline - now : poll_ns;
        clock_sleep_until_ns(now + nap);
    }
}

int proc_cpus(void)
{
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_COUNT(&mask) > 0)
        return CPU_COUNT(&mask);
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 1 ? (int)online : 1;
}
