/* calib_target — `stallscope calibrate --target URL`: the step model of a server stallscope
 * cannot see inside, from probes it sends itself over HTTP (issue 13). The probes become
 * fit_probes (engine/fit.h: one fit, two sources of probes) and a profile with
 * profile_to_json (source "target"): calib_target_fit.h, which also holds the result's types.
 *
 * Probes, in this order, on one transport of the client layer (client/transport.h, the raw
 * transport `run --target` uses), with token-exact prompts (client/driver.h: token ids where
 * the server takes them, else text calibrated against usage.prompt_tokens), each prompt
 * unique so a prefix cache cannot hide a prefill, answers made long with ignore_eos:
 *   decode        B concurrent streams, B = 1, 2, 4 ... max_streams, at a short and a long
 *                 prompt (contexts): once every stream has had its first `skip` tokens the
 *                 steady window (window_ns) opens; the probe's step is the median gap of
 *                 the window, its context the mean context of those gaps. -> step, seq, ctx
 *   prefill       a lone prompt of min_prompt_tokens, x2 ... max_prompt_tokens (1 answer
 *                 token), the median TTFT of `repeats`. A prompt the target refuses (HTTP
 *                 4xx: context or budget too short) ends the range there, and says so.
 *                 A prefill shorter than weight_bound x the one-stream decode step is kept
 *                 but not fitted: such a step is bounded by reading the weights, which a
 *                 GPU overlaps with the prompt's math while the step model adds them.
 *                 -> token, pair
 *   interference `interference_streams` streams of short prompts, and one prompt of each
 *                 accepted prefill length sent alone into them: the stall is the median
 *                 over streams of each stream's longest gap overlapping [send, first token].
 *                 Compared with the fitted model (calib_target_infer_policy): did the
 *                 prompt share one step with the decodes (mixed) or come in chunks
 *                 (chunked, and the budget that makes the fitted step that long)?
 *   sentinel     a small fixed lone probe at the start, after each stage above and so at
 *                the end (calib_target_state.h): a server that drifts is seen, and the
 *                stage after which it moved named.
 * A gap is divided by the tokens its event carried, counted from the stream: one per event
 * (--count-tokens, calib_target_count). Every probe stream's usage.completion_tokens is
 * counted beside it; when the two disagree (calib_target_tokens_agree) the run stops and
 * says so unless told which to trust: a proxy that doubles usage would halve every step.
 * Progress goes to cfg->progress (a line per probe); every wait is bounded in time. */
#ifndef STALLSCOPE_CALIB_TARGET_H
#define STALLSCOPE_CALIB_TARGET_H
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "calibrate/calib_target_fit.h"
#include "experiment/config.h"

typedef struct calib_target_config {
    /* Borrowed: the connection as experiment_connection_group parses it for run: target (the
     * base URL, credentials and all), model_name ("": /v1/models' first), insecure and
     * transport (auto: raw, kernel stamps, unless a proxy applies). */
    const experiment_client *client;
    const experiment_secrets *secrets; /* borrowed, may be NULL; never written anywhere */
    calib_target_count count_tokens;   /* AUTO */
    int max_streams;                   /* largest decode batch (default 128) */
    int contexts[CALIB_TARGET_MAX_CONTEXTS]; /* decode prompts: short, long (64, 1024) */
    int min_prompt_tokens, max_prompt_tokens; /* prefill range (256, 16384) */
    int interference_streams;          /* 32; 0: no interference probes */
    int64_t window_ns;                 /* each decode probe's steady window (1 s) */
    int repeats;                       /* prefill: median of (3) */
    int skip;                          /* decode: tokens dropped at each stream's start (4) */
    double weight_bound;               /* prefill fitted when TTFT >= this x decode(1) (4) */
    double max_drift;                  /* the sentinel's drift reported past this (0.10) */
    int64_t timeout_ns;                /* a probe's longest wait (120 s) */
    FILE *progress;                    /* a line per probe (stderr); NULL: quiet */
    const volatile sig_atomic_t *interrupted; /* may be NULL */
} calib_target_config;

/* Defaults above (client and secrets NULL). */
void calib_target_config_init(calib_target_config *cfg);
/* --count-tokens: "auto" | "stream" | "usage" into cfg->count_tokens. 0, or -1 with err. */
int calib_target_count_parse(calib_target_config *cfg, const char *text, char *err);

/* ---- probing ------------------------------------------------------------------------------ */

typedef struct calib_target calib_target;

/* Connect: GET /v1/models (the model name, max_model_len; a 401/403 said with the flag that
 * fixes it) and the prompt probe (driver_probe). NULL with err when the target cannot be
 * used at all (bad input: unreachable, refused, not an OpenAI-compatible API). */
calib_target *calib_target_open(const calib_target_config *cfg, char *err);
/* The "model" the requests carry ("" when /v1/models named none). */
const char *calib_target_model(const calib_target *ct);
/* Run every probe into *out (zeroed first). 0, or -1 with err (a probe that failed outright:
 * nothing to fit; or, with count_tokens AUTO, usage and the stream disagree: checked after
 * each decode probe and at the end). A range that shrank is not an error: out's notes say
 * it. */
int calib_target_run(calib_target *ct, calib_target_result *out, char *err);
void calib_target_close(calib_target *ct);

#endif
