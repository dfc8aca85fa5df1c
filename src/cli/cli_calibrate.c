/* stallscope calibrate — measure this CPU with the cpu engine and write a hardware profile
 * (profile.h, version 2, source "cpu-engine") for the cost model: --hardware FILE in model,
 * sim, run, serve and report.
 *
 *   step_model   the step model fitted (fit.h) to --model's own steps: decode steps over a
 *                grid of batch sizes (1, 8, 16, 32, 64) and mean contexts (128, 512, 1024)
 *                give the per-step, per-sequence and per-context-token terms (each step
 *                the forward pass and one token drawn per sequence at --temperature, as
 *                the executor samples: a 32,000-word softmax per sequence); one-shot
 *                prefills of --prompt-tokens x 1/8, 1/4, 1/2, 3/4 and 1 give the per-token and
 *                attention terms. Every probe is printed with its fitted time and residual.
 *                The cost model uses it for that model.
 *   peak_flops, attention_flops, mem_bandwidth   the roofline for any other model: the
 *                kernels' rates (GEMM on prefill shapes, the attention kernel, a streaming
 *                read), scaled by the longest prefill against their prediction
 *   step_overhead_ns  the roofline's per-step overhead: decode 32 x 512 beyond the roofline
 *   mem_bytes    memory granted to weights + KV cache (--mem-bytes)
 *   bytes_per_param, kv_bytes_per_elem = 4 (F32); threads (as serve will run)
 * The probes run as a warm-started server runs (arena and buffers touched first), in three
 * interleaved passes (a slow spell of the machine lands on every probe a little), and keep
 * the median of their repeats, the typical step rather than the luckiest.
 * Exits 1 when a probe or the fit fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>
#include <jansson.h>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"
#include "common/units.h"
#include "engine/cpu/cpu_calib.h"
#include "engine/cpu/cpu_kernels.h"
#include "engine/cpu/cpu_pool.h"
#include "engine/fit.h"
#include "engine/profile.h"
#include "experiment/config.h"

/* The decode grid and the prefill lengths of the step model's probes. */
#define CALIB_BATCH 32 /* the lesson's steady state: the roofline's overhead is fitted here */
#define CALIB_CONTEXT 512
#define CALIB_N_BATCHES 5
#define CALIB_N_CONTEXTS 3
#define CALIB_N_PROMPTS 5 /* --prompt-tokens x 1/8, 1/4, 1/2, 3/4, 1 */
#define CALIB_N_PROBES (CALIB_N_BATCHES * CALIB_N_CONTEXTS + CALIB_N_PROMPTS)
static const int calib_batches[CALIB_N_BATCHES] = {1, 8, 16, CALIB_BATCH, 64};
static const int calib_contexts[CALIB_N_CONTEXTS] = {128, CALIB_CONTEXT, 1024};

/* The contexts cpu_calib_steps gives a decode probe sum to this. */
static double calib_context_sum(int batch, int context)
{
    double sum = 0;
    for (int i = 0; i < batch; i++)
        sum += batch > 1 ? context / 4 + (int)((int64_t)3 * context / 2 * i / (batch - 1)) : context;
    return sum;
}

typedef struct calib_opts {
    char out[512];
    char name[32];
    char model[64];
    int threads;
    int64_t probe_ns;
    double mem_bytes;
    int prompt_tokens;
    double temperature;
    bool no_fit;
    bool json;
} calib_opts;

static int apply_temperature(void *ctx, const char *value, char *err)
{
    calib_opts *o = ctx;
    char *end = NULL;
    const double t = strtod(value, &end);
    if (end == value || *end || !(t >= 0 && t <= 100))
        return err_set(err, "--temperature: '%s' is not a number in [0, 100]", value);
    o->temperature = t;
    return 0;
}

