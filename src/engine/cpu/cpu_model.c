#include "engine/cpu/cpu_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/rng.h"
#include "engine/cpu/cpu_kernels.h"

/* Salt of the weight streams: tensor t of layer l draws from rng_hash3(seed, t, l ^ SALT). */
#define CPU_WEIGHT_SALT 0x77656967687473ULL /* "weights" */

cpu_dims cpu_config_dims(const cpu_config *c)
{
    cpu_dims d;
    d.q_dim = c->n_heads * c->head_dim;
    d.kv_dim = c->n_kv_heads * c->head_dim;
    d.qkv_dim = d.q_dim + 2 * d.kv_dim;
    d.kv_mul = c->n_heads / c->n_kv_heads;
    return d;
}

double cpu_weight_bytes(const cpu_config *c)
{
    const cpu_dims d = cpu_config_dims(c);
    const double dim = c->dim, layers = c->n_layers;
    const double per_layer = 2 * dim                     /* rms_att, rms_ffn */
                             + (double)d.qkv_dim * dim   /* wqkv */
                             + dim * d.q_dim             /* wo */
                             + 3 * dim * c->hidden_dim;  /* w13, w2 */
    const double params = 2 * (double)c->vocab_size * dim + dim + layers * per_layer;
    return params * sizeof(float);
}

/* Floats of an (n, k) matrix in panels of CPU_PANEL rows (cpu_panels_floats). */
static double panel_floats(double n, double k)
{
    return ceil(n / CPU_PANEL) * CPU_PANEL * k;
}

double cpu_panel_bytes(const cpu_config *c)
{
    const cpu_dims d = cpu_config_dims(c);
    const double dim = c->dim, ffn = c->hidden_dim;
    const double per_layer = panel_floats(d.qkv_dim, dim) + panel_floats(dim, d.q_dim) +
                             panel_floats(2 * ffn, dim) + panel_floats(dim, ffn);
    return (c->n_layers * per_layer + panel_floats(c->vocab_size, dim)) * sizeof(float);
}

int cpu_config_from_arch(const cost_arch *arch, uint64_t seed, double max_weight_bytes,
                         cpu_config *out, char *err)
{
    cpu_config c;
    memset(&c, 0, sizeof c);
    c.dim = arch->hidden;
    c.hidden_dim = arch->ffn;
    c.n_layers = arch->n_layers;
    c.n_heads = arch->n_heads;
    c.n_kv_heads = arch->n_kv_heads;
    c.head_dim = arch->head_dim;
    c.vocab_size = arch->vocab;
    c.max_seq_len = arch->max_position;
    c.rope_theta = 10000.0f;
    c.norm_eps = 1e-5f;
    c.seed = seed;
    if (c.dim < 1 || c.hidden_dim < 1 || c.n_layers < 1 || c.n_heads < 1 || c.n_kv_heads < 1 ||
        c.head_dim < 2 || c.vocab_size < 16 || c.max_seq_len < 1)
        return err_set(err, "model %s: every dimension must be positive (vocab >= 16)",
                       arch->name);
    if (c.head_dim % 2 != 0)
        return err_set(err, "model %s: head_dim %d must be even for rotary embeddings",
                       arch->name, c.head_dim);
    if (c.n_heads % c.n_kv_heads != 0)
        return err_set(err, "model %s: %d heads are not a multiple of %d KV heads", arch->name,
                       c.n_heads, c.n_kv_heads);
    const bool panels = cpu_isa_active() != CPU_ISA_PORTABLE;
    const double bytes = cpu_weight_bytes(&c) + (panels ? cpu_panel_bytes(&c) : 0);
    if (max_weight_bytes > 0 && bytes > max_weight_bytes)
        return err_set(err, "model %s needs %.1f GB of F32 weights%s, more than the cpu engine's "
                            "limit of %.1f GB (try --model tiny, small or ref-256)",
                       arch->name, bytes / 1e9, panels ? " (with their panels)" : "",
                       max_weight_bytes / 1e9);
    *out = c;
    return 0;
}

double cpu_rope_angle(const cpu_config *c, int pos, int pair)
{
    const double freq = pow((double)c->rope_theta, -2.0 * pair / c->head_dim);
    return pos * freq;
}

