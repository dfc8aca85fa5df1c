/* calib_target_fit — what the probes of `calibrate --target` (calib_target.h) become: each
 * probe's figure from its streams' token times (the steady decode gap, the stall an injection
 * caused), the probes the fit takes, the step model fitted to them (engine/fit.h: one fit,
 * two sources of probes), the scheduler the stalls imply under that model, and the hardware
 * profile (profile_to_json, source "target") with its "measured" object. Pure: nothing here
 * sends a request or prints. */
#ifndef STALLSCOPE_CALIB_TARGET_FIT_H
#define STALLSCOPE_CALIB_TARGET_FIT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "calibrate/calib_target_state.h"
#include "engine/cost.h"
#include "engine/fit.h"

#define CALIB_TARGET_MAX_BATCHES 12
#define CALIB_TARGET_MAX_CONTEXTS 2
#define CALIB_TARGET_MAX_PROMPTS 12
#define CALIB_TARGET_MAX_PROBES \
    (CALIB_TARGET_MAX_BATCHES * CALIB_TARGET_MAX_CONTEXTS + CALIB_TARGET_MAX_PROMPTS)

/* What a gap is divided by (--count-tokens). */
typedef enum calib_target_count {
    CALIB_TARGET_COUNT_AUTO = 0, /* the stream's events, one token each; usage must agree */
    CALIB_TARGET_COUNT_STREAM,   /* the stream's events, whatever usage says */
    CALIB_TARGET_COUNT_USAGE     /* usage.completion_tokens' increases (a server that sends
                                    several tokens in one event, and says so in its usage) */
} calib_target_count;
/* "auto", "stream", "usage". */
const char *calib_target_count_name(calib_target_count count);

typedef struct calib_target_decode {
    int batch;           /* concurrent streams */
    int prompt_tokens;   /* each stream's prompt */
    double mean_context; /* mean context of the window's gaps */
    double gap_ns;       /* median steady gap: the step */
    int64_t samples;     /* gaps in the window */
    double occupied_cells; /* a unified cache's occupied cells, /metrics' at the window's two
                              ends averaged (-1: not said; calib_target_metrics.kv_cells) */
} calib_target_decode;

typedef struct calib_target_prefill {
    int prompt_tokens;
    double ttft_ns;      /* median over the repeats */
    bool fitted;         /* false: weight-bound (see the top), shown but not fitted */
    calib_target_metrics metrics; /* /metrics before it (-1s: not offered) */
    double cells_met;    /* a unified cache's cells the median repeat met: /metrics' occupied
                            cells before it, or, when fewer, those once it was in less its
                            own prompt (the slot it took dropped its earlier cells); -1: not
                            said */
} calib_target_prefill;

typedef struct calib_target_stall {
    int prompt_tokens;   /* the injected prompt */
    double ttft_ns;      /* its TTFT among the streams */
    double stall_ns;     /* median over streams of their longest overlapping gap */
    double gap_ns;       /* the streams' median gap just before the injection */
    double mean_context; /* the streams' mean context at the injection */
    int streams_stalled; /* streams whose longest overlapping gap > 3 x gap_ns */
    int streams;
    double queue_ns;     /* send to the start of its prefill's first step (calib_target_seen) */
    int steps;           /* the steps its prefill took (calib_target_seen; 0 unknown) */
    double cells_seen;   /* a unified cache's cells the prompt met: /metrics' occupied cells
                            just before it was sent, or, when fewer, those just after its
                            first token less its own (the slot it took dropped its earlier
                            cells); -1: not said */
    double occupied_cells; /* a unified KV cache's cells when it arrived (cells_seen where
                              said, else the streams'; 0 under paged): the fitted model's
                              attention spans them (set by calib_target_fit_model in its copy) */
} calib_target_stall;

