#include "engine/cpu/cpu_calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/rng.h"
#include "engine/cpu/cpu_attn.h"
#include "engine/cpu/cpu_forward.h"
#include "engine/cpu/cpu_kernels.h"
#include "engine/cpu/cpu_kv.h"
#include "engine/cpu/cpu_sample.h"

static float *random_floats(size_t n, uint64_t seed)
{
    float *x = NULL;
    if (posix_memalign((void **)&x, 64, n * sizeof(float)) != 0)
        return NULL;
    uint64_t state = seed;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(rng_uniform(&state) - 0.5);
    return x;
}

/* Repeat fn until min_seconds have passed (at least 3 times); the fastest run, ns. */
#define BEST_OF(min_seconds, best_ns, body)                                                  \
    do {                                                                                     \
        const int64_t until_ = clock_now_ns() + (int64_t)((min_seconds) * 1e9);             \
        best_ns = INT64_MAX;                                                                 \
        for (int rep_ = 0; rep_ < 3 || clock_now_ns() < until_; rep_++) {                   \
            const int64_t t0_ = clock_now_ns();                                              \
            body;                                                                            \
            const int64_t dt_ = clock_now_ns() - t0_;                                        \
            best_ns = dt_ < best_ns ? dt_ : best_ns;                                         \
        }                                                                                    \
    } while (0)

int cpu_calib_gemm(cpu_pool *pool, int rows, double min_seconds, double *flops, char *err)
{
    const int dim = 256, ffn = 768;
    float *x = random_floats((size_t)rows * ffn, 1);
    float *w1 = random_floats((size_t)ffn * dim, 2);
    float *w2 = random_floats((size_t)dim * ffn, 3);
    float *y = random_floats((size_t)rows * ffn, 4);
    /* W in panels too: the engine's products of few rows read them where the kernel applies */
    float *p1 = malloc(sizeof(float) * cpu_panels_floats(ffn, dim));
    float *p2 = malloc(sizeof(float) * cpu_panels_floats(dim, ffn));
    float *xpack = malloc(sizeof(float) * cpu_gemm_xpack_floats(rows, ffn));
    int rc = -1;
    if (!x || !w1 || !w2 || !y || !p1 || !p2 || !xpack) {
        err_set(err, "out of memory for the GEMM probe");
        goto done;
    }
    cpu_pack_panels(p1, w1, ffn, dim);
    cpu_pack_panels(p2, w2, dim, ffn);
    int64_t best;
    BEST_OF(min_seconds, best, {
        /* (rows, 256) -> 768, then (rows, 768) -> 256 */
        cpu_gemm_panels(pool, y, ffn, x, dim, w1, p1, rows, ffn, dim, false, xpack);
        cpu_gemm_panels(pool, x, dim, y, ffn, w2, p2, rows, dim, ffn, false, xpack);
    });
    *flops = 2.0 * 2.0 * rows * dim * ffn / (best / 1e9);
    rc = 0;
done:
    free(x);
    free(w1);
    free(w2);
    free(y);
    free(p1);
    free(p2);
    free(xpack);
    return rc;
}

typedef struct attn_probe {
    const cpu_kv *kv;
    const cpu_kv_seq *seq;
    const float *q;
    float *out;
    float **scratch;
    int head_dim, kv_mul, n_tokens, tile_tokens;
} attn_probe;

static void attn_probe_task(void *arg, int task, int thread)
{
    const attn_probe *p = arg;
    /* heaviest tiles first, as the forward pass orders them */
    const int n_tiles = (p->n_tokens + p->tile_tokens - 1) / p->tile_tokens;
    const int tile = n_tiles - 1 - task;
    const int t0 = tile * p->tile_tokens;
    const int tokens = p->n_tokens - t0 < p->tile_tokens ? p->n_tokens - t0 : p->tile_tokens;
    const float *q[256];
    float *out[256];
    int32_t pos[256];
    int n = 0;
    for (int t = t0; t < t0 + tokens; t++)
        for (int h = 0; h < p->kv_mul; h++, n++) {
            q[n] = p->q + ((size_t)t * p->kv_mul + h) * p->head_dim;
            out[n] = p->out + ((size_t)t * p->kv_mul + h) * p->head_dim;
            pos[n] = t;
        }
    const cpu_attn_tile at = {.k = cpu_kv_head_k(p->kv, 0, 0),
                              .v = cpu_kv_head_v(p->kv, 0, 0),
                              .head_dim = p->head_dim,
                              .block_stride = p->kv->block_stride,
                              .block_table = p->seq->blocks,
                              .n_rows = n,
                              .q = q,
                              .out = out,
                              .pos = pos,
                              .scale = 1.0f / sqrtf((float)p->head_dim)};
    cpu_attn_run(&at, p->scratch[thread]);
}

