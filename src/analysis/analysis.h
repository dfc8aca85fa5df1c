/* analysis — gaps, percentiles, stalls and their attribution to injections, and the
 * comparison of two runs. One implementation for sim, run and report.
 *
 * Gaps: for each request, the time between consecutive token events it received (an
 * event carrying several tokens is one event: what the user sees). Only background
 * requests contribute ITL gaps; TTFT is send -> first event.
 * Percentiles: nearest-rank. For N sorted values and p in (0, 1], the p-quantile is the
 * value of rank ceil(p x N) (1-based); p50 of {1,2,3,4} is 2, p99.9 of 1,000 values is the
 * 999th. Always an observed value, never interpolated.
 * Stalls: a gap longer than threshold_ms (default 5 x the baseline's p50, or 5 x the run's
 * own p50 without a baseline). A stall is aligned with injection i when its open interval
 * (t_prev, t_cur) overlaps [send_i, first_token_i] (to end_i when no first token came). */
#ifndef STALLSCOPE_ANALYSIS_H
#define STALLSCOPE_ANALYSIS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "analysis/standard.h"
#include "common/tokenlog.h"

typedef struct analysis_dist {
    int64_t count;
    double mean, p50, p90, p99, p999, max; /* ms */
} analysis_dist;

typedef struct analysis_injection {
    double t_plan_s;
    double t_send_s;
    double ttft_ms;      /* -1 when it never produced a token */
    int prompt_tokens;
    double max_gap_ms;   /* longest background gap overlapping [send, first token] */
    double median_gap_ms; /* median of those overlapping gaps */
    int users_stalled;   /* distinct users with a stall aligned with this injection */
} analysis_injection;

typedef struct analysis_stalls {
    double threshold_ms;
    int64_t count;
    double fraction_of_gaps;
    int64_t aligned;
    double aligned_fraction;      /* aligned / count; 0 when count == 0 */
    double stalled_time_fraction; /* union of stall intervals / run duration */
} analysis_stalls;

/* ---- causes ----------------------------------------------------------------------- */

/* Every stall gets one cause, in this order of evidence (docs/reference/report.md, "What caused the
 * stalls"):
 *   PREEMPTED    the server had preempted the request (sched_events.csv): it was out of
 *                the steps when the gap began (a step carrying it after its token would have
 *                sampled another), and preempted then or before the gap's end, out until
 *                re-admitted to recompute its KV. First: whatever else ran meanwhile, the
 *                request was out of every step, and its own recompute is part of its wait.
 *   PREFILL      the server was prefilling: a step during the gap carried prompt tokens and
 *                lasted longer than the threshold (its model says so too, where there is
 *                one, at this machine's speed: the model times the median measured/modeled
 *                ratio of the run's steps); without a step log (a --target), a request whose own wait for its
 *                first token was at least the threshold overlapped the gap. The culprits
 *                are those requests: their prefill window [send, first token] overlapped
 *                the gap and lasted at least the threshold, and their prompt is at least a
 *                quarter of the longest such prompt (a short request that only queued
 *                behind the prefill waited long too, but did not cause the wait).
 *   SERVER       a step during the gap lasted longer than the threshold while its modeled
 *                work (at this machine's speed, as above) was shorter: the server's machine,
 *                not its scheduler.
 *   NOT_SCHEDULED  every step during the gap was short, and the request was out of them when
 *                the gap began, left out without being preempted (sched_events.csv:
 *                left_out until rejoined; the token budget, prefill-first's prefill-only
 *                steps, a seat).
 *   CLIENT       the server kept stepping, every step short, all through the gap, and (where
 *                the server logs its requests' places: the simulator, the embedded server)
 *                carried the request in each: it emitted on time and the client read late.
 *   UNEXPLAINED  none of the above (no step log and no long prefill, or no step at all).
 * (The order of the enum is the order of summary.json's keys, older causes first.) */
typedef enum {
    ANALYSIS_CAUSE_PREFILL,
    ANALYSIS_CAUSE_SERVER,
    ANALYSIS_CAUSE_CLIENT,
    ANALYSIS_CAUSE_UNEXPLAINED,
    ANALYSIS_CAUSE_PREEMPTED,
    ANALYSIS_CAUSE_NOT_SCHEDULED,
    ANALYSIS_N_CAUSES
} analysis_cause;
/* "prefill", "server", "client", "unexplained", "preempted", "not_scheduled" */
const char *analysis_cause_name(analysis_cause c);

#define ANALYSIS_MAX_CULPRITS 3 /* per stall, the longest prompts first */

