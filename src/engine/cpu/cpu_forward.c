#include "engine/cpu/cpu_forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "engine/cpu/cpu_attn.h"
#include "engine/cpu/cpu_kernels.h"

/* Query rows of an attention tile: tokens x kv_mul, about this many. */
#define TILE_ROWS 64

/* A contiguous run of the step's sequences, their rows, sampling rows and attention tiles:
 * the whole step, or the part of a split step that one thread runs alone. */
struct cpu_step_part {
    int seq0, n_seqs;
    int row0, n_rows;
    int sample0, n_samples;
    int task0, n_tasks; /* in s->tasks */
};
typedef struct cpu_step_part step_part;

/* ---- model ----------------------------------------------------------------------- */

static float *alloc_floats(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)) != 0)
        return NULL;
    return p;
}

/* Each layer's (n, k) matrix of a tensor, in panels, one layer after the other. */
static float *pack_layers(const float *w, int layers, int n, int k)
{
    const size_t per_layer = cpu_panels_floats(n, k);
    float *p = alloc_floats((size_t)layers * per_layer);
    if (!p)
        return NULL;
    for (int l = 0; l < layers; l++)
        cpu_pack_panels(p + (size_t)l * per_layer, w + (size_t)l * n * k, n, k);
    return p;
}

static void free_panels(cpu_panels *p)
{
    free(p->wqkv);
    free(p->wo);
    free(p->w13);
    free(p->w2);
    free(p->wcls);
    memset(p, 0, sizeof *p);
}

int cpu_build_model(cpu_model *m, const cpu_config *c, char *err)
{
    memset(m, 0, sizeof *m);
    m->config = *c;
    m->dims = cpu_config_dims(c);
    if (cpu_build_weights(&m->weights, c, err) != 0)
        return -1;
    if (cpu_isa_active() == CPU_ISA_PORTABLE)
        return 0;
    const cpu_weights *w = &m->weights;
    const cpu_dims *d = &m->dims;
    cpu_panels *p = &m->panels;
    const int L = c->n_layers, dim = c->dim, ffn = c->hidden_dim;
    p->wqkv = pack_layers(w->wqkv, L, d->qkv_dim, dim);
    p->wo = pack_layers(w->wo, L, dim, d->q_dim);
    p->w13 = pack_layers(w->w13, L, 2 * ffn, dim);
    p->w2 = pack_layers(w->w2, L, dim, ffn);
    p->wcls = pack_layers(w->wcls, 1, c->vocab_size, dim);
    if (!p->wqkv || !p->wo || !p->w13 || !p->w2 || !p->wcls) {
        cpu_free_model(m);
        return err_set(err, "out of memory for %.1f MB of weights in panels",
                       cpu_panel_bytes(c) / 1e6);
    }
    return 0;
}

void cpu_free_model(cpu_model *m)
{
    cpu_free_weights(&m->weights);
    free_panels(&m->panels);
}

/* ---- run state ------------------------------------------------------------------- */

/* X of the widest product on panels: fewer rows than CPU_GEMM_SMALL_M, of k up to the
 * widest input (dim, q_dim or hidden_dim). */
static size_t xpack_floats(const cpu_model *m)
{
    int k = m->config.dim > m->dims.q_dim ? m->config.dim : m->dims.q_dim;
    k = k > m->config.hidden_dim ? k : m->config.hidden_dim;
    return cpu_gemm_xpack_floats(CPU_GEMM_SMALL_M - 1, k);
}

int cpu_build_runstate(cpu_runstate *s, const cpu_model *m, int n_threads, char *err)
{
    memset(s, 0, sizeof *s);
    const cpu_config *c = &m->config;
    s->n_threads = n_threads;
    s->tile_tokens = TILE_ROWS / m->dims.kv_mul > 0 ? TILE_ROWS / m->dims.kv_mul : 1;
    s->tile_rows = s->tile_tokens * m->dims.kv_mul;
    s->scratch_floats = cpu_attn_scratch_floats(s->tile_rows, c->head_dim);
    s->scratch = calloc((size_t)n_threads, sizeof *s->scratch);
    s->tile_q = calloc((size_t)n_threads * s->tile_rows, sizeof *s->tile_q);
    s->tile_out = calloc((size_t)n_threads * s->tile_rows, sizeof *s->tile_out);
    s->tile_pos = calloc((size_t)n_threads * s->tile_rows, sizeof *s->tile_pos);
    if (!s->scratch || !s->tile_q || !s->tile_out || !s->tile_pos)
        goto oom;
    for (int t = 0; t < n_threads; t++)
        if (!(s->scratch[t] = alloc_floats(s->scratch_floats)))
            goto oom;
    s->split_min_rows = CPU_FORWARD_SPLIT_ROWS;
    if (m->panels.wcls) {
        s->xpack_floats = xpack_floats(m);
        if (!(s->xpack = alloc_floats(s->xpack_floats * (size_t)n_threads)))
            goto oom;
    }
    if (!(s->parts = calloc((size_t)n_threads, sizeof *s->parts)))
        goto oom;
    if (n_threads > 1) {
        if (!(s->solo = calloc((size_t)n_threads, sizeof *s->solo)))
            goto oom;
        for (int t = 0; t < n_threads; t++)
            if (!(s->solo[t] = cpu_pool_create_solo(t, err)))
                goto oom;
    }
    return 0;
oom:
    cpu_free_runstate(s);
    return err_set(err, "out of memory for the run state");
}