/* The probes' tokens, counted two ways over every token event of every probe stream. */
typedef struct calib_target_tokens {
    int64_t streamed;           /* token events: one token each */
    int64_t usage;              /* the same events by usage.completion_tokens' increases */
    int64_t violations;         /* protocol violations in the probe streams (transport_end) */
    char first_violation[96];   /* the first in words, "" none */
    calib_target_count counted; /* what the gaps were divided by: STREAM or USAGE */
} calib_target_tokens;

/* Usage may differ from the events by this fraction of them and still agree: a few merged
 * events (vLLM sends a held-back token with the next) leave a median gap where it was. */
#define CALIB_TARGET_COUNT_TOLERANCE 0.02

/* Do usage and the stream agree: |usage - streamed| <= CALIB_TARGET_COUNT_TOLERANCE x
 * streamed and no protocol violation? When not, why (what each counted, the violations). */
bool calib_target_tokens_agree(const calib_target_tokens *t, char *why, size_t size);

typedef struct calib_target_result {
    char served_model[128];  /* the "model" the requests carried ("" none) */
    int64_t max_model_len;   /* /v1/models' max_model_len; 0: not said */
    bool token_ids;          /* prompts went as token ids (else calibrated text) */
    calib_target_decode decode[CALIB_TARGET_MAX_BATCHES * CALIB_TARGET_MAX_CONTEXTS];
    int n_decode;
    calib_target_prefill prefill[CALIB_TARGET_MAX_PROMPTS];
    int n_prefill;
    calib_target_stall stall[CALIB_TARGET_MAX_PROMPTS];
    int n_stall;
    char prefill_note[512];  /* why the prefill range shrank; "" it did not */
    char decode_note[512];   /* why the decode grid stopped early; "" it did not */
    char stall_note[512];    /* why the interference probes stopped early */
    char sentinel_note[256]; /* the last sentinel skipped, and why; "" none */
    calib_target_tokens tokens; /* the tokens streamed and what usage said of them */
    calib_target_sentinel sentinel[CALIB_TARGET_MAX_SENTINELS]; /* start, after each stage */
    int n_sentinel;
    calib_target_kept kept;  /* the reset used, prefix caching, the prefill after a fill */
    int sentinel_tokens;     /* its prompt (CALIB_TARGET_SENTINEL_TOKENS within the context) */
    double max_drift;        /* --max-drift: a sentinel moved past it is reported */
    double seconds;          /* the probing took */
} calib_target_result;

/* ---- pure pieces (unit-tested) ----------------------------------------------------------- */

/* 1, 2, 4 ... below max_streams, then max_streams itself: at most cap, the count returned. */
int calib_target_batches(int max_streams, int *out, int cap);
/* min, 2 min, 4 min ... below max, then max itself (min <= max): at most cap. */
int calib_target_prompts(int min_tokens, int max_tokens, int *out, int cap);

/* One stream's token events: event i at t_ns[i] brought the count to cum[i] tokens. */
typedef struct calib_target_series {
    const int64_t *t_ns;
    const int *cum;
    int n;
} calib_target_series;

/* The steady decode step of a probe: the median over streams' gaps between consecutive
 * events i - 1, i with i >= skip and both in [from_ns, to_ns] (a gap that carried k tokens
 * counts as k gaps of 1/k), and the mean context of those gaps (prompt + tokens so far).
 * 0 with *gap_ns, *mean_context and *samples, or -1 when no gap qualifies. */
int calib_target_steady_gap(const calib_target_series *s, int n_streams, int skip, int prompt_tokens,
                            int64_t from_ns, int64_t to_ns, double *gap_ns,
                            double *mean_context, int64_t *samples);

/* A step that carried prefill: its gap over this x the steady gap. */
#define CALIB_TARGET_SLOWED 1.25
/* A step counted into a prefill takes at least this x the shortest prefill step counted after
 * it: consecutive chunks of one prompt differ by the attention over one more chunk, a few
 * percent (under half only for chunks near a small model's whole width). */
#define CALIB_TARGET_CHUNK_ALIKE 0.5