int cpu_calib_attention(cpu_pool *pool, int head_dim, int n_tokens, double min_seconds,
                        double *flops, char *err)
{
    const int kv_mul = 4, tile_tokens = 16;
    const int threads = cpu_pool_threads(pool);
    cpu_config c = {.dim = head_dim, .hidden_dim = 16, .n_layers = 1, .n_heads = kv_mul,
                    .n_kv_heads = 1, .head_dim = head_dim, .vocab_size = 16,
                    .max_seq_len = n_tokens};
    cpu_kv kv;
    cpu_kv_seq seq = {0};
    int rc = -1;
    float *q = random_floats((size_t)n_tokens * kv_mul * head_dim, 5);
    float *out = random_floats((size_t)n_tokens * kv_mul * head_dim, 6);
    float *k = random_floats((size_t)head_dim, 7);
    float **scratch = calloc((size_t)threads, sizeof *scratch);
    if (cpu_kv_init(&kv, &c, (n_tokens + 15) / 16, err) != 0) {
        free(q), free(out), free(k), free(scratch);
        return -1;
    }
    if (!q || !out || !k || !scratch || cpu_kv_reserve(&kv, &seq, n_tokens, err) != 0) {
        err_set(err, "out of memory for the attention probe");
        goto done;
    }
    for (int t = 0; t < threads; t++)
        if (!(scratch[t] = malloc(sizeof(float) * cpu_attn_scratch_floats(tile_tokens * kv_mul, head_dim)))) {
            err_set(err, "out of memory for the attention probe");
            goto done;
        }
    for (int p = 0; p < n_tokens; p++)
        cpu_kv_write(&kv, 0, &seq, p, k, k);
    attn_probe probe = {&kv, &seq, q, out, scratch, head_dim, kv_mul, n_tokens, tile_tokens};
    const int n_tiles = (n_tokens + tile_tokens - 1) / tile_tokens;
    int64_t best;
    BEST_OF(min_seconds, best, cpu_pool_run(pool, n_tiles, attn_probe_task, &probe));
    /* the cost model's count: 4 d per (query, key) pair, d = heads x head_dim */
    const double pairs = (double)n_tokens * (n_tokens + 1) / 2;
    *flops = 4.0 * kv_mul * head_dim * pairs / (best / 1e9);
    rc = 0;
done:
    if (scratch)
        for (int t = 0; t < threads; t++)
            free(scratch[t]);
    free(scratch);
    free(q);
    free(out);
    free(k);
    cpu_kv_release(&kv, &seq);
    cpu_kv_seq_free(&seq);
    cpu_kv_free(&kv);
    return rc;
}

typedef struct stream_probe {
    const float *x;
    size_t per_task;
    float sums[64];
} stream_probe;

static void stream_task(void *arg, int task, int thread)
{
    stream_probe *p = arg;
    p->sums[thread % 64] += cpu_stream_sum(p->x + (size_t)task * p->per_task, p->per_task);
}

int cpu_calib_bandwidth(cpu_pool *pool, double min_seconds, double *bytes_per_s, char *err)
{
    const size_t n = (size_t)64 << 20; /* 256 MB of floats: far past any cache */
    float *x = random_floats(n, 8);
    if (!x)
        return err_set(err, "out of memory for the bandwidth probe");
    const int tasks = cpu_pool_threads(pool) * 8;
    stream_probe p = {x, n / (size_t)tasks, {0}};
    int64_t best;
    BEST_OF(min_seconds, best, cpu_pool_run(pool, tasks, stream_task, &p));
    *bytes_per_s = (double)p.per_task * tasks * sizeof(float) / (best / 1e9);
    free(x);
    return 0;
}