static void free_activations(cpu_runstate *s)
{
    free(s->x);
    free(s->xb);
    free(s->qkv);
    free(s->att);
    free(s->hb);
    free(s->pos);
    free(s->row_seq);
    s->x = s->xb = s->qkv = s->att = s->hb = NULL;
    s->pos = s->row_seq = NULL;
    s->cap_tokens = 0;
}

void cpu_free_runstate(cpu_runstate *s)
{
    free_activations(s);
    free(s->xs);
    free(s->logits);
    free(s->row_start);
    free(s->rope);
    free(s->tasks);
    if (s->scratch)
        for (int t = 0; t < s->n_threads; t++)
            free(s->scratch[t]);
    free(s->scratch);
    free(s->tile_q);
    free(s->tile_out);
    free(s->tile_pos);
    free(s->xpack);
    if (s->solo)
        for (int t = 0; t < s->n_threads; t++)
            cpu_pool_free(s->solo[t]);
    free(s->solo);
    free(s->parts);
    memset(s, 0, sizeof *s);
}

/* Grow every per-step buffer to hold the step; buffers only grow. */
static int reserve(cpu_runstate *s, const cpu_model *m, int n_tokens, int n_samples, int n_seqs,
                   int max_pos, char *err)
{
    const cpu_config *c = &m->config;
    const cpu_dims *d = &m->dims;
    if (n_tokens > s->cap_tokens) {
        free_activations(s);
        const size_t rows = (size_t)n_tokens;
        s->x = alloc_floats(rows * c->dim);
        s->xb = alloc_floats(rows * c->dim);
        s->qkv = alloc_floats(rows * d->qkv_dim);
        s->att = alloc_floats(rows * d->q_dim);
        s->hb = alloc_floats(rows * 2 * c->hidden_dim);
        s->pos = malloc(rows * sizeof *s->pos);
        s->row_seq = malloc(rows * sizeof *s->row_seq);
        if (!s->x || !s->xb || !s->qkv || !s->att || !s->hb || !s->pos || !s->row_seq) {
            free_activations(s);
            return err_set(err, "out of memory for the activations of %d tokens", n_tokens);
        }
        s->cap_tokens = n_tokens;
    }
    if (n_samples > s->cap_samples) {
        free(s->xs);
        free(s->logits);
        s->xs = alloc_floats((size_t)n_samples * c->dim);
        s->logits = alloc_floats((size_t)n_samples * c->vocab_size);
        s->cap_samples = s->xs && s->logits ? n_samples : 0;
        if (!s->cap_samples)
            return err_set(err, "out of memory for the logits of %d rows", n_samples);
    }
    if (n_seqs > s->cap_seqs) {
        int32_t *grown = realloc(s->row_start, (size_t)n_seqs * sizeof *grown);
        if (!grown)
            return err_set(err, "out of memory for a batch of %d sequences", n_seqs);
        s->row_start = grown;
        s->cap_seqs = n_seqs;
    }
    if (max_pos >= s->cap_positions) {
        int cap = s->cap_positions ? s->cap_positions : 1024;
        while (cap <= max_pos)
            cap *= 2;
        const int pairs = c->head_dim / 2;
        float *rope = alloc_floats((size_t)cap * pairs * 2);
        if (!rope)
            return err_set(err, "out of memory for a RoPE table of %d positions", cap);
        for (int p = 0; p < cap; p++)
            for (int i = 0; i < pairs; i++) {
                const double angle = cpu_rope_angle(c, p, i);
                rope[((size_t)p * pairs + i) * 2] = (float)cos(angle);
                rope[((size_t)p * pairs + i) * 2 + 1] = (float)sin(angle);
            }
        free(s->rope);
        s->rope = rope;
        s->cap_positions = cap;
    }
    return 0;
}