/* What the streams saw when a prompt was sent at send_ns and answered at first_ns (its
 * second token received at next_ns, first_ns when one read took both; 0: none came). */
typedef struct calib_target_seen {
    double stall_ns; /* the median of each stream's longest gap overlapping [send, first] */
    int stalled;     /* streams whose longest such gap exceeds the threshold */
    double queue_ns; /* from send_ns to the start of the prefill's first step, counted
                        back from the first token (below), the median over the streams
                        (0 when it began before the send) */
    int steps;       /* the steps the prefill took, the median over the streams: the step
                        that emitted the first token (a stream's last event within half a
                        steady gap of first_ns, or of next_ns less a steady gap where that
                        is earlier: one step's events arrive apart, and a first token
                        delivered a step late would otherwise add the decode step after
                        the prefill) and every step before it that began after the send
                        (a batch formed before the prompt arrived cannot carry it) and was
                        slowed (a gap over CALIB_TARGET_SLOWED steady gaps: it carried
                        prefill) */
} calib_target_seen;

/* Each stream's view of the injection (calib_target_seen), the streams' steady gap gap_ns.
 * -1 when no stream has a gap overlapping [send_ns, first_ns]. */
int calib_target_stall_of(const calib_target_series *s, int n_streams, int64_t send_ns,
                          int64_t first_ns, int64_t next_ns, double gap_ns, double threshold_ns,
                          calib_target_seen *out);

/* Mark each prefill probe fitted or weight-bound (ttft >= factor x decode_1_ns). */
void calib_target_mark_weight_bound(calib_target_result *r, double decode_1_ns, double factor);

/* Where the target offered no reset, the occupied cells of a unified cache are what /metrics
 * said (calib_target_metrics.kv_cells); where it offered one, it cleared the cache before each
 * probe and the cells are the probe's own. */
bool calib_target_cells_said(const calib_target_result *r);
/* The largest occupied cells /metrics said before a lone prefill probe or during a decode
 * probe's window (0: none said, or a paged cache's 0). */
double calib_target_cells_seen(const calib_target_result *r);
/* The cells the i-th interference probe's prompt met: its cells_seen where said (no reset),
 * else the streams' (streams x their mean context). */
double calib_target_stall_cells(const calib_target_result *r, int i);

/* The probes the fit takes: every decode probe, the fitted prefill probes. The count.
 * unified: a decode probe's B sequences each attend over the occupied cells (the B streams',
 * or more where /metrics said more: calib_target_cells_said), so its context feature is B x
 * the cells; a prefill probe's prompt attends over the cells it met (cells_met: its
 * context_sum; 0 after a reset). */
int calib_target_fit_probes(const calib_target_result *r, bool unified, fit_probe *out, int cap);

/* What the interference probes say about the target's scheduler. */
typedef struct calib_target_policy {
    char policy[16];     /* "mixed" (one step), "chunked", "none" (no stall), "" unknown */
    int budget;          /* chunked: the inferred token budget; mixed: its lower bound (the
                            longest prompt that went in one step); 0 unknown */
    bool budget_is_lower_bound;
    double ratio[CALIB_TARGET_MAX_PROMPTS];     /* measured stall / fitted one-step stall */
    double own_ratio[CALIB_TARGET_MAX_PROMPTS]; /* stall / the prompt's own prefill time
                                                   (its TTFT less its queueing) */
    bool informative[CALIB_TARGET_MAX_PROMPTS]; /* its prefill long enough to tell */
    bool budget_counted;  /* the steps counted bound the budget (else the fitted step alone) */
    int n;
    int n_informative;
} calib_target_policy;

/* A prompt whose stall reaches this fraction of its own prefill time (TTFT less queueing)
 * went in one step: one step holds the whole prefill, so the streams wait all of it. */
#define CALIB_TARGET_ONE_STEP 0.7
/* No stall: the longest gap under this x the steady gap (prefill never in a decode's step). */
#define CALIB_TARGET_NO_STALL 1.5
/* A prompt tells the policy only when its own prefill time is at least this many steady
 * gaps: a shorter one's stall is within the noise of a decode step. */
