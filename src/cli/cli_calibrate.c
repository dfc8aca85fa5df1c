/* stallscope calibrate — measure this CPU and write a hardware profile for the cost model.
 *
 * The profile replaces a GPU of the catalog (--hardware FILE in model, sim, run, serve):
 *   peak_flops        sustained GEMM FLOP/s of the engine's matrix products (prefill shapes)
 *   attention_flops   FLOP/s of the engine's attention kernel (cost-model FLOP count)
 *   mem_bandwidth     streaming-read bytes/s
 *   mem_bytes         memory granted to weights + KV cache (--mem-bytes)
 *   bytes_per_param, kv_bytes_per_elem = 4 (the engine computes in F32)
 *   step_overhead_ns  what a decode step of --model costs beyond the roofline: the engine
 *                     measured against the cost model at batch 32, mean context 512 (the
 *                     lesson's steady state); it folds in the small-batch GEMM efficiency
 *                     and the KV-cache reads that run below streaming bandwidth
 * With --model (the default) the two rates are first scaled by the engine's one-shot prefill
 * of --prompt-tokens against their prediction, so the norms, RoPE, SwiGLU, KV writes and
 * scheduling a real prefill adds are in the profile too (the kernels alone are printed).
 *   threads           the thread count it was measured with (--threads, as serve runs)
 * Prints what it measured and the fit; exits 1 when a probe fails. */
#include <stdio.h>
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

#define CALIB_BATCH 32
#define CALIB_CONTEXT 512

typedef struct calib_opts {
    char out[512];
    char name[32];
    char model[64];
    int threads;
    int64_t probe_ns;
    double mem_bytes;
    int prompt_tokens;
    bool no_fit;
    bool json;
} calib_opts;

#define O calib_opts
static const opts_spec calib_specs[] = {
    OPTS_STRING("out", "FILE", "where to write the profile (default hardware.json)", O, out),
    OPTS_INT("threads", "N", "threads to measure with, as serve will run (default: cores - 1, at "
             "least 1)", O, threads, 1, 1024),
    OPTS_DURATION("seconds", "DUR", "minimum time of each probe (default 1s; 0: 3 repetitions)", O,
                  probe_ns, 0, 600 * CLOCK_NS_PER_S),
    OPTS_STRING("model", "M", "model whose decode step fits step_overhead (default "
                EXPERIMENT_CPU_MODEL ")", O, model),
    OPTS_INT("prompt-tokens", "N", "prefill to check the profile against (default 8000; 0: none)",
             O, prompt_tokens, 0, 65536),
    OPTS_POSITIVE("mem-bytes", "B", "memory for weights + KV cache (default 4e9, at most a "
                  "quarter of RAM; at least 1e6)", O, mem_bytes),
    OPTS_STRING("name", "NAME", "the profile's name (default cpu-<N>t)", O, name),
    OPTS_FLAG("no-fit", "no model run: step_overhead_ns 0", O, no_fit),
    OPTS_FLAG("json", "also print the profile on stdout", O, json),
};
#undef O