int cpu_reserve_runstate(cpu_runstate *s, const cpu_model *m, int n_tokens, int n_samples,
                         int n_seqs, int max_positions, char *err)
{
    if (n_tokens < 1 || n_samples < 1 || n_seqs < 1)
        return err_set(err, "a step of %d tokens, %d samples and %d sequences is no step",
                       n_tokens, n_samples, n_seqs);
    if (reserve(s, m, n_tokens, n_samples, n_seqs, max_positions > 0 ? max_positions - 1 : 0,
                err) != 0)
        return -1;
    const cpu_config *c = &m->config;
    const cpu_dims *d = &m->dims;
    const size_t rows = (size_t)s->cap_tokens;
    memset(s->x, 0, rows * c->dim * sizeof(float));
    memset(s->xb, 0, rows * c->dim * sizeof(float));
    memset(s->qkv, 0, rows * d->qkv_dim * sizeof(float));
    memset(s->att, 0, rows * d->q_dim * sizeof(float));
    memset(s->hb, 0, rows * 2 * c->hidden_dim * sizeof(float));
    memset(s->pos, 0, rows * sizeof *s->pos);
    memset(s->row_seq, 0, rows * sizeof *s->row_seq);
    if (s->cap_samples > 0) {
        memset(s->xs, 0, (size_t)s->cap_samples * c->dim * sizeof(float));
        memset(s->logits, 0, (size_t)s->cap_samples * c->vocab_size * sizeof(float));
    }
    if (s->cap_seqs > 0)
        memset(s->row_start, 0, (size_t)s->cap_seqs * sizeof *s->row_start);
    return 0;
}

double cpu_runstate_bytes(const cpu_runstate *s, const cpu_model *m)
{
    const cpu_config *c = &m->config;
    const cpu_dims *d = &m->dims;
    const double row_floats = 2.0 * c->dim + d->qkv_dim + d->q_dim + 2.0 * c->hidden_dim;
    return (double)s->cap_tokens * (row_floats * sizeof(float) + 2 * sizeof(int32_t)) +
           (double)s->cap_samples * ((double)c->dim + c->vocab_size) * sizeof(float) +
           (double)s->cap_seqs * sizeof(int32_t) +
           (double)s->cap_positions * c->head_dim * sizeof(float) +
           (double)s->cap_tasks * sizeof(cpu_attn_task) +
           (double)s->n_threads * s->scratch_floats * sizeof(float) +
           (double)s->n_threads * s->xpack_floats * sizeof(float);
}

/* ---- row-wise sections ------------------------------------------------------------- */

typedef enum { ROWS_NORM_ATT, ROWS_ROPE_KV, ROWS_NORM_FFN, ROWS_SWIGLU } rows_op;

typedef struct rows_job {
    rows_op op;
    const cpu_model *m;
    cpu_runstate *s;
    cpu_kv *kv;
    const cpu_batch_seq *seqs;
    const int32_t *row_seq; /* sequence of each row */
    int layer;
    int n_rows;
    int row0; /* the part's first row: lo and hi count from it */
} rows_job;

/* Row `row` (position s->pos[row] of the sequence whose cache is kv_seq) for KV heads
 * [h0, h0 + n_kv): their query heads and keys roped, their K and V stored in the cache. */
static void rope_store(const cpu_model *m, cpu_runstate *s, cpu_kv *kv, int layer,
                       const cpu_kv_seq *kv_seq, size_t row, int h0, int n_kv)
{
    const cpu_config *c = &m->config;
    const cpu_dims *d = &m->dims;
    float *q = s->qkv + row * d->qkv_dim + (size_t)h0 * d->kv_mul * c->head_dim;
    float *k = s->qkv + row * d->qkv_dim + d->q_dim + (size_t)h0 * c->head_dim;
    const float *v = k + d->kv_dim;
    const float *cos_sin = s->rope + (size_t)s->pos[row] * c->head_dim;
    cpu_rope_fast(q, n_kv * d->kv_mul, c->head_dim, cos_sin);
    cpu_rope_fast(k, n_kv, c->head_dim, cos_sin);
    for (int h = 0; h < n_kv; h++)
        cpu_kv_write_head(kv, layer, kv_seq, s->pos[row], h0 + h, k + (size_t)h * c->head_dim,
                          v + (size_t)h * c->head_dim);
}

/* Rows [lo, hi) of the job's op: a share of its section (cpu_rows_run) or the prep of the
 * product that reads them (cpu_gemm_panels_prep). */