/* One stall: the gap (start, start + gap) in a background request's stream. */
typedef struct analysis_stall {
    int64_t t_ns;         /* where the wait began (the previous token) */
    int64_t gap_ns;
    int64_t request;
    int32_t user;
    int32_t cause;        /* analysis_cause */
    int32_t n_culprits;   /* all of them; the first ANALYSIS_MAX_CULPRITS are named */
    int64_t culprit[ANALYSIS_MAX_CULPRITS];
    int32_t culprit_prompt[ANALYSIS_MAX_CULPRITS];
} analysis_stall;

typedef struct analysis_cause_total {
    int64_t stalls;
    double frozen_user_s; /* the stalls' gaps, summed over users */
} analysis_cause_total;

/* A request that stalled others ("who stalled whom"): every stall naming it counts in full. */
typedef struct analysis_culprit {
    int64_t request;
    int32_t kind;          /* tokenlog_kind */
    int32_t prompt_tokens;
    int64_t stalls;
    int32_t users;         /* distinct users it stalled */
    double frozen_user_s;
} analysis_culprit;

#define ANALYSIS_PROMPT_BUCKETS 6 /* < 1k, 1k-2k, 2k-4k, 4k-8k, 8k-16k, >= 16k tokens */
extern const int analysis_prompt_bucket_lo[ANALYSIS_PROMPT_BUCKETS];

typedef struct analysis_attribution {
    analysis_cause_total by_cause[ANALYSIS_N_CAUSES];
    /* Prefill stalls by the prompt length of their longest culprit. */
    analysis_cause_total by_prompt[ANALYSIS_PROMPT_BUCKETS];
    analysis_culprit *culprits; /* (n_culprits) most frozen user-seconds first */
    int n_culprits;
    bool step_log;              /* the causes had a step log to go on */
    /* Rates a user of real traffic asks for. */
    double stalls_per_min;
    double stalls_per_1k_requests;  /* per 1,000 background requests that got a token */
    double frozen_user_s_per_hour;
    double requests_stalled_100ms;  /* share of background requests with a gap > 100 ms */
    double requests_stalled_1s;     /* ... > 1 s */
} analysis_attribution;

/* Where a live run's token times came from (the client's count per stamp source). */
typedef struct analysis_stamps {
    bool known;        /* an HTTP run that counted them */
    char transport[8]; /* "raw" | "curl" */
    int64_t kernel;    /* the kernel's receive stamp of the bytes */
    int64_t kernel_coalesced; /* one stamp for segments read together: a bound, not exact */
    int64_t user;      /* stamped in user space after the read */
} analysis_stamps;

/* What the report's per-gap charts need from a streamed run, whose events nobody holds:
 * every gap's place on the "gaps over time" chart reduced to one point per occupied cell
 * (ANALYSIS_DIGEST_COLUMNS columns over the run, 8 rows per doubling of the gap; a point is
 * its cell's middle in time and its row's middle in gap, within ±4.4 %), and the distribution
 * of gaps as a staircase over the histogram's buckets (analysis.h's ±0.39 %). */
#define ANALYSIS_DIGEST_COLUMNS 1200
typedef struct analysis_gap_digest {
    int64_t gaps;            /* the gaps drawn */
    int64_t n_points;
    double *t_s, *gap_ms;    /* (n_points) one per occupied cell, by time then gap */
    double max_t_s, max_gap_ms; /* the longest gap, exact, and where it began */
    int64_t n_ccdf;
    double *ccdf_ms, *ccdf_frac; /* (n_ccdf) fraction of gaps at least ccdf_ms, ascending */
} analysis_gap_digest;

/* A run whose requests failed this often (or more) failed (analysis_summary.failed). */
#define ANALYSIS_FAILED_SHARE 0.5

typedef struct analysis_prompt_tokens {
    int64_t requests;         /* requests counted (ended without an error, a prompt planned) */
    int64_t planned, counted; /* their prompt tokens: planned, and as the server counted */
    double ratio;             /* counted / planned (0: none) */
    double worst;             /* the largest |counted / planned - 1| of one request */
} analysis_prompt_tokens;