int cli_calibrate(int argc, char **argv)
{
    calib_opts o;
    memset(&o, 0, sizeof o);
    strcpy(o.out, "hardware.json");
    strcpy(o.model, EXPERIMENT_CPU_MODEL);
    o.threads = cpu_pool_default_threads();
    o.probe_ns = CLOCK_NS_PER_S;
    o.prompt_tokens = 8000;
    const double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    o.mem_bytes = 4e9 < ram / 4 ? 4e9 : ram / 4;
    const opts_group groups[] = {
        {"calibrate", calib_specs, OPTS_COUNT(calib_specs), &o},
    };
    if (opts_wants_help(argc, argv)) {
        opts_print_help(stdout, "stallscope calibrate [options]",
                        "Measure this CPU with the cpu engine's own kernels (GEMM, attention, "
                        "memory\nbandwidth, a decode step of --model) and write a hardware "
                        "profile that model, sim,\nrun and serve take as --hardware FILE, so the "
                        "cost model predicts cpu-engine runs.",
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
    double decode_ns = 0, prefill_ns = 0;
    if (cpu_calib_run(pool, seconds, &cal, err) != 0 ||
        (fit && cpu_calib_model(pool, &arch, CALIB_BATCH, CALIB_CONTEXT, o.prompt_tokens,
                                  seconds, &decode_ns, &prefill_ns, err) != 0)) {
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
    double predicted_decode = 0, predicted_prefill = 0, prefill_scale = 1;
    if (fit) {
        cost_params p;
        if (o.prompt_tokens > 0) { /* rates as a whole prefill sustains them */
            cost_params_init(&p, &g, &arch);
            const double kernels_ns = (double)cost_prefill_ns(&p, o.prompt_tokens, NULL);
            prefill_scale = prefill_ns / kernels_ns;
            g.peak_flops /= prefill_scale;
            g.attention_flops /= prefill_scale;
            printf("  %s prefill of %d tokens: %.0f ms measured, the kernels' rates predict %.0f "
                   "ms -> rates x %.3f\n",
                   arch.name, o.prompt_tokens, prefill_ns / 1e6, kernels_ns / 1e6, 1 / prefill_scale);
        }
        cost_params_init(&p, &g, &arch);
        predicted_decode = (double)cost_decode_ns(&p, CALIB_BATCH, CALIB_CONTEXT, NULL);
        g.step_overhead_ns = decode_ns > predicted_decode ? (int64_t)(decode_ns - predicted_decode) : 0;
        cost_params_init(&p, &g, &arch);
        predicted_prefill = o.prompt_tokens > 0 ? (double)cost_prefill_ns(&p, o.prompt_tokens, NULL) : 0;
        printf("  %s decode step, %d sequences at mean context %d: %.2f ms measured, roofline "
               "%.2f ms -> step_overhead %.2f ms\n",
               arch.name, CALIB_BATCH, CALIB_CONTEXT, decode_ns / 1e6, predicted_decode / 1e6,
               g.step_overhead_ns / 1e6);
        printf("  profile: GEMM %.1f GFLOP/s, attention %.1f GFLOP/s, bandwidth %.1f GB/s, "
               "overhead %.2f ms\n",
               g.peak_flops / 1e9, g.attention_flops / 1e9, g.mem_bandwidth / 1e9,
               g.step_overhead_ns / 1e6);
    }

    json_t *root = json_object();
    char when[32];
    const time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    json_object_set_new(root, "name", json_string(g.name));
    json_object_set_new(root, "kind", json_string("cpu"));
    json_object_set_new(root, "peak_flops", json_real(g.peak_flops));
    json_object_set_new(root, "attention_flops", json_real(g.attention_flops));
    json_object_set_new(root, "mem_bandwidth", json_real(g.mem_bandwidth));
    json_object_set_new(root, "mem_bytes", json_real(g.mem_bytes));
    json_object_set_new(root, "bytes_per_param", json_real(g.bytes_per_param));
    json_object_set_new(root, "kv_bytes_per_elem", json_real(g.kv_bytes_per_elem));
    json_object_set_new(root, "step_overhead_ns", json_integer(g.step_overhead_ns));
    json_object_set_new(root, "threads", json_integer(g.threads));
    json_t *m = json_object();
    json_object_set_new(m, "cpu", json_string(cpu));
    json_object_set_new(m, "openblas_core", json_string(openblas_get_corename()));
    json_object_set_new(m, "avx512", json_boolean(cpu_simd_enabled()));
    json_object_set_new(m, "when", json_string(when));
    json_object_set_new(m, "small_gemm_flops", json_real(cal.small_gemm_flops));
    if (fit) {
        json_object_set_new(m, "fit_model", json_string(arch.name));
        json_object_set_new(m, "fit_batch", json_integer(CALIB_BATCH));
        json_object_set_new(m, "fit_context", json_integer(CALIB_CONTEXT));
        json_object_set_new(m, "decode_ns", json_real(decode_ns));
        json_object_set_new(m, "decode_roofline_ns", json_real(predicted_decode));
        json_object_set_new(m, "prefill_tokens", json_integer(o.prompt_tokens));
        json_object_set_new(m, "prefill_ns", json_real(prefill_ns));
        json_object_set_new(m, "prefill_predicted_ns", json_real(predicted_prefill));
        json_object_set_new(m, "kernel_gemm_flops", json_real(cal.gemm_flops));
        json_object_set_new(m, "kernel_attention_flops", json_real(cal.attention_flops));
        json_object_set_new(m, "prefill_rate_scale", json_real(1 / prefill_scale));
    }
    json_object_set_new(root, "measured", m);
    json_object_set_new(root, "source", json_string("stallscope calibrate"));
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