#define O calib_opts
static const opts_spec calib_specs[] = {
    OPTS_STRING("out", "FILE", "where to write the profile (default hardware.json)", O, out),
    OPTS_INT("threads", "N", "threads to measure with, as serve will run (default: cores - 1, at "
             "least 1)", O, threads, 1, 1024),
    OPTS_DURATION("seconds", "DUR", "minimum time of each probe (default 1s; 0: a few "
                  "repetitions only)", O,
                  probe_ns, 0, 600 * CLOCK_NS_PER_S),
    OPTS_STRING("model", "M", "model whose decode and prefill steps the step model is "
                "fitted to (default " EXPERIMENT_CPU_MODEL ")", O, model),
    OPTS_INT("prompt-tokens", "N", "longest prefill probe; also 3N/4, N/2, N/4, N/8 (default 8000, at "
             "least 64)", O, prompt_tokens, 64, 65536),
    OPTS_POSITIVE("mem-bytes", "B", "memory for weights + KV cache (default 4e9, at most a "
                  "quarter of RAM; at least 1e6)", O, mem_bytes),
    OPTS_FN("temperature", "T", "sampling temperature of the decode probes, as the run's "
            "requests sample (default 1: what the server gives a request that sets none, "
            "vLLM's default; 0: greedy)", apply_temperature),
    OPTS_STRING("name", "NAME", "the profile's name (default cpu-<N>t)", O, name),
    OPTS_FLAG("no-fit", "no model run, no step model: the rates only, step_overhead_ns 0", O,
              no_fit),
    OPTS_FLAG("json", "also print the profile on stdout", O, json),
};
#undef O

/* --target URL (or --target=URL) anywhere: a black-box server, not this CPU. */
static bool wants_target(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--target") == 0 || strncmp(argv[i], "--target=", 9) == 0)
            return true;
    return false;
}