typedef struct analysis_summary {
    char label[64];
    char engine[128];
    char target[256];
    double duration_s;
    int users;
    /* What users counts: the closed users (false), or streams (true: the workload had
     * open-loop requests, each a stream of its own, and users is the distinct streams seen). */
    bool users_are_streams;
    /* One shard of a sharded run (--shard I/N): shard I of shards N, its share of the users
     * only (the injector runs in shard 0); shards 0 when the run is not a shard. */
    int shard, shards;
    int64_t tokens_received; /* sum of n_tokens over all events */
    /* tokens_received / duration_s (0 without a duration): every token streamed, whatever
     * became of its request — the server's output rate, where standard.all.output_throughput
     * (vLLM's) counts the completed requests' tokens only. summary.json
     * "streamed_throughput". */
    double streamed_throughput;
    analysis_dist itl_ms;
    /* The run's own noise: for each figure of itl_ms, |first half − second half| / their
     * mean, the halves split at half the duration by where each gap began (a fraction;
     * 0 when a half has no gaps). A change between two runs smaller than the baseline's
     * noise is no change anyone can claim. */
    analysis_dist itl_noise;
    analysis_dist ttft_ms; /* background requests */
    analysis_stalls stalls;
    analysis_injection *injections;
    int n_injections;
    int injections_with_stalls; /* injections with users_stalled > 0 */
    double spike_ratio;         /* max gap / p50 gap */
    int64_t requests;           /* requests recorded (sent, or carried over from the warm-up) */
    int64_t errors;             /* requests that ended with an error */
    /* The error most requests ended with (its exact text; of equal counts the first in
     * byte order), "" without errors, and how many. */
    char error_common[128];
    int64_t error_common_count;
    /* The run mostly failed: errors >= ANALYSIS_FAILED_SHARE of its requests (at least
     * one). Its figures describe the few answers that came: the run is not complete. */
    bool failed;
    int64_t protocol_violations; /* server events the client ignored (from the run's record) */
    analysis_stamps stamps;      /* from the run's record */
    /* The engine's prefix cache (steps.csv's prefix columns; known only where the engine is
     * ours and ran with --enable-prefix-caching): prompt tokens looked up at first admission
     * and of them found cached, vLLM's prefix_cache_queries / prefix_cache_hits.
     * summary.json: "prefix_cache" (absent when not known). */
    bool prefix_cache;
    int64_t prefix_queries, prefix_hits;
    analysis_prompt_tokens prompt_tokens; /* planned against counted (analysis_prompt_count) */
    bool complete;              /* false when the run was cut short or failed */
    analysis_attribution attribution;
    analysis_stall *stall_list; /* (n_stall_list) every stall, by request then time */
    int64_t n_stall_list;
    standard_metrics standard;  /* TTFT, TPOT, ITL, E2E, throughputs, goodput (standard.h) */
    /* How itl_ms (and itl_noise) were computed: exact (every gap held and sorted: the
     * nearest-rank values are observed gaps), or from a log-bucketed histogram once the gaps
     * outgrew the budget (analysis_options.exact_gaps_max): then p50 ... p99.9 lie within
     * itl_relative_error of the nearest-rank gap (counts, mean and max stay exact, and so do
     * the stalls: their count, list and causes). summary.json: "itl_percentiles". */
    bool itl_histogram; /* false: exact (so a zeroed summary reads as exact) */
    double itl_relative_error; /* 0 when exact */
    /* tokens.csv not kept: the run had more token events than this limit (a long simulation);
     * summary.json "tokens_csv": {"written": false, "max_events"} only then. */
    bool tokens_csv_dropped;
    int64_t tokens_csv_max_events;
    /* A streamed run's per-gap charts (analysis_stream with opt.gap_digest), else NULL. */
    analysis_gap_digest *gap_digest;
    /* GPUs the run used (analysis_options.gpus; 0: unknown). summary.json then has "gpus" and
     * "per_gpu": {output_throughput (metrics.all.output_throughput / gpus, tok/s),
     * request_goodput (metrics.all.request_goodput / gpus, req/s; null without --goodput)}. */
    int gpus;
} analysis_summary;

