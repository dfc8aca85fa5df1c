/* bench_sim — how fast virtual time runs, and what a long run costs in time and memory.
 * Prints figures; never fails on time.
 *
 *   bench_sim [--no-old] [--lesson-only] [--out DIR]
 *
 * 1. The lesson: baseline + interference, simulated and analysed in memory (best of 5).
 * 2. One simulated hour, 256 users, Poisson 8k-token arrivals (mean gap 10 s), each way in a
 *    child process of its own, so each peak RSS and page-fault count (getrusage of the child)
 *    is its own:
 *      bare      the simulator alone, no token log
 *      old       the whole token log in memory, then analysis_summarize (before issue 11)
 *      stream    the simulator handing its events to the streaming analysis, a step's at once
 *      full      what `stallscope sim --users 256 --duration 1h --inject-poisson
 *                --inject-every 10s --no-baseline --out DIR` does: the run pair (streamed),
 *                its CSVs, summary.json, stalls.csv, then the report (report.html, plots)
 *    --no-old skips the old path (30 s and 5 GB on the 2-core VM); --lesson-only stops after 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "analysis/analysis.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"
#include "experiment/config.h"
#include "experiment/pair.h"
#include "experiment/runner.h"
#include "report/report.h"
#include "sim/sim.h"

static int lesson_config(sim_config *cfg, char *err)
{
    memset(cfg, 0, sizeof *cfg);
    workload_default(&cfg->wl);
    cost_gpu gpu;
    cost_arch arch;
    if (cost_gpu_find("h100-sxm", &gpu, err) != 0 || cost_arch_find("llama-3.1-8b", &arch, err) != 0)
        return -1;
    cost_params_init(&cfg->cost, &gpu, &arch);
    cfg->sched = (sched_config){.policy = SCHED_MIXED, .max_num_batched_tokens = 16384,
                                .max_num_seqs = 256, .max_model_len = arch.max_position,
                                .block_size = 16};
    cfg->sched.kv_blocks = cost_kv_blocks(&cfg->cost, 0.9, 16);
    return 0;
}

/* One simulate + analyse pass in memory; returns wall ns. */
static int64_t run_and_analyse(const sim_config *cfg, const char *label, double ref_p50,
                               analysis_summary *summary, int64_t *events, size_t *log_bytes)
{
    char err[ERR_LEN];
    tokenlog log;
    tokenlog_init(&log);
    int64_t t0 = clock_now_ns();
    if (sim_run(cfg, &log, NULL, err) != 0) {
        fprintf(stderr, "sim: %s\n", err);
        exit(1);
    }
    analysis_options opt = {.label = label, .engine = "bench", .target = "",
                            .duration_s = (double)cfg->wl.duration_ns / 1e9,
                            .users = cfg->wl.users, .reference_p50_ms = ref_p50, .complete = true};
    if (analysis_summarize(&log, &opt, summary, err) != 0) {
        fprintf(stderr, "analysis: %s\n", err);
        exit(1);
    }
    int64_t wall = clock_now_ns() - t0;
    if (events)
        *events = log.n_events;
    if (log_bytes)
        *log_bytes = (size_t)log.cap_events * sizeof(tokenlog_event) +
                     (size_t)log.cap_requests * sizeof(tokenlog_request) +
                     (size_t)log.cap_steps * sizeof(tokenlog_step);
    tokenlog_free(&log);
    return wall;
}

/* ---- the hour, each way in a child ------------------------------------------------------ */

static int hour_config(sim_config *cfg, char *err)
{
    if (lesson_config(cfg, err) != 0)
        return -1;
    cfg->wl.users = 256;
    cfg->wl.duration_ns = 3600 * CLOCK_NS_PER_S;
    cfg->wl.inject_poisson = true;
    cfg->wl.inject_at_ns = 0;
    return 0;
}

static void print_summary(const char *way, const analysis_summary *s)
{
    printf("  %-7s p50 %.4f ms, p99 %.4f ms, p99.9 %.4f ms, max %.3f ms (%s), %lld stalls over "
           "%.2f ms, %d injections\n",
           way, s->itl_ms.p50, s->itl_ms.p99, s->itl_ms.p999, s->itl_ms.max,
           s->itl_histogram ? "percentiles ±0.39 %" : "exact", (long long)s->stalls.count,
           s->stalls.threshold_ms, s->n_injections);
}

static int way_bare(const sim_config *cfg, char *err)
{
    sim_stats stats;
    if (sim_run(cfg, NULL, &stats, err) != 0)
        return -1;
    printf("  bare    %lld steps, %lld token events, %lld requests\n", (long long)stats.steps,
           (long long)stats.token_events, (long long)stats.requests);
    return 0;
}

static int way_old(const sim_config *cfg, char *err)
{
    (void)err;
    analysis_summary s;
    int64_t events = 0;
    size_t bytes = 0;
    run_and_analyse(cfg, "hour", 0, &s, &events, &bytes);
    printf("  old     in-memory log %.1f MiB (%.1f bytes per token event)\n",
           (double)bytes / (1 << 20), (double)bytes / (double)events);
    print_summary("old", &s);
    analysis_summary_free(&s);
    return 0;
}

static int sink_event(void *ctx, const tokenlog_event *ev, char *err)
{
    return analysis_stream_event(ctx, ev, err);
}
static int sink_events(void *ctx, const tokenlog_event *evs, int64_t n, char *err)
{
    return analysis_stream_events(ctx, evs, n, err);
}
static int sink_request(void *ctx, const tokenlog_request *r, char *err)
{
    return analysis_stream_request(ctx, r, err);
}
static int sink_step(void *ctx, const tokenlog_step *st, char *err)
{
    return analysis_stream_step(ctx, st, err);
}