/* 64-byte aligned (one cache line, one AVX-512 vector), on the system's ordinary pages. The
 * weights do not ask for huge pages (MADV_HUGEPAGE): in the virtual machines the project runs
 * on, huge-paged weights stalled one decode step about every half second by several times its
 * length and slowed a long prefill, for no gain in the typical step (docs/explanation/
 * cpu-engine.md). */
static float *alloc_tensor(size_t n)
{
    const size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0)
        return NULL;
    return p;
}

/* Uniform in [-scale, scale), one splitmix stream per (tensor, layer). */
static void fill_uniform(float *t, size_t n, float scale, uint64_t seed, int tensor, int layer)
{
    uint64_t state = rng_hash3(seed, (uint64_t)tensor, (uint64_t)layer ^ CPU_WEIGHT_SALT);
    for (size_t i = 0; i < n; i++)
        t[i] = (float)(2.0 * rng_uniform(&state) - 1.0) * scale;
}

/* RMSNorm gains near 1, so the norms are not the identity yet keep activations O(1). */
static void fill_gain(float *t, size_t n, uint64_t seed, int tensor, int layer)
{
    fill_uniform(t, n, 0.1f, seed, tensor, layer);
    for (size_t i = 0; i < n; i++)
        t[i] += 1.0f;
}

int cpu_build_weights(cpu_weights *w, const cpu_config *c, char *err)
{
    memset(w, 0, sizeof *w);
    const cpu_dims d = cpu_config_dims(c);
    const size_t dim = (size_t)c->dim, layers = (size_t)c->n_layers;
    const size_t vocab = (size_t)c->vocab_size, ffn = (size_t)c->hidden_dim;
    const size_t qkv_rows = (size_t)d.qkv_dim, q_dim = (size_t)d.q_dim;

    w->token_embedding = alloc_tensor(vocab * dim);
    w->rms_att = alloc_tensor(layers * dim);
    w->rms_ffn = alloc_tensor(layers * dim);
    w->wqkv = alloc_tensor(layers * qkv_rows * dim);
    w->wo = alloc_tensor(layers * dim * q_dim);
    w->w13 = alloc_tensor(layers * 2 * ffn * dim);
    w->w2 = alloc_tensor(layers * dim * ffn);
    w->rms_final = alloc_tensor(dim);
    w->wcls = alloc_tensor(vocab * dim);
    if (!w->token_embedding || !w->rms_att || !w->rms_ffn || !w->wqkv || !w->wo || !w->w13 ||
        !w->w2 || !w->rms_final || !w->wcls) {
        cpu_free_weights(w);
        return err_set(err, "out of memory for %.1f MB of weights", cpu_weight_bytes(c) / 1e6);
    }
    const float in_dim = 1.0f / sqrtf((float)dim);
    const float in_q = 1.0f / sqrtf((float)q_dim);
    const float in_ffn = 1.0f / sqrtf((float)ffn);
    fill_uniform(w->token_embedding, vocab * dim, 1.0f, c->seed, 0, 0);
    for (size_t l = 0; l < layers; l++) {
        const int li = (int)l;
        fill_gain(w->rms_att + l * dim, dim, c->seed, 1, li);
        fill_gain(w->rms_ffn + l * dim, dim, c->seed, 2, li);
        fill_uniform(w->wqkv + l * qkv_rows * dim, qkv_rows * dim, in_dim, c->seed, 3, li);
        fill_uniform(w->wo + l * dim * q_dim, dim * q_dim, in_q, c->seed, 4, li);
        fill_uniform(w->w13 + l * 2 * ffn * dim, 2 * ffn * dim, in_dim, c->seed, 5, li);
        fill_uniform(w->w2 + l * dim * ffn, dim * ffn, in_ffn, c->seed, 6, li);
    }
    fill_gain(w->rms_final, dim, c->seed, 7, 0);
    /* A wider LM head than 1/sqrt(dim) gives logits of a few units: a peaked but not
     * degenerate next-token distribution, so temperature sampling has something to do. */
    fill_uniform(w->wcls, vocab * dim, 3.0f * in_dim, c->seed, 8, 0);
    return 0;
}

void cpu_free_weights(cpu_weights *w)
{
    free(w->token_embedding);
    free(w->rms_att);
    free(w->rms_ffn);
    free(w->wqkv);
    free(w->wo);
    free(w->w13);
    free(w->w2);
    free(w->rms_final);
    free(w->wcls);
    memset(w, 0, sizeof *w);
}