typedef struct analysis_options {
    const char *label;
    const char *engine;
    const char *target;
    double duration_s;
    int users;
    bool users_are_streams; /* passed through (analysis_summary) */
    int shard, shards;      /* passed through (analysis_summary) */
    double threshold_ms; /* 0: 5 x reference_p50_ms, or 5 x own p50 when that is 0 too */
    bool threshold_known; /* threshold_ms is the threshold even when 0 (a second pass that
                           * analysis_stream_end asked for: 5 x a p50 of 0) */
    double reference_p50_ms; /* the baseline's p50, 0 when none */
    bool complete;
    int64_t protocol_violations; /* counted by the client, passed through to the summary */
    analysis_stamps stamps;      /* where the client's times came from (HTTP runs) */
    const standard_options *standard; /* percentiles and SLOs; NULL: the defaults */
    /* The streaming analysis' memory budget (0: the defaults below). exact_gaps_max: gaps
     * held for exact percentiles before a histogram takes over. stall_candidates_max: long
     * gaps held while the stall threshold is not known yet (no threshold_ms and no
     * reference: 5 x the run's own p50, known at the end). */
    int64_t exact_gaps_max;
    int64_t stall_candidates_max;
    /* The stream draws analysis_summary.gap_digest (for a report without the events). */
    bool gap_digest;
    /* Passed through to the summary: tokens.csv was not kept (more events than its limit). */
    bool tokens_csv_dropped;
    int64_t tokens_csv_max_events;
    /* GPUs the run used (the simulator: 1, or P + D disaggregated); 0: unknown (a live
     * server). Passed through to the summary. */
    int gpus;
} analysis_options;

#define ANALYSIS_EXACT_GAPS_DEFAULT ((int64_t)16 << 20)        /* 16 Mi gaps: 128 MiB */
#define ANALYSIS_STALL_CANDIDATES_DEFAULT ((int64_t)2 << 20)   /* 2 Mi gaps: 64 MiB */

/* Nearest-rank quantile of sorted[0..n), p in (0, 1]; 0 when n == 0. */
double analysis_quantile(const double *sorted, int64_t n, double p);
/* Fill a distribution from unsorted values (sorted in place). */
void analysis_dist_from(double *values, int64_t n, analysis_dist *out);
/* The distribution of the injections' TTFTs, over those that got a token: true when at
 * least one did (false too when s is NULL or memory runs out; *out is zeroed then). */
bool analysis_injection_ttft(const analysis_summary *s, analysis_dist *out);

/* All background ITL gaps in ms, in (request, time) order; caller frees *out. */
int analysis_gaps_ms(const tokenlog *log, double **out, int64_t *n, char *err);

/* The prompts as planned against as the server counted them (requests.csv's
 * prompt_tokens_requested and prompt_tokens: usage.prompt_tokens where the server reported
 * it), over the requests that ended without an error. Prompts sent as token ids are exact;
 * sent as text, this checks the calibrated words per token on these very prompts.
 * summary.json "prompt_tokens" (null without such a request). */
void analysis_prompt_count(const tokenlog *log, analysis_prompt_tokens *out);

/* The whole in-memory log at once: always exact (the budgets are ignored). Implemented on the
 * stream below, so both paths give the same figures. */
int analysis_summarize(const tokenlog *log, const analysis_options *opt, analysis_summary *out,
                       char *err);

/* ---- the same analysis as a stream ----------------------------------------------------
 *
 * For logs too long to hold (an hour of 256 users is 10^8 token events): the producer (the
 * simulator, a reader of tokens.csv) hands over requests, steps and events as they come;
 * the stream keeps the requests, the steps, one small record per request, the gaps while
 * they fit (else a histogram: analysis_summary.itl_histogram) and the long gaps, never the
 * events. The figures are analysis_summarize's, exactly, whenever the gaps fit.
 *
 * Order: each request's events in time order (a gap is the time since that request's
 * previous event; an earlier event is an error). A request row may be given before or
 * after its events and given again as it changes (by request id: the newest row counts);
 * what the injections' waits need is that a row is given once it is sent, before any event
 * later than its send, and again with its first token (or end) before any event later than
 * that — as a producer in time order (the simulator) does — or complete, before every event
 * (a reader of requests.csv then tokens.csv). Steps in start order, any time before end. */
typedef struct analysis_stream analysis_stream;

/* opt: duration_s (> 0: the halves of itl_noise split at half of it), threshold_ms,
 * reference_p50_ms and the budgets; the rest is read at end. NULL with err. */
analysis_stream *analysis_stream_begin(const analysis_options *opt, char *err);
/* Add a request row, or replace the row with its id. -1 with err (out of memory). */
int analysis_stream_request(analysis_stream *s, const tokenlog_request *r, char *err);
int analysis_stream_step(analysis_stream *s, const tokenlog_step *st, char *err);
/* What a step did to a request's place (sched_events.csv's row), in step order. */
int analysis_stream_sched_event(analysis_stream *s, const tokenlog_sched_event *ev, char *err);
/* One token event (inject events only count their tokens). -1 with err: out of memory, or
 * an event earlier than its request's previous one. */
int analysis_stream_event(analysis_stream *s, const tokenlog_event *ev, char *err);
/* The same for evs[0..n) in order, at once (a simulator's step: one instant, its requests'
 * gaps mostly equal, so most of the work is done once per run of equal gaps). */