static void rows_do(void *arg, int lo, int hi, int thread)
{
    (void)thread;
    const rows_job *j = arg;
    const cpu_config *c = &j->m->config;
    const cpu_weights *w = &j->m->weights;
    cpu_runstate *s = j->s;
    for (int r = j->row0 + lo; r < j->row0 + hi; r++) {
        switch (j->op) {
        case ROWS_NORM_ATT:
        case ROWS_NORM_FFN: {
            const float *gain = (j->op == ROWS_NORM_ATT ? w->rms_att : w->rms_ffn) +
                                (size_t)j->layer * c->dim;
            cpu_rmsnorm_fast(s->xb + (size_t)r * c->dim, s->x + (size_t)r * c->dim, gain,
                             c->dim, c->norm_eps);
            break;
        }
        case ROWS_ROPE_KV:
            rope_store(j->m, s, j->kv, j->layer, j->seqs[j->row_seq[r]].kv, (size_t)r, 0,
                       c->n_kv_heads);
            break;
        case ROWS_SWIGLU: {
            float *hb = s->hb + (size_t)r * 2 * c->hidden_dim;
            cpu_swiglu_fast(hb, hb, hb + c->hidden_dim, c->hidden_dim);
            break;
        }
        }
    }
}

static void rows_run(cpu_pool *pool, rows_job *j, rows_op op, int layer)
{
    j->op = op;
    j->layer = layer;
    cpu_rows_run(pool, j->n_rows, rows_do, j);
}

/* The job's op as the prep of the product that reads its rows. */
static cpu_rows_fn rows_prep(rows_job *j, rows_op op, int layer)
{
    j->op = op;
    j->layer = layer;
    return rows_do;
}

/* ---- attention ---------------------------------------------------------------------- */

/* The step's attention section for one layer (and, its layer and first tile yet unset, the
 * step that forward_part and a split step's parts run from). */
typedef struct attn_job {
    const cpu_model *m;
    cpu_runstate *s;
    cpu_kv *kv;
    const cpu_batch_seq *seqs;
    int layer;
    /* Each tile ropes its rows' Q and K of its head and stores that K and V first (no
     * section of their own): when every sequence has one tile per KV head, so that no tile
     * reads a key another tile of the step writes. */
    bool rope_kv;
    int task0; /* the part's first tile: task numbers count from it */
} attn_job;

/* The tile's rows roped and their K and V stored, for its KV head only. */
static void attn_tile_rope_kv(const attn_job *j, const cpu_attn_task *at)
{
    for (int t = at->token0; t < at->token0 + at->n_tokens; t++)
        rope_store(j->m, j->s, j->kv, j->layer, j->seqs[at->seq].kv,
                   (size_t)j->s->row_start[at->seq] + t, at->kv_head, 1);
}

/* next: the tile this thread computes after this one (cpu_pool_run_ahead), whose first blocks
 * the kernel prefetches as it finishes this one. */
static void attn_task(void *arg, int task, int next, int thread)
{
    const attn_job *j = arg;
    cpu_runstate *s = j->s;
    const cpu_config *c = &j->m->config;
    const cpu_dims *d = &j->m->dims;
    const cpu_attn_task *at = &s->tasks[j->task0 + task];
    const cpu_batch_seq *seq = &j->seqs[at->seq];
    if (j->rope_kv)
        attn_tile_rope_kv(j, at);
    const float **q = s->tile_q + (size_t)thread * s->tile_rows;
    float **out = s->tile_out + (size_t)thread * s->tile_rows;
    int32_t *pos = s->tile_pos + (size_t)thread * s->tile_rows;
    int n = 0;
    for (int t = at->token0; t < at->token0 + at->n_tokens; t++) {
        const size_t row = (size_t)s->row_start[at->seq] + t;
        for (int hh = 0; hh < d->kv_mul; hh++, n++) {
            const int head = at->kv_head * d->kv_mul + hh;
            q[n] = s->qkv + row * d->qkv_dim + (size_t)head * c->head_dim;
            out[n] = s->att + row * d->q_dim + (size_t)head * c->head_dim;
            pos[n] = seq->context + t;
        }
    }
    cpu_attn_ahead ahead = {0};
    if (next >= 0) {
        const cpu_attn_task *nt = &s->tasks[j->task0 + next];
        const cpu_batch_seq *ns = &j->seqs[nt->seq];
        ahead = (cpu_attn_ahead){
            .k = cpu_kv_head_k(j->kv, j->layer, nt->kv_head),
            .v = cpu_kv_head_v(j->kv, j->layer, nt->kv_head),
            .block_table = ns->kv->blocks,
            .n_blocks = (ns->context + nt->token0 + nt->n_tokens - 1) / CPU_KV_BLOCK + 1,
        };
    }
    const cpu_attn_tile tile = {
        .k = cpu_kv_head_k(j->kv, j->layer, at->kv_head),
        .v = cpu_kv_head_v(j->kv, j->layer, at->kv_head),
        .head_dim = c->head_dim,
        .block_stride = j->kv->block_stride,
        .block_table = seq->kv->blocks,
        .n_rows = n,
        .q = q,
        .out = out,
        .pos = pos,
        .scale = 1.0f / sqrtf((float)c->head_dim),
        .ahead = ahead,
    };
    cpu_attn_run(&tile, s->scratch[thread]);
}

