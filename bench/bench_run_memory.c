/* bench_run_memory — does `stallscope run` keep its memory flat over a long run? Prints
 * figures; never fails on them.
 *
 *   bench_run_memory [--duration 60s] [--users 64] [--log-events-max N]
 *
 * Runs `stallscope run --engine emulate --model llama-3.2-1b --no-baseline --no-report` (the
 * binary beside this one) twice: holding every token event (the old way: --log-events-max
 * above anything the run reaches) and with a small --log-events-max (default 100k: each event
 * leaves memory once written), and samples the client process's resident memory (VmRSS; the
 * embedded server is a process of its own) at 25, 50, 75 and 100 % of the run. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/units.h"

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

static void sleep_until(int64_t t_ns)
{
    int64_t now = clock_now_ns();
    if (t_ns > now) {
        struct timespec ts = {(time_t)((t_ns - now) / CLOCK_NS_PER_S), (long)((t_ns - now) % CLOCK_NS_PER_S)};
        nanosleep(&ts, NULL);
    }
}

/* One run; its RSS at 25/50/75/100 % of duration (after its start-up). */
static int one_run(const char *bin, const char *duration, int64_t duration_ns, const char *users,
                   const char *max_events, const char *out)
{
    char rm[4200];
    snprintf(rm, sizeof rm, "rm -rf '%s'", out);
    if (system(rm) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    char log[4200];
    snprintf(log, sizeof log, "%s.log", out);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen(log, "w", stderr))
            _exit(127);
        execl(bin, bin, "run", "--engine", "emulate", "--model", "llama-3.2-1b", "--users", users,
              "--duration", duration, "--no-baseline", "--no-report", "--log-events-max",
              max_events, "--out", out, (char *)NULL);
        _exit(127);
    }
    /* The client's t = 0 comes after the server starts and the warm-up: watch for tokens.csv
     * to grow, then sample on the run's clock. */
    char tokens[4200];
    snprintf(tokens, sizeof tokens, "%s/interference/tokens.csv", out);
    int64_t deadline = clock_now_ns() + 120 * CLOCK_NS_PER_S;
    while (access(tokens, F_OK) != 0 && clock_now_ns() < deadline && waitpid(pid, NULL, WNOHANG) == 0)
        sleep_until(clock_now_ns() + 50 * CLOCK_NS_PER_MS);
    int64_t t0 = clock_now_ns();
    printf("  --log-events-max %-12s RSS at", max_events);
    for (int q = 1; q <= 4; q++) {
        sleep_until(t0 + duration_ns * q / 4 - (q == 4 ? 300 * CLOCK_NS_PER_MS : 0));
        long kib = rss_kib(pid);
        printf(" %d %%: %6.1f MiB%s", q * 25, kib >= 0 ? (double)kib / 1024 : -1.0, q < 4 ? "," : "");
    }
    int status = 0;
    waitpid(pid, &status, 0);
    FILE *f = fopen(tokens, "r");
    long long rows = -1;
    if (f) {
        rows = 0;
        int ch;
        while ((ch = getc(f)) != EOF)
            rows += ch == '\n';
        fclose(f);
        rows--; /* the header */
    }
    printf("; %lld token events in tokens.csv; exit %d (%s)\n", rows,
           WIFEXITED(status) ? WEXITSTATUS(status) : -1, log);
    return 0;
}

int main(int argc, char **argv)
{
    const char *duration = "60s", *users = "64", *small = "100000";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--duration") == 0)
            duration = argv[i + 1];
        else if (strcmp(argv[i], "--users") == 0)
            users = argv[i + 1];
        else if (strcmp(argv[i], "--log-events-max") == 0)
            small = argv[i + 1];
        else {
            fprintf(stderr, "usage: bench_run_memory [--duration 60s] [--users 64] [--log-events-max N]\n");
            return 2;
        }
    }
    int64_t duration_ns;
    char err[ERR_LEN];
    if (units_parse_duration_ns(duration, &duration_ns, err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    char self[PATH_MAX], bin[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    snprintf(bin, sizeof bin, "%s/stallscope", self);
    double load[1] = {0};
    getloadavg(load, 1);
    printf("stallscope run --engine emulate --model llama-3.2-1b --users %s --duration %s "
           "--no-baseline (load average %.2f)\n",
           users, duration, load[0]);
    one_run(bin, duration, duration_ns, users, "1000000000", "/tmp/bench_run_memory_all");
    one_run(bin, duration, duration_ns, users, small, "/tmp/bench_run_memory_flat");
    return 0;
}