int cli_calibrate(int argc, char **argv)
{
    if (wants_target(argc, argv))
        return cli_calibrate_target(argc, argv);
    calib_opts o;
    memset(&o, 0, sizeof o);
    strcpy(o.out, "hardware.json");
    strcpy(o.model, EXPERIMENT_CPU_MODEL);
    o.threads = cpu_pool_default_threads();
    o.probe_ns = CLOCK_NS_PER_S;
    o.prompt_tokens = 8000;
    o.temperature = 1.0;
    const double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    o.mem_bytes = 4e9 < ram / 4 ? 4e9 : ram / 4;
    const opts_group groups[] = {
        {"calibrate", calib_specs, OPTS_COUNT(calib_specs), &o},
    };
    if (opts_wants_help(argc, argv)) {
        opts_print_help(stdout, "stallscope calibrate [options]",
                        "Measure this CPU with the cpu engine: its kernels (GEMM, attention, "
                        "memory bandwidth)\nand --model's own steps (decode over batch sizes and "
                        "contexts, prefill over prompt\nlengths), fit a step model to them by "
                        "least squares (residuals printed), and write a\nhardware profile "
                        "(version 2) that model, sim, run, serve and report take as\n--hardware "
                        "FILE, so the cost model predicts cpu-engine runs.\nWith --target URL: a black-box "
                        "server instead (see stallscope calibrate --target URL --help).",
                        groups, 1);
        return CLI_EXIT_OK;
    }
    char err[ERR_LEN] = "";
    if (opts_parse(argc, argv, groups, 1, NULL, 0, NULL, err) != 0)
        return cli_usage_error("calibrate", err);
    if (o.mem_bytes < 1e6)
        return cli_usage_error("calibrate", "--mem-bytes: at least 1e6 bytes");
    const bool fit = !o.no_fit;
    const double seconds = (double)o.probe_ns / 1e9;
    cost_arch arch;
    if (fit && cost_arch_find(o.model, &arch, err) != 0)
        return cli_usage_error("calibrate", err);
    if (!o.name[0])
        snprintf(o.name, sizeof o.name, "cpu-%dt", o.threads);

    openblas_set_num_threads(1);
    cpu_pool *pool = cpu_pool_create(o.threads, err);
    if (!pool) {
        fprintf(stderr, "stallscope calibrate: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    char cpu[128];
    cpu_calib_cpu_name(cpu, sizeof cpu);
    printf("calibrating %s with %d thread%s (AVX-512 kernels %s) ...\n", cpu, o.threads,
           o.threads == 1 ? "" : "s", cpu_simd_enabled() ? "on" : "off");
    fflush(stdout);
    cpu_calib cal;
    fit_probe probes[CALIB_N_PROBES];
    int prompts[CALIB_N_PROMPTS];
    static const int eighths[CALIB_N_PROMPTS] = {1, 2, 4, 6, 8};
    for (int i = 0; i < CALIB_N_PROMPTS; i++)
        prompts[i] = o.prompt_tokens * eighths[i] / 8;
    if (cpu_calib_run(pool, seconds, &cal, err) != 0 ||
        (fit && cpu_calib_steps(pool, &arch, calib_batches, CALIB_N_BATCHES, calib_contexts,
                                CALIB_N_CONTEXTS, prompts, CALIB_N_PROMPTS, o.temperature,
                                seconds, probes, err) != 0)) {
        cpu_pool_free(pool);
        fprintf(stderr, "stallscope calibrate: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    cpu_pool_free(pool);

    cost_gpu g;
    memset(&g, 0, sizeof g);
    snprintf(g.name, sizeof g.name, "%s", o.name);
    g.peak_flops = cal.gemm_flops;
    g.attention_flops = cal.attention_flops;
    g.mem_bandwidth = cal.mem_bandwidth;
    g.mem_bytes = o.mem_bytes;
    g.bytes_per_param = 4;
    g.kv_bytes_per_elem = 4;
    g.threads = o.threads;
    printf("  GEMM (prefill shapes)      %8.1f GFLOP/s\n", cal.gemm_flops / 1e9);
    printf("  GEMM (32 rows)             %8.1f GFLOP/s\n", cal.small_gemm_flops / 1e9);
    printf("  attention kernel           %8.1f GFLOP/s\n", cal.attention_flops / 1e9);
    printf("  streaming read             %8.1f GB/s\n", cal.mem_bandwidth / 1e9);
    fit_result fr;
    memset(&fr, 0, sizeof fr);
    double residual[CALIB_N_PROBES];
    double prefill_scale = 1, decode_ns = 0, predicted_decode = 0;
    const fit_probe *longest = &probes[CALIB_N_PROBES - 1];
    if (fit) {
        if (fit_step_model(probes, CALIB_N_PROBES, arch.name, &fr, residual, err) != 0) {
            fprintf(stderr, "stallscope calibrate: the step model: %s\n", err);
            return CLI_EXIT_FAIL;
        }
        g.fit = fr.fit;
        printf("  %s steps (median of repeats) and the fitted step model:\n", arch.name);
        printf("    %-24s %12s %12s %9s\n", "step", "measured ms", "fitted ms", "residual");
        for (int i = 0; i < CALIB_N_PROBES; i++) {
            char shape[48];
            if (probes[i].prompt_tokens > 0)
                snprintf(shape, sizeof shape, "prefill %d tokens", probes[i].prompt_tokens);
            else
                snprintf(shape, sizeof shape, "decode %d x ctx %.0f", probes[i].batch,
                         probes[i].context_sum / probes[i].batch);
            printf("    %-24s %12.2f %12.2f %+8.1f %%\n", shape, probes[i].ns / 1e6,
                   fit_predict_ns(&g.fit, &probes[i]) / 1e6, residual[i] * 100);
        }
        printf("  fit: step %.3f ms + %.4f ms per sequence + %.3f us per context token; "
               "prefill %.4f ms per token + %.3f ns per attention pair\n",
               g.fit.step_ns / 1e6, g.fit.seq_ns / 1e6, g.fit.ctx_ns / 1e3,
               g.fit.token_ns / 1e6, g.fit.pair_ns);
        printf("  residuals (relative): decode rms %.1f %%, prefill rms %.1f %%, largest %.1f %%\n",
               fr.decode_rms * 100, fr.prefill_rms * 100, fr.max_abs * 100);
        static const char *const term_names[] = {"step", "per-sequence", "per-context-token",
                                                 "per-token", "attention"};
        for (int t = 0; t < 5; t++)
            if (fr.dropped[t])
                printf("  note: the %s term came out negative and is held at 0\n",
                       term_names[t]);

        /* The roofline (other models than this one): rates as a whole prefill sustains
         * them, and the decode overhead beyond it at the lesson's steady state. */
        cost_params p;
        cost_gpu roof = g;
        memset(&roof.fit, 0, sizeof roof.fit);
        cost_params_init(&p, &roof, &arch);
        const double kernels_ns = (double)cost_prefill_ns(&p, longest->prompt_tokens, NULL);
        prefill_scale = longest->ns / kernels_ns;
        g.peak_flops /= prefill_scale;
        g.attention_flops /= prefill_scale;
        roof.peak_flops = g.peak_flops;
        roof.attention_flops = g.attention_flops;
        cost_params_init(&p, &roof, &arch);
        for (int i = 0; i < CALIB_N_PROBES; i++)
            if (probes[i].batch == CALIB_BATCH && probes[i].prompt_tokens == 0 &&
                probes[i].context_sum == calib_context_sum(CALIB_BATCH, CALIB_CONTEXT))
                decode_ns = probes[i].ns;
        predicted_decode = (double)cost_decode_ns(&p, CALIB_BATCH, CALIB_CONTEXT, NULL);
        g.step_overhead_ns = decode_ns > predicted_decode ? (int64_t)(decode_ns - predicted_decode) : 0;
        printf("  roofline for other models: rates x %.3f (the %d-token prefill), overhead "
               "%.2f ms (decode %d x %d: %.2f ms measured, %.2f ms roofline)\n",
               1 / prefill_scale, longest->prompt_tokens, g.step_overhead_ns / 1e6, CALIB_BATCH,
               CALIB_CONTEXT, decode_ns / 1e6, predicted_decode / 1e6);
    }

    profile_info info = {.version = PROFILE_VERSION};
    snprintf(info.source, sizeof info.source, "%s", PROFILE_SOURCE_CPU);
    json_t *root = profile_to_json(&g, &info, fit ? &fr : NULL, fit ? probes : NULL,
                                   fit ? residual : NULL, fit ? CALIB_N_PROBES : 0);
    if (!root) {
        fprintf(stderr, "stallscope calibrate: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    char when[32];
    const time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    json_t *m = json_object();
    json_object_set_new(m, "cpu", json_string(cpu));
    json_object_set_new(m, "openblas_core", json_string(openblas_get_corename()));
    json_object_set_new(m, "avx512", json_boolean(cpu_simd_enabled()));
    json_object_set_new(m, "when", json_string(when));
    json_object_set_new(m, "small_gemm_flops", json_real(cal.small_gemm_flops));
    json_object_set_new(m, "kernel_gemm_flops", json_real(cal.gemm_flops));
    json_object_set_new(m, "kernel_attention_flops", json_real(cal.attention_flops));
    if (fit) {
        json_object_set_new(m, "fit_model", json_string(arch.name));
        json_object_set_new(m, "decode_temperature", json_real(o.temperature));
        json_object_set_new(m, "fit_batch", json_integer(CALIB_BATCH));
        json_object_set_new(m, "fit_context", json_integer(CALIB_CONTEXT));
        json_object_set_new(m, "decode_ns", json_real(decode_ns));
        json_object_set_new(m, "decode_roofline_ns", json_real(predicted_decode));
        json_object_set_new(m, "prefill_tokens", json_integer(longest->prompt_tokens));
        json_object_set_new(m, "prefill_ns", json_real(longest->ns));
        json_object_set_new(m, "prefill_rate_scale", json_real(1 / prefill_scale));
    }
    json_object_set_new(root, "measured", m);
    int rc = CLI_EXIT_OK;
    if (fsio_write_json(o.out, root, JSON_INDENT(2) | JSON_SORT_KEYS, err) != 0) {
        fprintf(stderr, "stallscope calibrate: %s\n", err);
        rc = CLI_EXIT_FAIL;
    } else {
        printf("wrote %s (use: --hardware %s)\n", o.out, o.out);
        if (o.json) {
            json_dumpf(root, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
            printf("\n");
        }
    }
    json_decref(root);
    return rc;
}
