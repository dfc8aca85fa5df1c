/* stallscope calibrate — measure this CPU with the cpu engine and write a hardware profile
 * (calibrate/calib_cpu.h: the probes, the step model, the roofline) for the cost model:
 * --hardware FILE in model, sim, run, serve and report. Every probe is printed with its fitted
 * time and residual. With --target URL: a black-box server instead (cli_calibrate_target.c).
 * Exits 1 when a probe or the fit fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "calibrate/calib_cpu.h"
#include "cli/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"
#include "engine/fit.h"

typedef struct calib_opts {
    calib_cpu_options cpu;
    char out[512];
    bool json;
} calib_opts;

static int apply_temperature(void *ctx, const char *value, char *err)
{
    calib_opts *o = ctx;
    char *end = NULL;
    const double t = strtod(value, &end);
    if (end == value || *end || !(t >= 0 && t <= 100))
        return err_set(err, "--temperature: '%s' is not a number in [0, 100]", value);
    o->cpu.temperature = t;
    return 0;
}

#define O calib_opts
static const opts_spec calib_specs[] = {
    OPTS_STRING("out", "FILE", "where to write the profile (default hardware.json)", O, out),
    OPTS_INT("threads", "N", "threads to measure with, as serve will run (default: cores - 1, at "
             "least 1)", O, cpu.threads, 1, 1024),
    OPTS_DURATION("seconds", "DUR", "minimum time of each probe (default 1s; 0: a few "
                  "repetitions only)", O,
                  cpu.probe_ns, 0, 600 * CLOCK_NS_PER_S),
    OPTS_STRING("model", "M", "model whose decode and prefill steps the step model is "
                "fitted to (default " EXPERIMENT_CPU_MODEL ")", O, cpu.model),
    OPTS_INT("prompt-tokens", "N", "longest prefill probe; also 3N/4, N/2, N/4, N/8 (default 8000, at "
             "least 64)", O, cpu.prompt_tokens, 64, 65536),
    OPTS_POSITIVE("mem-bytes", "B", "memory for weights + KV cache (default 4e9, at most a "
                  "quarter of RAM; at least 1e6)", O, cpu.mem_bytes),
    OPTS_FN("temperature", "T", "sampling temperature of the decode probes, as the run's "
            "requests sample (default 1: what the server gives a request that sets none, "
            "vLLM's default; 0: greedy)", apply_temperature),
    OPTS_STRING("name", "NAME", "the profile's name (default cpu-<N>t)", O, cpu.name),
    OPTS_FLAG("no-fit", "no model run, no step model: the rates only, step_overhead_ns 0", O,
              cpu.no_fit),
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

static void print_rates(const cpu_calib *rates)
{
    printf("  GEMM (prefill shapes)      %8.1f GFLOP/s\n", rates->gemm_flops / 1e9);
    printf("  GEMM (32 rows)             %8.1f GFLOP/s\n", rates->small_gemm_flops / 1e9);
    printf("  attention kernel           %8.1f GFLOP/s\n", rates->attention_flops / 1e9);
    printf("  streaming read             %8.1f GB/s\n", rates->mem_bandwidth / 1e9);
    printf("  scattered %4d-byte blocks %8.1f GB/s\n", CPU_CALIB_BLOCK_BYTES,
           rates->block_bandwidth / 1e9);
}

static void print_fit(const calib_cpu_result *r)
{
    const cost_step_fit *fit = &r->gpu.fit;
    printf("  %s steps (median of repeats) and the fitted step model:\n", r->arch.name);
    printf("    %-24s %12s %12s %9s\n", "step", "measured ms", "fitted ms", "residual");
    for (int i = 0; i < CALIB_CPU_PROBES; i++) {
        char shape[48];
        cli_calibrate_probe_shape(&r->probes[i], shape, sizeof shape);
        printf("    %-24s %12.2f %12.2f %+8.1f %%\n", shape, r->probes[i].ns / 1e6,
               fit_predict_ns(fit, &r->probes[i]) / 1e6, r->residual[i] * 100);
    }
    printf("  fit: step %.3f ms + %.4f ms per sequence + %.3f us per context token; "
           "prefill %.4f ms per token + %.3f ns per attention pair\n",
           fit->step_ns / 1e6, fit->seq_ns / 1e6, fit->ctx_ns / 1e3, fit->token_ns / 1e6,
           fit->pair_ns);
    cli_calibrate_print_residuals(&r->fit);
    printf("  roofline for other models: rates x %.3f (the %d-token prefill), overhead "
           "%.2f ms (decode %d x %d: %.2f ms measured, %.2f ms roofline)\n",
           1 / r->prefill_scale, calib_cpu_longest_prefill(r)->prompt_tokens,
           r->gpu.step_overhead_ns / 1e6, CALIB_CPU_BATCH, CALIB_CPU_CONTEXT, r->decode_ns / 1e6,
           r->decode_roofline_ns / 1e6);
}

int cli_calibrate(int argc, char **argv)
{
    if (wants_target(argc, argv))
        return cli_calibrate_target(argc, argv);
    calib_opts o;
    memset(&o, 0, sizeof o);
    calib_cpu_options_init(&o.cpu);
    strcpy(o.out, "hardware.json");
    const opts_group groups[] = {
        {"calibrate", calib_specs, OPTS_COUNT(calib_specs), &o},
    };
    if (opts_show_help(stdout, argc, argv, "stallscope calibrate [options]",
                       "Measure this CPU with the cpu engine: its kernels (GEMM, attention, "
                       "memory bandwidth)\nand --model's own steps (decode over batch sizes and "
                       "contexts, prefill over prompt\nlengths), fit a step model to them by "
                       "least squares (residuals printed), and write a\nhardware profile "
                       "(version 2) that model, sim, run, serve and report take as\n--hardware "
                       "FILE, so the cost model predicts cpu-engine runs.\nWith --target URL: a black-box "
                       "server instead (see stallscope calibrate --target URL --help).",
                       groups, 1))
        return CLI_EXIT_OK;
    char err[ERR_LEN] = "";
    if (opts_parse(argc, argv, groups, 1, NULL, 0, NULL, err) != 0)
        return cli_usage_error("calibrate", err);
    calib_cpu_result r;
    if (calib_cpu_prepare(&o.cpu, &r, err) != 0)
        return cli_usage_error("calibrate", err);
    if (calib_cpu_measure(&o.cpu, &r, stdout, err) != 0) {
        fprintf(stderr, "stallscope calibrate: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    print_rates(&r.rates);
    if (calib_cpu_fit(&r, err) != 0) {
        fprintf(stderr, "stallscope calibrate: the step model: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    if (r.fitted)
        print_fit(&r);

    json_t *root = calib_cpu_profile_json(&o.cpu, &r);
    if (!root) {
        fprintf(stderr, "stallscope calibrate: out of memory\n");
        return CLI_EXIT_FAIL;
    }
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