#define CALIB_TARGET_INFORMATIVE 4.0

/* The chunked budgets the step counts allow, with the streams' decodes: a prompt of n tokens
 * in k >= 2 steps had chunks c with n/k <= c < n/(k - 1); [*lo, *hi) is the intersection of
 * the most such intervals that meet (all of them, unless a step was miscounted), plus the
 * streams. false when no chunked prompt took 2 steps or more. */
bool calib_target_budget_bounds(const calib_target_stall *stalls, const bool *chunked, int n,
                                double *lo, double *hi);

/* Infer the policy and budget from the stalls. Each prompt is judged by its own measures,
 * never by the fitted lone prefill alone (a server that keeps state makes a lone prefill
 * slower or faster than the one beside the streams): one whose stall reaches
 * CALIB_TARGET_ONE_STEP of its own prefill time (ttft_ns - queue_ns) went in one step; one
 * under it was chunked; one whose prefill time is under CALIB_TARGET_INFORMATIVE steady gaps
 * says nothing; one whose stall is under CALIB_TARGET_NO_STALL gaps never stalled. The
 * chunked budget is the one whose longest chunk step under the fitted model cost (a
 * cost_params whose step model applies: cost_fit_applies; cost_injection_step_ns(..., b))
 * matches the stall, by bisection, the median over the chunked prompts, when it lies within
 * the bounds the steps each prefill took allow (calib_target_budget_bounds), else the middle
 * of those bounds (a fit the server's state bent is not trusted where the counts contradict
 * it); never below the longest one-step prompt. ratio[] keeps the stall against the fitted one-step stall for
 * the record. No informative prompt: "" (unknown), unless none stalled ("none"). */
void calib_target_infer_policy(const cost_params *cost, const calib_target_stall *stalls, int n,
                               calib_target_policy *out);

/* ---- the profile against its own interference probes ----------------------------------- */

/* A profile that misses a probe's stall or prefill time by more than this is refused. */
#define CALIB_TARGET_MAX_MISS 0.25

/* Each interference probe as the fitted profile predicts it under the inferred policy. */
typedef struct calib_target_check {
    double stall_ns[CALIB_TARGET_MAX_PROMPTS];    /* the longest step carrying the prompt */
    double prefill_ns[CALIB_TARGET_MAX_PROMPTS];  /* its whole prefill: the step, or every
                                                     chunk's step (cost_injection_prefill_ns) */
    double stall_miss[CALIB_TARGET_MAX_PROMPTS];  /* predicted / measured - 1 */
    double prefill_miss[CALIB_TARGET_MAX_PROMPTS]; /* against its TTFT less its queueing */
    bool judged[CALIB_TARGET_MAX_PROMPTS]; /* informative, under a policy the model runs */
    int n, n_judged;
    int worst;            /* the judged probe with the largest miss; -1 none judged */
    bool worst_is_stall;  /* its stall missed most (else its prefill time) */
    bool ok;              /* no judged miss over max_miss */
} calib_target_check;

/* Predict each stall under cost and pol (mixed: one step; chunked: pol->budget; "none" or
 * unknown: nothing judged) and judge the informative probes (pol->informative) against
 * max_miss. */
void calib_target_check_probes(const cost_params *cost, const calib_target_policy *pol,
                               const calib_target_stall *stalls, int n, double max_miss,
                               calib_target_check *out);

/* Is the fit good enough to write? Both stages' rms relative residual <= max_rms. *worst
 * gets the probe with the largest |residual| (-1 when n is 0). */
bool calib_target_fit_ok(const fit_result *fr, const double *residual, int n, double max_rms,
                         int *worst);

/* The map from a served model name to a catalog architecture: the name itself, or its last
 * path component lower-cased, with a trailing "-instruct" / "-chat" dropped ("Qwen/Qwen2.5-7B-
 * Instruct" -> "qwen2.5-7b"). 0 and *out, or -1 with err. */