typedef struct block_probe {
    const float *x;
    const int32_t *order; /* piece ids, shuffled */
    int per_task;         /* pieces of a task */
    int n_pieces;
    float sums[64];
} block_probe;

static void block_task(void *arg, int task, int thread)
{
    block_probe *p = arg;
    const size_t piece = CPU_CALIB_BLOCK_BYTES / sizeof(float);
    const int lo = task * p->per_task;
    const int hi = lo + p->per_task < p->n_pieces ? lo + p->per_task : p->n_pieces;
    float sum = 0;
    for (int i = lo; i < hi; i++) {
        if (i + CPU_CALIB_AHEAD < hi) {
            const char *next = (const char *)(p->x + (size_t)p->order[i + CPU_CALIB_AHEAD] * piece);
            for (size_t b = 0; b < CPU_CALIB_BLOCK_BYTES; b += 64)
                __builtin_prefetch(next + b, 0, 3);
        }
        sum += cpu_stream_sum(p->x + (size_t)p->order[i] * piece, piece);
    }
    p->sums[thread % 64] += sum;
}

int cpu_calib_block_bandwidth(cpu_pool *pool, double min_seconds, double *bytes_per_s,
                              char *err)
{
    const size_t n = (size_t)64 << 20; /* 256 MB of floats, as the streaming probe */
    const int n_pieces = (int)(n * sizeof(float) / CPU_CALIB_BLOCK_BYTES);
    float *x = random_floats(n, 9);
    int32_t *order = malloc((size_t)n_pieces * sizeof *order);
    if (!x || !order) {
        free(x);
        free(order);
        return err_set(err, "out of memory for the block bandwidth probe");
    }
    for (int i = 0; i < n_pieces; i++)
        order[i] = i;
    uint64_t state = 10;
    rng_shuffle_i32(&state, order, n_pieces);
    const int tasks = cpu_pool_threads(pool) * 8;
    block_probe p = {x, order, (n_pieces + tasks - 1) / tasks, n_pieces, {0}};
    int64_t best;
    BEST_OF(min_seconds, best, cpu_pool_run(pool, tasks, block_task, &p));
    *bytes_per_s = (double)n_pieces * CPU_CALIB_BLOCK_BYTES / (best / 1e9);
    free(x);
    free(order);
    return 0;
}

int cpu_calib_run(cpu_pool *pool, double min_seconds, cpu_calib *out, char *err)
{
    memset(out, 0, sizeof *out);
    out->threads = cpu_pool_threads(pool);
    if (cpu_calib_gemm(pool, 4096, min_seconds, &out->gemm_flops, err) != 0 ||
        cpu_calib_gemm(pool, 32, min_seconds, &out->small_gemm_flops, err) != 0 ||
        cpu_calib_attention(pool, 32, 4096, min_seconds, &out->attention_flops, err) != 0 ||
        cpu_calib_bandwidth(pool, min_seconds, &out->mem_bandwidth, err) != 0 ||
        cpu_calib_block_bandwidth(pool, min_seconds, &out->block_bandwidth, err) != 0)
        return -1;
    return 0;
}

/* The middle of n values (sorted in place). */
static double median_ns(int64_t *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            const int64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? (double)v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
}

#define CALIB_MAX_REPS 96 /* per probe, over all passes */
#define CALIB_PASSES 3

/* One decode probe: `batch` sequences with contexts spread evenly over [context / 4,
 * 7 context / 4] (mean `context`), blocks handed out round-robin as sequences that grow
 * together get them (each sequence's pages scattered, as in a server). Keys are zeros (a
 * step's time does not depend on what they hold). */
/* One decode step as the executor runs it: the forward pass, then a token drawn for every
 * sequence (temperature 0: the argmax). */
