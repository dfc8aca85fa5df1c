/* profile — the hardware profile file: what `stallscope calibrate` writes and `--hardware
 * FILE` reads (model, sim, run, serve, report). One format for two sources of probes:
 *
 *   source "cpu-engine"  calibrate on this machine: the cpu engine's own kernels and steps
 *   source "target"      calibrate --target URL: a black-box server's streamed tokens (TTFT
 *                        over prompt lengths, ITL over batch sizes and contexts)
 *
 * Version 2 (issue 16):
 *   { "format": "stallscope-hardware-profile", "version": 2,
 *     "name": "cpu-1t", "kind": "cpu" | "server", "source": "cpu-engine" | "target",
 *     "target": URL                                   (source "target" only)
 *     "prefix_caching": true | false | null           (source "target", optional: whether
 *                                                      the server reused a repeated prompt)
 *     "kv_layout": "paged" | "unified" | null         (source "target", optional: whether
 *                                                      what earlier requests left behind
 *                                                      slowed a fresh prompt: unified)
 *     "slots": N                                      (with "unified": the server's slots,
 *                                                      those calibrate erased; optional)
 *     "step_model": {"model", "step_ns", "seq_ns", "ctx_ns", "token_ns", "pair_ns",
 *                    "overlap" (optional, false),
 *                    "decode_rms", "prefill_rms"}     (fit.h, cost.h; required for
                                                      "target", absent after --no-fit)
 *     "peak_flops", "attention_flops", "mem_bandwidth" (the roofline rates: required for
 *                                                      "cpu-engine", optional for "target")
 *     "mem_bytes"                                     (required: sizes the KV cache)
 *     "bytes_per_param", "kv_bytes_per_elem", "step_overhead_ns", "threads"   (optional)
 *     "probes": [{"batch", "context_sum", "prompt_tokens", "ns", "fitted_ns", "residual"}]
 *     "measured": {...} }                             (what the fit saw; not read back)
 * The step model predicts steps of the model it names; for any other model the rates and
 * the roofline apply (cost.h).
 *
 * Version 1 (no "version" key: calibrate before issue 16): the rates and step_overhead_ns
 * only, a roofline device. Still read. A version above 2, an unknown source, a step model
 * with a missing, non-numeric, negative or absurd term, and missing rates are refused with
 * the file and the field named. */
#ifndef STALLSCOPE_PROFILE_H
#define STALLSCOPE_PROFILE_H
#include <jansson.h>

#include "engine/cost.h"
#include "engine/fit.h"

#define PROFILE_FORMAT "stallscope-hardware-profile"
#define PROFILE_VERSION 2
#define PROFILE_SOURCE_CPU "cpu-engine"
#define PROFILE_SOURCE_TARGET "target"

typedef struct profile_info {
    int version;     /* 1 or 2 */
    char source[32]; /* "cpu-engine", "target"; "" for version 1 */
    char target[512];
    int prefix_caching; /* source "target": 1 the server caches prefixes, 0 it does not, -1
                           unknown (calibrate --target's detection; "prefix_caching": true,
                           false or null, absent before issue 24) */
    int kv_layout;      /* source "target": SCHED_KV_PAGED / SCHED_KV_UNIFIED as found, -1
                           unknown ("kv_layout" null or absent) */
    int slots;          /* with unified: the server's slots (0: unknown) */
} profile_info;

/* Read path into *out (and *info when not NULL). 0, or -1 with err. */
int profile_read(const char *path, cost_gpu *out, profile_info *info, char *err);

/* The profile as a JSON object (version 2): g's rates, its step model (g->fit), info's
 * source and target, and the probes with their fitted times and residuals (probes may be
 * NULL). The caller may add "measured" and writes it. NULL when out of memory. */
json_t *profile_to_json(const cost_gpu *g, const profile_info *info, const fit_result *fit,
                        const fit_probe *probes, const double *residual, int n_probes);

#endif
