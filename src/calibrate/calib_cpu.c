/* calib_cpu — this CPU into a hardware profile with the cpu engine (calib_cpu.h). */
#include "calibrate/calib_cpu.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "common/clock.h"
#include "common/err.h"
#include "engine/cpu/cpu_kernels.h"
#include "engine/cpu/cpu_kv.h"
#include "engine/cpu/cpu_pool.h"
#include "engine/profile.h"
#include "experiment/config.h"
#include "experiment/shard.h"

static const int calib_batches[CALIB_CPU_BATCHES] = {1, 8, 16, CALIB_CPU_BATCH, 64};
static const int calib_contexts[CALIB_CPU_CONTEXTS] = {128, CALIB_CPU_CONTEXT, 1024};

/* The contexts cpu_calib_steps gives a decode probe sum to this. */
static double calib_context_sum(int batch, int context)
{
    double sum = 0;
    for (int i = 0; i < batch; i++)
        sum += batch > 1 ? context / 4 + (int)((int64_t)3 * context / 2 * i / (batch - 1)) : context;
    return sum;
}

void calib_cpu_options_init(calib_cpu_options *o)
{
    memset(o, 0, sizeof *o);
    strcpy(o->model, EXPERIMENT_CPU_MODEL);
    o->threads = cpu_pool_default_threads();
    o->probe_ns = CLOCK_NS_PER_S;
    o->prompt_tokens = 8000;
    o->temperature = 1.0;
    const double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    o->mem_bytes = 4e9 < ram / 4 ? 4e9 : ram / 4;
}

int calib_cpu_prepare(const calib_cpu_options *o, calib_cpu_result *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (o->mem_bytes < 1e6)
        return err_set(err, "--mem-bytes: at least 1e6 bytes");
    out->fitted = !o->no_fit;
    if (out->fitted && cost_arch_find(o->model, &out->arch, err) != 0)
        return -1;
    if (o->name[0])
        snprintf(out->gpu.name, sizeof out->gpu.name, "%s", o->name);
    else
        snprintf(out->gpu.name, sizeof out->gpu.name, "cpu-%dt", o->threads);
    return 0;
}

int calib_cpu_measure(const calib_cpu_options *o, calib_cpu_result *r, FILE *progress,
                      char *err)
{
    const double seconds = (double)o->probe_ns / 1e9;
    openblas_set_num_threads(1);
    cpu_pool *pool = cpu_pool_create(o->threads, err);
    if (!pool)
        return -1;
    cpu_calib_cpu_name(r->cpu, sizeof r->cpu);
    if (progress) {
        fprintf(progress, "calibrating %s with %d thread%s (%s kernels) ...\n", r->cpu,
                o->threads, o->threads == 1 ? "" : "s", cpu_isa_name(cpu_isa_active()));
        fflush(progress);
    }
    int prompts[CALIB_CPU_PROMPTS];
    static const int eighths[CALIB_CPU_PROMPTS] = {1, 2, 4, 6, 8};
    for (int i = 0; i < CALIB_CPU_PROMPTS; i++)
        prompts[i] = o->prompt_tokens * eighths[i] / 8;
    const int rc =
        cpu_calib_run(pool, seconds, &r->rates, err) != 0 ||
                (r->fitted &&
                 cpu_calib_steps(pool, &r->arch, calib_batches, CALIB_CPU_BATCHES, calib_contexts,
                                 CALIB_CPU_CONTEXTS, prompts, CALIB_CPU_PROMPTS, o->temperature,
                                 seconds, r->probes, err) != 0)
            ? -1
            : 0;
    cpu_pool_free(pool);
    if (rc != 0)
        return -1;
    cost_gpu *g = &r->gpu;
    g->peak_flops = r->rates.gemm_flops;
    g->attention_flops = r->rates.attention_flops;
    g->mem_bandwidth = r->rates.mem_bandwidth;
    g->mem_bytes = o->mem_bytes;
    g->bytes_per_param = 4;
    g->kv_bytes_per_elem = CPU_KV_ELEM_BYTES; /* the cpu engine caches F16 */
    g->threads = o->threads;
    r->prefill_scale = 1;
    return 0;
}

const fit_probe *calib_cpu_longest_prefill(const calib_cpu_result *r)
{
    return &r->probes[CALIB_CPU_PROBES - 1];
}