static int decode_step(const cpu_model *m, cpu_runstate *rs, cpu_kv *kv, cpu_pool *pool,
                       const cpu_batch_seq *steps, int batch, double temperature, char *err)
{
    if (cpu_forward(m, rs, kv, pool, steps, batch, err) != 0)
        return -1;
    const int vocab = m->config.vocab_size;
    for (int i = 0; i < batch; i++)
        (void)cpu_sample(rs->logits + (size_t)i * vocab, vocab, temperature, (uint64_t)i + 1,
                         steps[i].context, -1);
    return 0;
}

/* One pass of a decode probe: at least 2 steps and min_seconds (at most CALIB_MAX_REPS /
 * CALIB_PASSES steps), their times appended to reps; *shape gets the probe's batch and
 * context sum. */
static int decode_probe(const cpu_model *m, cpu_runstate *rs, cpu_kv *kv, cpu_pool *pool,
                        const int32_t *ids, int batch, int context, double temperature,
                        double min_seconds, int64_t *reps, int *n_reps, fit_probe *shape,
                        char *err)
{
    cpu_kv_seq *seqs = calloc((size_t)batch, sizeof *seqs);
    cpu_batch_seq *steps = calloc((size_t)batch, sizeof *steps);
    int rc = -1;
    if (!seqs || !steps) {
        err_set(err, "out of memory for a decode probe of %d sequences", batch);
        goto done;
    }
    double context_sum = 0;
    int most = 0;
    for (int i = 0; i < batch; i++) {
        const int ctx = batch > 1 ? context / 4 + (int)((int64_t)3 * context / 2 * i / (batch - 1))
                                  : context;
        steps[i] = (cpu_batch_seq){ids + i, ctx, 1, &seqs[i], true};
        context_sum += ctx;
        most = ctx + 1 > most ? ctx + 1 : most;
    }
    for (int upto = 16; upto < most + 16; upto += 16)
        for (int i = 0; i < batch; i++) {
            const int want = steps[i].context + 1 < upto ? steps[i].context + 1 : upto;
            if (cpu_kv_reserve(kv, &seqs[i], want, err) != 0)
                goto done;
        }
    if (decode_step(m, rs, kv, pool, steps, batch, temperature, err) != 0) /* caches, not pages */
        goto done;
    const int64_t until = clock_now_ns() + (int64_t)(min_seconds * 1e9);
    for (int k = 0; k < CALIB_MAX_REPS / CALIB_PASSES && (k < 2 || clock_now_ns() < until); k++) {
        const int64_t t0 = clock_now_ns();
        if (decode_step(m, rs, kv, pool, steps, batch, temperature, err) != 0)
            goto done;
        reps[(*n_reps)++] = clock_now_ns() - t0;
    }
    *shape = (fit_probe){batch, context_sum, 0, 0};
    rc = 0;
done:
    if (seqs)
        for (int i = 0; i < batch; i++) {
            cpu_kv_release(kv, &seqs[i]);
            cpu_kv_seq_free(&seqs[i]);
        }
    free(seqs);
    free(steps);
    return rc;
}

/* One pass of a prefill probe: a fresh prompt, its time appended to reps. */
static int prefill_probe(const cpu_model *m, cpu_runstate *rs, cpu_kv *kv, cpu_pool *pool,
                         const int32_t *ids, int tokens, int64_t *reps, int *n_reps,
                         fit_probe *shape, char *err)
{
    cpu_kv_seq seq = {0};
    int rc = -1;
    if (cpu_kv_reserve(kv, &seq, tokens, err) != 0)
        goto done;
    const cpu_batch_seq prompt = {ids, 0, tokens, &seq, true};
    const int64_t t0 = clock_now_ns();
    if (cpu_forward(m, rs, kv, pool, &prompt, 1, err) != 0)
        goto done;
    reps[(*n_reps)++] = clock_now_ns() - t0;
    *shape = (fit_probe){1, 0, tokens, 0};
    rc = 0;
done:
    cpu_kv_release(kv, &seq);
    cpu_kv_seq_free(&seq);
    return rc;
}