int analysis_stream_events(analysis_stream *s, const tokenlog_event *evs, int64_t n, char *err);
/* The requests, steps and their events held so far (what requests.csv, steps.csv and
 * sched_events.csv hold). */
const tokenlog *analysis_stream_log(const analysis_stream *s);
/* The summary (opt: label, engine, target, users, what they count and the shard, complete,
 * protocol_violations, stamps; duration and threshold as given to begin). 0; -1 with err;
 * or -2 when the threshold was not given and more than stall_candidates_max gaps were
 * longer than the run's own 5 x p50 could rule out: *threshold_ms is then that threshold, and a second pass with it
 * as opt.threshold_ms (and opt.threshold_known) gives the exact summary. The stream is freed either way. */
int analysis_stream_end(analysis_stream *s, const analysis_options *opt, analysis_summary *out,
                        double *threshold_ms, char *err);
void analysis_stream_free(analysis_stream *s);

/* A run directory's files through the stream, in bounded memory: requests.csv and steps.csv
 * (optional) read first, then tokens.csv row by row (tokenlog_reader), each request's rows in
 * time order. A second pass over tokens.csv when analysis_stream_end asks for one. opt as
 * analysis_summarize's (duration_s 0: the requests' last instant); rows cut short at the end
 * of a file (a killed writer) are dropped, counted in *cut_rows (may be NULL) and make the
 * summary incomplete. 0, or -1 with err. */
int analysis_summarize_files(const char *dir, const analysis_options *opt, analysis_summary *out,
                             int64_t *cut_rows, char *err);
void analysis_summary_free(analysis_summary *s);
/* Why a failed run (s->failed) failed, in one line: "30 of 30 requests failed; the most
 * common error (30): HTTP 301: ...". "" when it did not. */
void analysis_failure_text(const analysis_summary *s, char *out, size_t size);
/* A deep copy (its own injections, culprits and stalls). 0, or -1 on out-of-memory (dst
 * then empty). */
int analysis_summary_copy(analysis_summary *dst, const analysis_summary *src);

/* stalls.csv: t_ns,user,request,gap_ms,cause,culprits — one row per stall (t_ns where the
 * wait began; culprits "request:prompt_tokens" joined by ';', the longest prompts first),
 * written atomically. 0, or -1 with err. */
int analysis_write_stalls_csv(const analysis_summary *s, const char *path, char *err);

/* ---- sweeps ------------------------------------------------------------------------ */

/* The spike one long prompt causes in a run: the median over its injections of the longest
 * gap each caused (robust to the odd step that also carried a background prompt); 0 when
 * no injection caused a gap. */
double analysis_typical_spike(const analysis_summary *s);

/* One point of a sweep: what it measured, and the figures the sweep quotes for it. */
typedef struct analysis_sweep_point {
    const analysis_summary *x; /* in: the interference run, NULL when the point did not run */
    const analysis_summary *b; /* in: its baseline, NULL when none */
    const char *line;          /* in: the point's values on every axis but the first: points
                                * with equal keys lie on one line along the first axis */
    double model_spike_ms;     /* in: the cost model's spike for its configuration, 0 unknown */
    analysis_dist ttft_ms;     /* out: the injections' TTFT (count 0 when none got a token) */
    double spike_ms;           /* out: analysis_typical_spike(x) */
    int prev;                  /* out: the previous point on its line that ran, -1 */
    double step, model_step;   /* out: spike / prev's spike, and the same in the cost model;
                                * 0 without prev */
} analysis_sweep_point;

/* Fill the outputs of pts[0..n) in order. */
void analysis_sweep(analysis_sweep_point *pts, int n);

/* ---- JSON ----------------------------------------------------------------------------- */

/* {count, mean, p50, p90, p99, p999, max}; a non-finite value is null. New reference. */
json_t *analysis_dist_to_json(const analysis_dist *d);

/* summary.json: every key, its type, unit and meaning in docs/reference/artifacts.md
 * ("summary.json"; "stamps" only for HTTP runs, "gpus" and "per_gpu" with analysis_options.gpus,
 * "tokens_csv" when it was dropped). */
json_t *analysis_summary_to_json(const analysis_summary *s);
/* comparison.json: {"baseline": {...}, "interference": {...}, "ratios": {p50, p90, p99,
 * p999, max, stall_count}} ; baseline may be NULL. */
json_t *analysis_comparison_to_json(const analysis_summary *baseline,
                                    const analysis_summary *interference);

#endif