static void attn_task_alone(void *arg, int task, int thread)
{
    attn_task(arg, task, -1, thread);
}

static int by_cost_desc(const void *a, const void *b)
{
    const double ca = ((const cpu_attn_task *)a)->cost, cb = ((const cpu_attn_task *)b)->cost;
    return ca < cb ? 1 : ca > cb ? -1 : 0;
}

/* The step's attention tiles (the same for every layer), in sequence order, each part's
 * heaviest first. */
static int plan_attention(cpu_runstate *s, const cpu_model *m, const cpu_batch_seq *seqs,
                          int n_seqs, step_part *parts, int n_parts, char *err)
{
    int n = 0;
    for (int i = 0; i < n_seqs; i++)
        n += (seqs[i].new_tokens + s->tile_tokens - 1) / s->tile_tokens * m->config.n_kv_heads;
    if (n > s->cap_tasks) {
        cpu_attn_task *grown = realloc(s->tasks, (size_t)n * sizeof *grown);
        if (!grown)
            return err_set(err, "out of memory for %d attention tiles", n);
        s->tasks = grown;
        s->cap_tasks = n;
    }
    int k = 0;
    for (int g = 0; g < n_parts; g++) {
        step_part *pt = &parts[g];
        pt->task0 = k;
        for (int i = pt->seq0; i < pt->seq0 + pt->n_seqs; i++)
            for (int t0 = 0; t0 < seqs[i].new_tokens; t0 += s->tile_tokens) {
                const int left = seqs[i].new_tokens - t0;
                const int tokens = left < s->tile_tokens ? left : s->tile_tokens;
                for (int h = 0; h < m->config.n_kv_heads; h++)
                    s->tasks[k++] = (cpu_attn_task){
                        i, h, t0, tokens, (double)tokens * (seqs[i].context + t0 + tokens)};
            }
        pt->n_tasks = k - pt->task0;
        qsort(s->tasks + pt->task0, (size_t)pt->n_tasks, sizeof *s->tasks, by_cost_desc);
    }
    return 0;
}

/* ---- splitting a step ----------------------------------------------------------------- */

/* A byte of K and V the attention reads costs about as much as this many FLOPs of the
 * products: one thread on the AVX-512 kernels runs the products on panels at about
 * 200 GFLOP/s and reads a decode's scattered K and V at about 20 GB/s (`bench_cpu --threads
 * 1`). The AVX2 kernels compute at about half that rate and read about as fast, so there
 * the keys weigh more than counted; sequences of equal contexts split at equal rows either
 * way. */
#define SPLIT_FLOPS_PER_KV_BYTE 10.0
/* A split whose heaviest part costs more than this times the mean is not taken. */
#define SPLIT_BALANCE 1.1

/* A sequence's cost in the step, in FLOPs: its rows through the layers' products (and the
 * LM head if it samples) and the keys its attention reads. */
static double seq_cost(const cpu_model *m, const cpu_batch_seq *q)
{
    const cpu_config *c = &m->config;
    const cpu_dims *d = &m->dims;
    const double row = 2.0 * c->n_layers *
                           ((double)c->dim * (d->qkv_dim + d->q_dim + 3.0 * c->hidden_dim)) +
                       (q->samples ? 2.0 * c->dim * c->vocab_size : 0.0);
    const double keys = (double)q->new_tokens * (q->context + q->new_tokens);
    return q->new_tokens * row +
           keys * cpu_kv_bytes(c, 1) / CPU_KV_BLOCK * SPLIT_FLOPS_PER_KV_BYTE;
}

/* The step's parts into s->parts: one per thread when the step splits (cpu_forward.h), else
 * one, the whole step. Returns their number; fills each one's sequences, rows and samples. */