static int way_stream(const sim_config *cfg, char *err)
{
    analysis_options opt = {.label = "hour", .engine = "bench", .target = "",
                            .duration_s = (double)cfg->wl.duration_ns / 1e9,
                            .users = cfg->wl.users, .complete = true};
    analysis_stream *s = analysis_stream_begin(&opt, err);
    if (!s)
        return -1;
    tokenlog_sink sink = {sink_event, sink_request, sink_step, s, sink_events, NULL};
    if (sim_run_sink(cfg, &sink, NULL, err) != 0) {
        analysis_stream_free(s);
        return -1;
    }
    analysis_summary sum;
    if (analysis_stream_end(s, &opt, &sum, NULL, err) != 0)
        return -1;
    print_summary("stream", &sum);
    analysis_summary_free(&sum);
    return 0;
}

static const char *full_out = "/tmp/bench_sim_hour";

static int way_full(const sim_config *unused, char *err)
{
    (void)unused;
    experiment_config cfg;
    experiment_defaults(&cfg, EXPERIMENT_SIM);
    cfg.wl.users = 256;
    cfg.wl.duration_ns = 3600 * CLOCK_NS_PER_S;
    cfg.wl.inject_poisson = true;
    cfg.no_baseline = true;
    if (experiment_resolve(&cfg, err) != 0 || experiment_check(&cfg, err) != 0)
        return -1;
    if (fsio_remove_tree(full_out, err) != 0)
        return -1;
    experiment_runner runner;
    experiment_runner_sim(&runner, err);
    experiment_io io = {.out_dir = full_out, .notes = NULL, .quiet = true};
    experiment_pair pair;
    /* The table and verdict go to stdout: keep them out of the figures. */
    fflush(stdout);
    int saved = dup(1);
    if (!freopen("/dev/null", "w", stdout))
        return err_set(err, "cannot silence stdout");
    int rc = experiment_run_pair(&cfg, &runner, &io, &pair, err) == 0 &&
                     report_finish_pair(full_out, &pair, false, true, err) == 0
                 ? 0
                 : -1;
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    if (rc == 0)
        print_summary("full", &pair.interference);
    experiment_pair_free(&pair);
    experiment_runner_free(&runner);
    if (rc == 0)
        printf("  full    artifacts and report.html in %s\n", full_out);
    return rc;
}

/* Run one way in a child: its wall time, CPU time and peak RSS. */
static void measure(const char *name, int (*way)(const sim_config *, char *), const sim_config *cfg)
{
    fflush(stdout);
    int64_t t0 = clock_now_ns();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        char err[ERR_LEN] = "";
        int rc = way(cfg, err);
        if (rc != 0)
            fprintf(stderr, "%s: %s\n", name, err);
        fflush(stdout);
        _exit(rc == 0 ? 0 : 1);
    }
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) {
        perror("wait4");
        exit(1);
    }
    double wall = (double)(clock_now_ns() - t0) / 1e9;
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    const double sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    printf("%-7s %6.2f s wall %6.2f s CPU (%.2f s system) %8.1f MiB peak RSS %7ld page faults%s\n",
           name, wall, cpu, sys, (double)ru.ru_maxrss / 1024, ru.ru_minflt,
           WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "" : "  FAILED");
}

int main(int argc, char **argv)
{
    bool old = true, lesson_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-old") == 0)
            old = false;
        else if (strcmp(argv[i], "--lesson-only") == 0)
            lesson_only = true;
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            full_out = argv[++i];
        else {
            fprintf(stderr, "usage: bench_sim [--no-old] [--lesson-only] [--out DIR]\n");
            return 2;
        }
    }
    char err[ERR_LEN];
    sim_config cfg;
    if (lesson_config(&cfg, err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }

    /* 1. The lesson: baseline + interference, simulated and analysed (best of 5). */
    int64_t best = INT64_MAX;
    int64_t events = 0;
    for (int rep = 0; rep < 5; rep++) {
        analysis_summary base, intf;
        sim_config b = cfg;
        b.wl.inject = false;
        int64_t w = run_and_analyse(&b, "baseline", 0, &base, &events, NULL);
        w += run_and_analyse(&cfg, "interference", base.itl_ms.p50, &intf, NULL, NULL);
        if (w < best)
            best = w;
        analysis_summary_free(&base);
        analysis_summary_free(&intf);
    }
    printf("lesson sim (baseline + interference, simulate + analyse, best of 5): %.1f ms wall "
           "(goal < 100 ms), %lld token events per run\n",
           (double)best / 1e6, (long long)events);
    if (lesson_only)
        return 0;

    /* 2. One simulated hour, each way in its own process. */
    sim_config hour;
    if (hour_config(&hour, err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double load[3] = {0};
    if (getloadavg(load, 3) < 0)
        load[0] = -1;
    printf("1 simulated hour, 256 users, Poisson 8k-token injections every 10 s on average "
           "(goal: full <= 5 s, <= 1 GiB); load average %.2f at the start, %ld CPUs online\n",
           load[0], sysconf(_SC_NPROCESSORS_ONLN));
    measure("bare", way_bare, &hour);
    if (old)
        measure("old", way_old, &hour);
    measure("stream", way_stream, &hour);
    measure("full", way_full, &hour);
    return 0;
}
