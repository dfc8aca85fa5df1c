/* calib_cpu — `stallscope calibrate`: this CPU measured with the cpu engine, into a hardware
 * profile (profile.h, version 2, source "cpu-engine") for the cost model: --hardware FILE in
 * model, sim, run, serve and report.
 *
 *   step_model   the step model fitted (fit.h) to the model's own steps: decode steps over a
 *                grid of batch sizes (1, 8, 16, 32, 64) and mean contexts (128, 512, 1024)
 *                give the per-step, per-sequence and per-context-token terms (each step
 *                the forward pass and one token drawn per sequence at the temperature, as
 *                the executor samples: a 32,000-word softmax per sequence); one-shot
 *                prefills of prompt_tokens x 1/8, 1/4, 1/2, 3/4 and 1 give the per-token and
 *                attention terms. The cost model uses it for that model.
 *   peak_flops, attention_flops, mem_bandwidth   the roofline for any other model: the
 *                kernels' rates (GEMM on prefill shapes, the attention kernel, a streaming
 *                read), scaled by the longest prefill against their prediction
 *   step_overhead_ns  the roofline's per-step overhead: decode 32 x 512 beyond the roofline
 *   mem_bytes    memory granted to weights + KV cache
 *   bytes_per_param = 4 (F32 weights), kv_bytes_per_elem = 2 (F16 KV cache); threads (as
 *                serve will run)
 * The probes run as a warmed-up server runs (their arena and buffers touched first), in three
 * interleaved passes (a slow spell of the machine lands on every probe a little), and keep
 * the median of their repeats, the typical step rather than the luckiest.
 *
 * In three steps, so a caller can print each one's figures as they come: prepare (the
 * options: bad input), measure (the kernels and the probes), fit (the step model and the
 * roofline); then the profile. */
#ifndef STALLSCOPE_CALIB_CPU_H
#define STALLSCOPE_CALIB_CPU_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "engine/cost.h"
#include "engine/cpu/cpu_calib.h"
#include "engine/fit.h"

/* The decode grid and the prefill lengths of the step model's probes. */
#define CALIB_CPU_BATCH 32 /* the lesson's steady state: the roofline's overhead is fitted here */
#define CALIB_CPU_CONTEXT 512
#define CALIB_CPU_BATCHES 5
#define CALIB_CPU_CONTEXTS 3
#define CALIB_CPU_PROMPTS 5 /* prompt_tokens x 1/8, 1/4, 1/2, 3/4, 1 */
#define CALIB_CPU_PROBES (CALIB_CPU_BATCHES * CALIB_CPU_CONTEXTS + CALIB_CPU_PROMPTS)

typedef struct calib_cpu_options {
    char name[32];      /* the profile's name; "": cpu-<threads>t */
    char model[64];     /* whose steps the step model is fitted to (small) */
    int threads;        /* as serve will run (cores - 1, at least 1) */
    int64_t probe_ns;   /* minimum time of each probe (1 s; 0: a few repetitions only) */
    double mem_bytes;   /* weights + KV cache (4e9, at most a quarter of RAM; >= 1e6) */
    int prompt_tokens;  /* the longest prefill probe (8000) */
    double temperature; /* the decode probes' sampling (1: what a request that sets none gets) */
    bool no_fit;        /* the rates only: no model run, no step model, step_overhead_ns 0 */
} calib_cpu_options;

/* The defaults above. */
void calib_cpu_options_init(calib_cpu_options *o);

typedef struct calib_cpu_result {
    char cpu[128];       /* this CPU's name */
    cpu_calib rates;     /* the kernels' rates as measured */
    cost_arch arch;      /* the model fitted (when fitting) */
    cost_gpu gpu;        /* the profile's device: the rates (scaled by the roofline after the
                            fit), memory, threads, the step model and the overhead */
    bool fitted;         /* the step model was fitted (not no_fit) */
    fit_probe probes[CALIB_CPU_PROBES]; /* decode grid, then the prefills, shortest first */
    double residual[CALIB_CPU_PROBES];  /* relative */
    fit_result fit;
    double prefill_scale;      /* the longest prefill measured / the kernels' roofline of it */
    double decode_ns;          /* decode CALIB_CPU_BATCH x CALIB_CPU_CONTEXT as measured */
    double decode_roofline_ns; /* ... and as the scaled roofline predicts it */
} calib_cpu_result;

/* Check o (bad input: memory under 1e6 bytes, a model the catalog does not know) and set
 * out up (zeroed; the model, the profile's name). 0, or -1 with err. */
int calib_cpu_prepare(const calib_cpu_options *o, calib_cpu_result *out, char *err);
/* Measure the kernels' rates and (unless no_fit) the model's steps, on o->threads threads;
 * progress (may be NULL) gets the line "calibrating CPU with N threads ..." once the threads
 * are up. 0, or -1 with err. */
int calib_cpu_measure(const calib_cpu_options *o, calib_cpu_result *r, FILE *progress,
                      char *err);
/* Fit the step model to the probes, then the roofline for other models: the rates scaled so
 * the kernels predict the longest prefill, and the decode overhead beyond it at
 * CALIB_CPU_BATCH x CALIB_CPU_CONTEXT. Nothing with no_fit. 0, or -1 with err (the fit). */
int calib_cpu_fit(calib_cpu_result *r, char *err);
/* The longest prefill probe (the roofline's scale). */
const fit_probe *calib_cpu_longest_prefill(const calib_cpu_result *r);

/* The profile (profile_to_json, source "cpu-engine") with its "measured" object: the CPU,
 * the kernels' rates, the time, and the fit's reference points. NULL when out of memory. */
json_t *calib_cpu_profile_json(const calib_cpu_options *o, const calib_cpu_result *r);

#endif