static int plan_parts(cpu_runstate *s, const cpu_model *m, const cpu_batch_seq *seqs,
                      int n_seqs, int n_tokens, int threads, bool short_rows)
{
    step_part *parts = s->parts;
    int n_parts = 1;
    if (threads >= 2 && s->solo && threads <= s->n_threads && short_rows &&
        s->split_min_rows > 0 && n_tokens / threads >= s->split_min_rows) {
        double total = 0, acc = 0, worst = 0;
        for (int i = 0; i < n_seqs; i++)
            total += seq_cost(m, &seqs[i]);
        int i = 0;
        for (int g = 0; g < threads; g++) {
            const double goal = total * (g + 1) / threads;
            double part = 0;
            parts[g].seq0 = i;
            /* take a sequence while that brings the running sum nearer the part's goal */
            for (; i < n_seqs; i++) {
                const double cost = seq_cost(m, &seqs[i]);
                if (g < threads - 1 && i > parts[g].seq0 && acc + cost - goal > goal - acc)
                    break;
                acc += cost;
                part += cost;
            }
            parts[g].n_seqs = i - parts[g].seq0;
            worst = part > worst ? part : worst;
        }
        n_parts = threads;
        for (int g = 0; g < threads; g++)
            if (parts[g].n_seqs == 0)
                n_parts = 1;
        if (worst > SPLIT_BALANCE * total / threads)
            n_parts = 1;
    }
    if (n_parts == 1) {
        parts[0].seq0 = 0;
        parts[0].n_seqs = n_seqs;
    }
    int sample = 0;
    for (int g = 0; g < n_parts; g++) {
        step_part *pt = &parts[g];
        pt->row0 = s->row_start[pt->seq0];
        pt->n_rows = 0;
        pt->sample0 = sample;
        for (int i = pt->seq0; i < pt->seq0 + pt->n_seqs; i++) {
            pt->n_rows += seqs[i].new_tokens;
            sample += seqs[i].samples ? 1 : 0;
        }
        pt->n_samples = sample - pt->sample0;
    }
    return n_parts;
}

/* ---- the step ------------------------------------------------------------------------ */

/* Layer l's (n, k) matrix of a tensor in panels, or NULL. */
static const float *layer_panels(const float *panels, int l, int n, int k)
{
    return panels ? panels + (size_t)l * cpu_panels_floats(n, k) : NULL;
}

/* The whole pass over one part of the step (step: the step's attention job, its layer and
 * first tile yet to set): its sections on pool, its products' X rearranged in the slice of
 * the calling thread (thread). */
static void forward_part(const attn_job *step, cpu_pool *pool, const step_part *pt, int thread)
{
    const cpu_model *m = step->m;
    cpu_runstate *s = step->s;
    float *xpack = s->xpack ? s->xpack + (size_t)thread * s->xpack_floats : NULL;
    const cpu_config *c = &m->config;
    const cpu_dims *d = &m->dims;
    const cpu_weights *w = &m->weights;
    const cpu_panels *p = &m->panels;
    const int dim = c->dim, ffn = c->hidden_dim, n = pt->n_rows;
    const size_t r0 = (size_t)pt->row0;
    float *x = s->x + r0 * dim, *xb = s->xb + r0 * dim, *qkv = s->qkv + r0 * d->qkv_dim;
    float *att = s->att + r0 * d->q_dim, *hb = s->hb + r0 * 2 * ffn;
    rows_job rj = {ROWS_NORM_ATT, m, s, step->kv, step->seqs, s->row_seq, 0, n, pt->row0};
    attn_job aj = *step;
    aj.task0 = pt->task0;
    const bool rope_kv = aj.rope_kv;
    for (int l = 0; l < c->n_layers; l++) {
        const float *wqkv = w->wqkv + (size_t)l * d->qkv_dim * dim;
        const float *wo = w->wo + (size_t)l * dim * d->q_dim;
        const float *w13 = w->w13 + (size_t)l * 2 * ffn * dim;
        const float *w2 = w->w2 + (size_t)l * dim * ffn;
        const float *pqkv = layer_panels(p->wqkv, l, d->qkv_dim, dim);
        const float *po = layer_panels(p->wo, l, dim, d->q_dim);
        const float *p13 = layer_panels(p->w13, l, 2 * ffn, dim);
        const float *p2 = layer_panels(p->w2, l, dim, ffn);
        /* attention sublayer: x += wo . attention(rope(wqkv . rmsnorm(x))) */
        cpu_gemm_panels_prep(pool, qkv, d->qkv_dim, xb, dim, wqkv, pqkv, n, d->qkv_dim, dim,
                             false, xpack, rows_prep(&rj, ROWS_NORM_ATT, l), &rj);
        if (!rope_kv)
            rows_run(pool, &rj, ROWS_ROPE_KV, l);
        aj.layer = l;
        if (rope_kv) /* short tiles: each prefetches the next one's first blocks */
            cpu_pool_run_ahead(pool, pt->n_tasks, attn_task, &aj);
        else
            cpu_pool_run(pool, pt->n_tasks, attn_task_alone, &aj);
        cpu_gemm_panels(pool, x, dim, att, d->q_dim, wo, po, n, dim, d->q_dim, true, xpack);
        /* feed-forward sublayer: x += w2 . (silu(w1 . xb) * (w3 . xb)), xb = rmsnorm(x) */
        cpu_gemm_panels_prep(pool, hb, 2 * ffn, xb, dim, w13, p13, n, 2 * ffn, dim, false,
                             xpack, rows_prep(&rj, ROWS_NORM_FFN, l), &rj);
        cpu_gemm_panels_prep(pool, x, dim, hb, 2 * ffn, w2, p2, n, dim, ffn, true, xpack,
                             rows_prep(&rj, ROWS_SWIGLU, l), &rj);
    }
    if (pt->n_samples == 0)
        return;
    /* LM head for the last row of each sampling sequence only. */
    int k = pt->sample0;
    for (int i = pt->seq0; i < pt->seq0 + pt->n_seqs; i++) {
        if (!step->seqs[i].samples)
            continue;
        const size_t last = (size_t)s->row_start[i] + step->seqs[i].new_tokens - 1;
        cpu_rmsnorm_fast(s->xs + (size_t)k * dim, s->x + last * dim, w->rms_final, dim,
                         c->norm_eps);
        k++;
    }
    cpu_gemm_panels(pool, s->logits + (size_t)pt->sample0 * c->vocab_size, c->vocab_size,
                    s->xs + (size_t)pt->sample0 * dim, dim, w->wcls, p->wcls, pt->n_samples,
                    c->vocab_size, dim, false, xpack);
}