int calib_target_arch(const char *served, cost_arch *out, char *err);

/* The median of v (sorted in place), n > 0: the lower middle for an even count, as the
 * analysis' nearest-rank p50 takes it. */
double calib_target_median(double *v, int64_t n);

/* ---- the fit and the profile -------------------------------------------------------------- */

/* A calibration's step model: the probes fitted (calib_target_fit_probes), the fit on arch,
 * the policy the stalls imply under it, and whether max_rms accepts it. */
typedef struct calib_target_fitted {
    int kv_layout;       /* SCHED_KV_PAGED, or SCHED_KV_UNIFIED: the decode probes fitted over
                            the occupied cells (calib_target_fit_model), the stalls too */
    double paged_decode_rms, unified_decode_rms; /* both fits' decode stage (-1: not fitted) */
    double sum_miss, overlap_miss; /* the judged interference probes' rms miss with the step
                                      model's terms added and overlapped (-1: none judged) */
    calib_target_stall stall[CALIB_TARGET_MAX_PROMPTS]; /* r's, as the fitted model reads them */
    fit_probe probes[CALIB_TARGET_MAX_PROBES];
    double residual[CALIB_TARGET_MAX_PROBES]; /* relative, per probe */
    int n;
    fit_result fit;
    cost_gpu gpu;        /* the profile's device: its name, memory and the step model */
    cost_params cost;    /* gpu on arch: the fitted model, for the policy and the table */
    calib_target_policy policy;
    calib_target_check check; /* the interference probes predicted (CALIB_TARGET_MAX_MISS) */
    bool accepted;       /* calib_target_fit_ok under max_rms */
    int worst;           /* the probe with the largest |residual| */
    double max_rms;
} calib_target_fitted;

/* A fresh prompt after the interference streams ended this x its quiet TTFT or more: what
 * they left behind slowed it (a unified KV cache keeps their cells, llama.cpp's slots). */
#define CALIB_TARGET_RETAINED 1.25

/* Fit r's probes for arch (the profile named name, mem_bytes for the KV cache), infer the
 * policy, judge the fit against max_rms and the interference probes it predicts against
 * CALIB_TARGET_MAX_MISS. The KV layout: unified when the retained-state probe took
 * CALIB_TARGET_RETAINED x its quiet TTFT or more and a fit whose decode probes' sequences each
 * attend over all the streams' cells (the cache cleared before each probe) has the smaller
 * decode rms; the stalls are then predicted over the streams' cells too; paged otherwise.
 * Then whether a mixed step adds the decodes' reads to the prompt's compute or overlaps them
 * (cost.h, overlap): the one whose interference probes' misses are the smaller (rms over the
 * judged stalls and prefills; equal or none judged: added).
 * 0, or -1 with err (the fit failed: too few probes, a singular system). */
int calib_target_fit_model(const calib_target_result *r, const cost_arch *arch, const char *name,
                           double mem_bytes, double max_rms, calib_target_fitted *out, char *err);

/* The profile's "measured" object: the target, the served model, every probe as measured
 * (an interference probe with its predicted stall and prefill, check may be NULL), the
 * notes, the policy inference, the tokens ("tokens": {"counted_from", "streamed",
 * "usage", "protocol_violations"}). NULL when out of memory. */
json_t *calib_target_measured_json(const calib_target_result *r, const calib_target_policy *pol,
                                   const calib_target_check *check);
/* The whole profile: profile_to_json of the model (source "target", target: the URL as
 * redact_url shows it) with the "measured" object, its time, the model fitted, max_rms and
 * whether the profile was accepted (the fit under max_rms and its probes predicted). NULL when out of memory. */
json_t *calib_target_profile_json(const calib_target_result *r, const calib_target_fitted *m,
                                  const cost_arch *arch, const char *target_shown);

#endif
