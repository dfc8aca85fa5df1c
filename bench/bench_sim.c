/* bench_sim — how fast virtual time runs, and what a logged token costs in memory.
 * Prints figures; never fails on time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/analysis.h"
#include "common/clock.h"
#include "common/err.h"
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

/* One simulate + analyse pass; returns wall ns. */
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

int main(void)
{
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

    /* 2. One simulated hour, 256 users, Poisson 8k-token arrivals (mean gap 10 s). */
    sim_config hour = cfg;
    hour.wl.users = 256;
    hour.wl.duration_ns = 3600 * CLOCK_NS_PER_S;
    hour.wl.inject_poisson = true;
    hour.wl.inject_at_ns = 0;
    sim_stats stats;
    int64_t t0 = clock_now_ns();
    if (sim_run(&hour, NULL, &stats, err) != 0) {
        fprintf(stderr, "sim: %s\n", err);
        return 1;
    }
    int64_t wall_bare = clock_now_ns() - t0;
    printf("1 simulated hour, 256 users, Poisson injections: %.2f s wall without a token log "
           "(goal < 5 s); %lld steps, %lld token events, %lld requests, %lld preemptions\n",
           (double)wall_bare / 1e9, (long long)stats.steps, (long long)stats.token_events,
           (long long)stats.requests, (long long)stats.preemptions);

    analysis_summary s;
    size_t bytes = 0;
    int64_t wall_log = run_and_analyse(&hour, "hour", 0, &s, &events, &bytes);
    printf("  same hour with the in-memory token log + analysis: %.2f s wall; %lld events; "
           "log memory %.1f MiB = %.1f bytes per logged token (event row %zu bytes)\n",
           (double)wall_log / 1e9, (long long)events, (double)bytes / (1 << 20),
           (double)bytes / (double)events, sizeof(tokenlog_event));
    printf("  hour summary: p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.1f ms, %d injections\n",
           s.itl_ms.p50, s.itl_ms.p99, s.itl_ms.p999, s.itl_ms.max, s.n_injections);
    analysis_summary_free(&s);
    return 0;
}