/* One part of a split step (arg: the step's attention job), on the thread that claimed it,
 * alone. */
static void part_task(void *arg, int part, int thread)
{
    const attn_job *step = arg;
    cpu_runstate *s = step->s;
    forward_part(step, s->solo[thread], &s->parts[part], thread);
}

int cpu_forward(const cpu_model *m, cpu_runstate *s, cpu_kv *kv, cpu_pool *pool,
                const cpu_batch_seq *seqs, int n_seqs, char *err)
{
    const cpu_config *c = &m->config;
    const cpu_weights *w = &m->weights;
    const int dim = c->dim;
    int n_tokens = 0, n_samples = 0, max_pos = 0;
    for (int i = 0; i < n_seqs; i++) {
        const int last = seqs[i].context + seqs[i].new_tokens - 1;
        if (seqs[i].new_tokens < 1 || seqs[i].context < 0)
            return err_set(err, "sequence %d of the step feeds %d tokens", i, seqs[i].new_tokens);
        if (last >= c->max_seq_len)
            return err_set(err, "position %d is past the model's %d positions", last,
                           c->max_seq_len);
        n_tokens += seqs[i].new_tokens;
        n_samples += seqs[i].samples;
        max_pos = last > max_pos ? last : max_pos;
    }
    if (n_tokens == 0)
        return 0;
    if (reserve(s, m, n_tokens, n_samples, n_seqs, max_pos, err) != 0)
        return -1;
    /* Rows: each sequence's new tokens, in batch order; the embedding of each. */
    int row = 0;
    bool short_rows = true;
    for (int i = 0; i < n_seqs; i++) {
        s->row_start[i] = row;
        short_rows = short_rows && seqs[i].new_tokens <= s->tile_tokens;
        for (int t = 0; t < seqs[i].new_tokens; t++, row++) {
            const int32_t token = seqs[i].tokens[t];
            const int32_t id = token >= 0 && token < c->vocab_size ? token : 0;
            memcpy(s->x + (size_t)row * dim, w->token_embedding + (size_t)id * dim,
                   (size_t)dim * sizeof(float));
            s->pos[row] = seqs[i].context + t;
            s->row_seq[row] = i;
        }
    }
    const int n_parts =
        plan_parts(s, m, seqs, n_seqs, n_tokens, cpu_pool_threads(pool), short_rows);
    if (plan_attention(s, m, seqs, n_seqs, s->parts, n_parts, err) != 0)
        return -1;
    s->last_parts = n_parts;
    attn_job step = {m, s, kv, seqs, 0, short_rows, 0};
    if (n_parts == 1)
        forward_part(&step, pool, s->parts, 0);
    else
        cpu_pool_run(pool, n_parts, part_task, &step);
    return 0;
}

/* ---- reference ----------------------------------------------------------------------- */

int cpu_build_ref_state(cpu_ref_state *s, const cpu_config *c, int seq_len, char *err)
{
    memset(s, 0, sizeof *s);
    const cpu_dims d = cpu_config_dims(c);
    s->seq_len = seq_len;
    s->x = calloc((size_t)c->dim, sizeof(float));
    s->xb = calloc((size_t)c->dim, sizeof(float));
    s->xb2 = calloc((size_t)c->dim, sizeof(float));
    s->hb = calloc((size_t)c->hidden_dim, sizeof(float));
    s->hb2 = calloc((size_t)c->hidden_dim, sizeof(float));
    s->q = calloc((size_t)d.q_dim, sizeof(float));
    s->att = calloc((size_t)seq_len, sizeof(float));
    s->logits = calloc((size_t)c->vocab_size, sizeof(float));
    s->key_cache = calloc((size_t)c->n_layers * seq_len * d.kv_dim, sizeof(float));
    s->value_cache = calloc((size_t)c->n_layers * seq_len * d.kv_dim, sizeof(float));
    if (!s->x || !s->xb || !s->xb2 || !s->hb || !s->hb2 || !s->q || !s->att || !s->logits ||
        !s->key_cache || !s->value_cache) {
        cpu_free_ref_state(s);
        return err_set(err, "out of memory for the reference state");
    }
    return 0;
}

