/* calib_target_state — what `calibrate --target` measures of a server's state (issue 24), as
 * pure functions over what the probes saw (calib_target.c sends them; calib_target_fit.c
 * records them in the profile):
 *   sentinel  one small fixed probe (a fresh CALIB_TARGET_SENTINEL_TOKENS-token prompt alone,
 *             CALIB_TARGET_SENTINEL_ANSWER tokens answered, CALIB_TARGET_SENTINEL_REPEATS
 *             times) at the start, after each stage and so at the end: its TTFT and decode
 *             step. Drift is either one's largest move from the start; the first sentinel
 *             past --max-drift names the stage after which the server moved.
 *   reset     the first of vLLM's POST /reset_prefix_cache, SGLang's POST /flush_cache and
 *             llama.cpp's POST /slots/0?action=erase the server answers 2xx, used before
 *             every lone prefill probe, sentinel and caching probe.
 *   caching   one fresh prompt sent twice, alone (after a reset where offered): a second TTFT
 *             under CALIB_TARGET_CACHED x the first is a prefix cache.
 *   fill      a lone fresh prompt right after the interference probes (no reset: what they
 *             left behind kept), beside the same length measured quiet.
 *   metrics   the target's /metrics, where offered, before each lone prefill probe, each
 *             sentinel, each state probe and each injection, and at both ends of each decode
 *             probe's window: KV usage, a unified cache's occupied cells and the prefix
 *             cache's counters; KV usage that moves across the lone prefill probes is
 *             occupancy the fit saw move, and occupied cells, where said, are what a unified
 *             cache's attention spans in each probe (calib_target_fit_probes).
 * Internal to src/calibrate/ (calib_target_fit.h gathers it). */
#ifndef STALLSCOPE_CALIB_TARGET_STATE_H
#define STALLSCOPE_CALIB_TARGET_STATE_H
#include <stdbool.h>

#define CALIB_TARGET_SENTINEL_TOKENS 512
#define CALIB_TARGET_SENTINEL_ANSWER 16
#define CALIB_TARGET_SENTINEL_REPEATS 3
#define CALIB_TARGET_MAX_SENTINELS 6

/* What /metrics said (calib_target_admin.h reads it); -1: not said. */
typedef struct calib_target_metrics {
    double kv_usage;      /* 0..1: the fullest KV cache (client/scrape.h's kv_usage) */
    double cache_queries; /* prefix cache: tokens looked up, cumulative (vLLM's
                             prefix_cache_queries_total) */
    double cache_hits;    /* tokens found (prefix_cache_hits_total) */
    double kv_cells;      /* a unified KV cache's occupied cells, every slot's, idle ones' kept
                             too: stallscope_kv_cells_occupied (0 under paged),
                             llamacpp:kv_cache_tokens (llama.cpp's server before 2025 and its
                             forks; today's says no figure) */
} calib_target_metrics;

/* Nothing said. */
#define CALIB_TARGET_METRICS_NONE ((calib_target_metrics){-1, -1, -1, -1})

typedef struct calib_target_sentinel {
    char after[16];  /* "start", or the stage it followed: "decode", "prefill", "interference" */
    double ttft_ns;  /* the median TTFT of its repeats */
    double step_ns;  /* the median gap of their answers */
    calib_target_metrics metrics; /* before it */
} calib_target_sentinel;

typedef struct calib_target_drift {
    double ttft, step; /* the largest |x / x at the start - 1| of each */
    int moved;         /* the first sentinel whose TTFT or step moved past max_drift; -1 none */
    bool moved_ttft;   /* at moved: the TTFT moved most (else the step) */
    double by;         /* at moved: that figure / its start - 1 */
} calib_target_drift;

/* KV usage moved across the lone prefill probes by more than this (5 points): said. */
#define CALIB_TARGET_OCCUPANCY_MOVED 0.05

/* The largest minus the smallest KV usage of n scrapes (those that said it; the two into
 * *lo and *hi, either may be NULL); -1 when fewer than two said it. */
double calib_target_kv_spread(const calib_target_metrics *m, int n, double *lo, double *hi);

/* A second TTFT of the same prompt under this x the first: a prefix cache served it. */
#define CALIB_TARGET_CACHED 0.5

typedef struct calib_target_kept {
    char reset_path[32];    /* the reset offered ("" none) */
    char reset_server[16];  /* whose it is: "vLLM", "SGLang", "llama.cpp" */
    int resets;             /* resets sent */
    int reset_slots;        /* llama.cpp: the slots erased by each reset (ids 0 .. n - 1) */
    int props_slots;        /* llama.cpp: GET /props' total_slots (0: not said) */
    int prompt_tokens;      /* the caching and fill probes' prompt (0: not run) */
    double cache_first_ns, cache_second_ns; /* the same prompt's TTFTs (0: not measured) */
    double quiet_ns;        /* that length's lone TTFT among the prefill probes */
    double after_fill_ns;   /* a fresh one right after the interference probes (0: not run) */
    calib_target_metrics before_first, before_repeat, before_fill; /* /metrics before each */
} calib_target_kept;

/* The retained-state probe: the fresh prompt after the fill over its quiet TTFT; 0 when
 * either was not measured. */
double calib_target_retained_ratio(const calib_target_kept *k);

/* 1: a prefix cache (second < CALIB_TARGET_CACHED x first), 0: none, -1: not measured. */
int calib_target_prefix_caching(const calib_target_kept *k);

/* The drift of n sentinels (the first the start) against max_drift. n < 2: none. */
void calib_target_drift_of(const calib_target_sentinel *s, int n, double max_drift,
                           calib_target_drift *out);

#endif