int calib_cpu_fit(calib_cpu_result *r, char *err)
{
    if (!r->fitted)
        return 0;
    cost_gpu *g = &r->gpu;
    if (fit_step_model(r->probes, CALIB_CPU_PROBES, r->arch.name, false, &r->fit, r->residual, err) != 0)
        return -1;
    g->fit = r->fit.fit;

    /* The roofline (other models than this one): rates as a whole prefill sustains them, and
     * the decode overhead beyond it at the lesson's steady state. */
    const fit_probe *longest = calib_cpu_longest_prefill(r);
    cost_params p;
    cost_gpu roof = *g;
    memset(&roof.fit, 0, sizeof roof.fit);
    cost_params_init(&p, &roof, &r->arch);
    const double kernels_ns = (double)cost_prefill_ns(&p, longest->prompt_tokens, NULL);
    r->prefill_scale = longest->ns / kernels_ns;
    g->peak_flops /= r->prefill_scale;
    g->attention_flops /= r->prefill_scale;
    roof.peak_flops = g->peak_flops;
    roof.attention_flops = g->attention_flops;
    cost_params_init(&p, &roof, &r->arch);
    for (int i = 0; i < CALIB_CPU_PROBES; i++)
        if (r->probes[i].batch == CALIB_CPU_BATCH && r->probes[i].prompt_tokens == 0 &&
            r->probes[i].context_sum == calib_context_sum(CALIB_CPU_BATCH, CALIB_CPU_CONTEXT))
            r->decode_ns = r->probes[i].ns;
    r->decode_roofline_ns = (double)cost_decode_ns(&p, CALIB_CPU_BATCH, CALIB_CPU_CONTEXT, NULL);
    g->step_overhead_ns = r->decode_ns > r->decode_roofline_ns
                              ? (int64_t)(r->decode_ns - r->decode_roofline_ns)
                              : 0;
    return 0;
}

json_t *calib_cpu_profile_json(const calib_cpu_options *o, const calib_cpu_result *r)
{
    profile_info info = {.version = PROFILE_VERSION};
    snprintf(info.source, sizeof info.source, "%s", PROFILE_SOURCE_CPU);
    const bool fit = r->fitted;
    json_t *root = profile_to_json(&r->gpu, &info, fit ? &r->fit : NULL, fit ? r->probes : NULL,
                                   fit ? r->residual : NULL, fit ? CALIB_CPU_PROBES : 0);
    json_t *m = root ? json_object() : NULL;
    if (!m) {
        json_decref(root);
        return NULL;
    }
    char when[48];
    experiment_format_utc((int64_t)time(NULL) * CLOCK_NS_PER_S, when, sizeof when);
    json_object_set_new(m, "cpu", json_string(r->cpu));
    json_object_set_new(m, "openblas_core", json_string(openblas_get_corename()));
    json_object_set_new(m, "avx512", json_boolean(cpu_simd_enabled()));
    json_object_set_new(m, "cpu_isa", json_string(cpu_isa_name(cpu_isa_active())));
    json_object_set_new(m, "when", json_string(when));
    json_object_set_new(m, "small_gemm_flops", json_real(r->rates.small_gemm_flops));
    json_object_set_new(m, "kernel_gemm_flops", json_real(r->rates.gemm_flops));
    json_object_set_new(m, "kernel_attention_flops", json_real(r->rates.attention_flops));
    json_object_set_new(m, "block_bandwidth", json_real(r->rates.block_bandwidth));
    if (fit) {
        const fit_probe *longest = calib_cpu_longest_prefill(r);
        json_object_set_new(m, "fit_model", json_string(r->arch.name));
        json_object_set_new(m, "decode_temperature", json_real(o->temperature));
        json_object_set_new(m, "fit_batch", json_integer(CALIB_CPU_BATCH));
        json_object_set_new(m, "fit_context", json_integer(CALIB_CPU_CONTEXT));
        json_object_set_new(m, "decode_ns", json_real(r->decode_ns));
        json_object_set_new(m, "decode_roofline_ns", json_real(r->decode_roofline_ns));
        json_object_set_new(m, "prefill_tokens", json_integer(longest->prompt_tokens));
        json_object_set_new(m, "prefill_ns", json_real(longest->ns));
        json_object_set_new(m, "prefill_rate_scale", json_real(1 / r->prefill_scale));
    }
    json_object_set_new(root, "measured", m);
    return root;
}