int cpu_calib_steps(cpu_pool *pool, const cost_arch *arch, const int *batches, int n_batches,
                    const int *contexts, int n_contexts, const int *prompts, int n_prompts,
                    double temperature, double min_seconds, fit_probe *out, char *err)
{
    cpu_config c;
    cpu_model m;
    cpu_runstate rs;
    cpu_kv kv;
    memset(&m, 0, sizeof m);
    memset(&rs, 0, sizeof rs);
    memset(&kv, 0, sizeof kv);
    if (cpu_config_from_arch(arch, 1, 0, &c, err) != 0)
        return -1;
    int max_batch = 1, max_context = 1, max_prompt = 1;
    for (int i = 0; i < n_batches; i++)
        max_batch = batches[i] > max_batch ? batches[i] : max_batch;
    for (int i = 0; i < n_contexts; i++)
        max_context = contexts[i] > max_context ? contexts[i] : max_context;
    for (int i = 0; i < n_prompts; i++)
        max_prompt = prompts[i] > max_prompt ? prompts[i] : max_prompt;
    const int64_t decode_blocks = (int64_t)max_batch * (7 * (int64_t)max_context / 4 / 16 + 2);
    const int64_t prompt_blocks = max_prompt / 16 + 2;
    const int n_ids = max_prompt > max_batch ? max_prompt : max_batch;
    int32_t *ids = calloc((size_t)n_ids, sizeof *ids);
    int64_t(*reps)[CALIB_MAX_REPS] = NULL; /* each probe's step times */
    int *n_reps = NULL;
    int rc = -1;
    if (!ids) {
        err_set(err, "out of memory for the step probes");
        goto done;
    }
    /* As a warmed-up server: the probes' arena and the largest step's buffers touched before
     * the first probe, so no probe pays for first-use page faults. */
    if (cpu_build_model(&m, &c, err) != 0 ||
        cpu_build_runstate(&rs, &m, cpu_pool_threads(pool), err) != 0 ||
        cpu_kv_init(&kv, &c, decode_blocks > prompt_blocks ? decode_blocks : prompt_blocks,
                    err) != 0 ||
        cpu_reserve_runstate(&rs, &m, n_ids, max_batch, max_batch,
                             max_prompt > 2 * max_context + 2 ? max_prompt : 2 * max_context + 2,
                             err) != 0)
        goto done;
    cpu_kv_touch(&kv);
    for (int i = 0; i < n_ids; i++)
        ids[i] = (int32_t)((i * 7919) % c.vocab_size);
    /* CALIB_PASSES passes over every probe, each taking its share of the probe's steps: a
     * slow spell of a shared machine then lands on every probe a little instead of on a few
     * probes wholly, which would bend the fit. */
    const int n_probes = n_batches * n_contexts + n_prompts;
    reps = calloc((size_t)n_probes, sizeof *reps);
    n_reps = calloc((size_t)n_probes, sizeof *n_reps);
    if (!reps || !n_reps) {
        err_set(err, "out of memory for the step probes");
        goto done;
    }
    for (int pass = 0; pass < CALIB_PASSES; pass++) {
        int k = 0;
        for (int b = 0; b < n_batches; b++)
            for (int x = 0; x < n_contexts; x++, k++)
                if (decode_probe(&m, &rs, &kv, pool, ids, batches[b], contexts[x], temperature,
                                 min_seconds / CALIB_PASSES, reps[k], &n_reps[k], &out[k],
                                 err) != 0)
                    goto done;
        for (int p = 0; p < n_prompts; p++, k++)
            if (prefill_probe(&m, &rs, &kv, pool, ids, prompts[p], reps[k], &n_reps[k], &out[k],
                              err) != 0)
                goto done;
    }
    for (int k = 0; k < n_probes; k++)
        out[k].ns = median_ns(reps[k], n_reps[k]);
    rc = 0;
done:
    free(reps);
    free(n_reps);
    free(ids);
    cpu_kv_free(&kv);
    cpu_free_runstate(&rs);
    cpu_free_model(&m);
    return rc;
}

void cpu_calib_cpu_name(char *out, size_t size)
{
    snprintf(out, size, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            const char *colon = strchr(line, ':');
            if (colon) {
                snprintf(out, size, "%s", colon + 2);
                out[strcspn(out, "\n")] = '\0';
            }
            break;
        }
    fclose(f);
}