void cpu_free_ref_state(cpu_ref_state *s)
{
    free(s->x);
    free(s->xb);
    free(s->xb2);
    free(s->hb);
    free(s->hb2);
    free(s->q);
    free(s->att);
    free(s->logits);
    free(s->key_cache);
    free(s->value_cache);
    memset(s, 0, sizeof *s);
}

float *cpu_ref_forward(const cpu_model *m, cpu_ref_state *s, int token, int pos)
{
    const cpu_config *p = &m->config;
    const cpu_weights *w = &m->weights;
    const int dim = p->dim, hidden_dim = p->hidden_dim, head_size = p->head_dim;
    const int q_dim = p->n_heads * head_size, kv_dim = p->n_kv_heads * head_size;
    const int qkv_dim = q_dim + 2 * kv_dim, kv_mul = p->n_heads / p->n_kv_heads;
    float *x = s->x;
    memcpy(x, w->token_embedding + (size_t)token * dim, (size_t)dim * sizeof(float));

    for (int l = 0; l < p->n_layers; l++) {
        const float *wq = w->wqkv + (size_t)l * qkv_dim * dim; /* (q_dim, dim) */
        const float *wk = wq + (size_t)q_dim * dim;            /* (kv_dim, dim) */
        const float *wv = wk + (size_t)kv_dim * dim;           /* (kv_dim, dim) */
        const float *w1 = w->w13 + (size_t)l * 2 * hidden_dim * dim; /* (hidden_dim, dim) */
        const float *w3 = w1 + (size_t)hidden_dim * dim;             /* (hidden_dim, dim) */
        float *k = s->key_cache + ((size_t)l * s->seq_len + pos) * kv_dim;
        float *v = s->value_cache + ((size_t)l * s->seq_len + pos) * kv_dim;

        cpu_rmsnorm(s->xb, x, w->rms_att + (size_t)l * dim, dim, p->norm_eps);
        cpu_matmul_naive(s->q, s->xb, wq, dim, q_dim);
        cpu_matmul_naive(k, s->xb, wk, dim, kv_dim);
        cpu_matmul_naive(v, s->xb, wv, dim, kv_dim);
        cpu_rope_naive(s->q, p->n_heads, head_size, pos, p->rope_theta);
        cpu_rope_naive(k, p->n_kv_heads, head_size, pos, p->rope_theta);
        /* The cache holds what the paged one holds: each element rounded to a half. */
        for (int i = 0; i < kv_dim; i++) {
            k[i] = cpu_half_round(k[i]);
            v[i] = cpu_half_round(v[i]);
        }

        for (int h = 0; h < p->n_heads; h++) {
            const size_t kv_off = (size_t)l * s->seq_len * kv_dim + (size_t)(h / kv_mul) * head_size;
            cpu_attn_naive(s->xb + h * head_size, s->q + h * head_size, s->key_cache + kv_off,
                           s->value_cache + kv_off, pos + 1, kv_dim, head_size,
                           1.0f / sqrtf((float)head_size), s->att);
        }
        cpu_matmul_naive(s->xb2, s->xb, w->wo + (size_t)l * dim * q_dim, q_dim, dim);
        for (int i = 0; i < dim; i++)
            x[i] += s->xb2[i];

        cpu_rmsnorm(s->xb, x, w->rms_ffn + (size_t)l * dim, dim, p->norm_eps);
        cpu_matmul_naive(s->hb, s->xb, w1, dim, hidden_dim);
        cpu_matmul_naive(s->hb2, s->xb, w3, dim, hidden_dim);
        cpu_swiglu(s->hb, s->hb, s->hb2, hidden_dim);
        cpu_matmul_naive(s->xb, s->hb, w->w2 + (size_t)l * dim * hidden_dim, hidden_dim, dim);
        for (int i = 0; i < dim; i++)
            x[i] += s->xb[i];
    }
    cpu_rmsnorm(x, x, w->rms_final, dim, p->norm_eps);
    cpu_matmul_naive(s->logits, x, w->wcls, dim, p->vocab_size);
    return s->logits;
}
