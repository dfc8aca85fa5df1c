/* cost — the roofline model of one engine step (formulas in cost.h; derivation and
 * sources in docs/explanation/cost-model.md).
 *
 * Choices this file makes that cost.h leaves open:
 * - Weight bytes read per step are the layers' linear weights plus the LM head. The
 *   embedding table is not counted: a step gathers one row per new token (8,000 x 4,096 x
 *   2 B = 66 MB for the lesson's prompt, 0.4% of the 16 GB of weights), it does not stream
 *   the whole 1 GB table. With tied embeddings the LM head is that table, read once.
 * - Resident weight bytes (what KV capacity subtracts from device memory) do include the
 *   embedding table when it is untied: it occupies memory even if a step barely reads it.
 * - RMSNorm weights (hidden x (2 L + 1) = 0.27 M params for Llama 3.1 8B, 0.003%) and the
 *   q/k/v biases some families carry are ignored; so are activations and the workspace
 *   vLLM reserves, which makes the KV capacity an upper bound.
 * - With params_override > 0 the override replaces every derived parameter count: each
 *   token costs 2 x override FLOPs (LM head included), weights weigh override x
 *   bytes_per_param both read and resident. Attention and KV traffic still come from the
 *   architecture: the lesson adds causal attention on top of its 16 GFLOP per token. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "engine/cost.h"

void cost_params_init(cost_params *p, const cost_gpu *gpu, const cost_arch *arch)
{
    memset(p, 0, sizeof *p);
    p->gpu = *gpu;
    p->arch = *arch;
    p->compute_efficiency = 1.0;
    p->bandwidth_efficiency = 1.0;
    p->step_overhead_ns = 0;
    p->bytes_per_param = 2.0;   /* BF16 weights */
    p->kv_bytes_per_elem = 2.0; /* BF16 KV cache (vLLM's "auto" for a BF16 model) */
    /* A device that says otherwise (a CPU profile: F32, a measured per-step overhead). */
    if (gpu->bytes_per_param > 0)
        p->bytes_per_param = gpu->bytes_per_param;
    if (gpu->kv_bytes_per_elem > 0)
        p->kv_bytes_per_elem = gpu->kv_bytes_per_elem;
    if (gpu->step_overhead_ns > 0)
        p->step_overhead_ns = gpu->step_overhead_ns;
    p->params_override = 0;
    if (cost_fit_applies(p))
        p->step_overhead_ns = (int64_t)llround(gpu->fit.step_ns);
}

bool cost_fit_applies(const cost_params *p)
{
    return p->gpu.fit.model[0] && strcmp(p->gpu.fit.model, p->arch.name) == 0 &&
           p->params_override <= 0;
}

double cost_fit_variable_ns(const cost_step_fit *fit, const cost_features *x)
{
    const double reads = fit->ctx_ns * x->decode_context;
    const double prompt = fit->token_ns * x->prompt_tokens + fit->pair_ns * x->prompt_pairs;
    if (!fit->overlap)
        return fit->seq_ns * x->samples + reads + prompt;
    /* the per-step term (the weights read) is the memory side's with the reads: the step
     * takes seq + max(step + reads, prompt), less the step its caller adds */
    const double memory = fit->step_ns + reads;
    return fit->seq_ns * x->samples + (prompt > memory ? prompt - fit->step_ns : reads);
}

/* Linear params of one decoder layer: attention projections plus the SwiGLU MLP. */
static double layer_linear_params(const cost_arch *a)
{
    const double hidden = a->hidden;
    const double q_dim = (double)a->n_heads * a->head_dim;     /* width of Q and of O's input */
    const double kv_dim = (double)a->n_kv_heads * a->head_dim; /* width of K and of V */
    const double attention = hidden * q_dim       /* wq: (hidden, q_dim) */
                             + 2 * hidden * kv_dim /* wk, wv: (hidden, kv_dim) each */
                             + q_dim * hidden;     /* wo: (q_dim, hidden) */
    /* SwiGLU: gate and up (hidden, ffn), down (ffn, hidden) */
    const double mlp = 3 * hidden * (double)a->ffn;
    return attention + mlp;
}

double cost_linear_params(const cost_params *p)
{
    if (p->params_override > 0)
        return p->params_override;
    return (double)p->arch.n_layers * layer_linear_params(&p->arch);
}

double cost_lm_head_params(const cost_params *p)
{
    if (p->params_override > 0)
        return 0; /* folded into the override */
    return (double)p->arch.hidden * p->arch.vocab; /* (hidden, vocab) */
}

double cost_weight_bytes(const cost_params *p)
{
    return (cost_linear_params(p) + cost_lm_head_params(p)) * p->bytes_per_param;
}

/* What the weights occupy in device memory (see the note at the top). */
static double resident_weight_bytes(const cost_params *p)
{
    if (p->params_override > 0)
        return p->params_override * p->bytes_per_param;
    const double embedding = p->arch.tied_embeddings ? 0 : (double)p->arch.vocab * p->arch.hidden;
    return cost_weight_bytes(p) + embedding * p->bytes_per_param;
}

double cost_kv_bytes_per_token(const cost_params *p)
{
    const double kv_dim = (double)p->arch.n_kv_heads * p->arch.head_dim;
    return 2 /* K and V */ * (double)p->arch.n_layers * kv_dim * p->kv_bytes_per_elem;
}

int64_t cost_kv_blocks(const cost_params *p, double gpu_memory_utilization, int block_size)
{
    if (block_size <= 0 || !(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1))
        return -1;
    const double budget_bytes = p->gpu.mem_bytes * gpu_memory_utilization;
    const double free_bytes = budget_bytes - resident_weight_bytes(p);
    const double block_bytes = cost_kv_bytes_per_token(p) * block_size;
    if (!(free_bytes > 0) || !(block_bytes > 0))
        return 0;
    return (int64_t)floor(free_bytes / block_bytes);
}

/* Running sums over a batch, so a decode step of any batch size needs no array. */
typedef struct step_sums {
    double tokens;          /* new tokens fed through the layers */
    double sampling_rows;   /* rows through the LM head */
    double attention_pairs; /* sum over new tokens of (position + 1): causal (query, key) pairs */
    double kv_read_tokens;  /* context + new, per sequence */
    double kv_write_tokens; /* new, per sequence */
    cost_features fit;      /* what a fitted step model counts */
} step_sums;

static void sums_add(step_sums *s, int new_tokens, int context, bool samples, double copies)
{
    if (new_tokens <= 0)
        return;
    const double c = new_tokens;
    const double past = context > 0 ? context : 0;
    s->tokens += copies * c;
    s->sampling_rows += samples ? copies : 0;
    /* positions past .. past + c - 1 attend to position + 1 keys each:
     * sum = c * past + c (c + 1) / 2 */
    s->attention_pairs += copies * (c * past + c * (c + 1) / 2);
    s->kv_read_tokens += copies * (past + c);
    s->kv_write_tokens += copies * c;
    s->fit.samples += samples ? copies : 0;
    if (new_tokens == 1) {
        s->fit.decode_context += copies * past;
    } else {
        s->fit.prompt_tokens += copies * c;
        s->fit.prompt_pairs += copies * (c * past + c * (c + 1) / 2);
    }
}

static int64_t sums_finish(const cost_params *p, const step_sums *s, cost_breakdown *out)
{
    cost_breakdown b;
    memset(&b, 0, sizeof b);
    if (s->tokens > 0) {
        const double d_model = (double)p->arch.n_heads * p->arch.head_dim; /* d of the formula */
        b.linear_flops = 2 * cost_linear_params(p) * s->tokens;
        b.lm_head_flops = 2 * cost_lm_head_params(p) * s->sampling_rows;
        b.attention_flops = (double)p->arch.n_layers * 4 * d_model * s->attention_pairs;
        b.weight_bytes = cost_weight_bytes(p);
        b.kv_bytes = cost_kv_bytes_per_token(p) * (s->kv_read_tokens + s->kv_write_tokens);

        if (cost_fit_applies(p)) { /* measured terms replace the roofline */
            b.compute_ns = cost_fit_variable_ns(&p->gpu.fit, &s->fit);
            b.total_ns = (int64_t)llround(b.compute_ns) + p->step_overhead_ns;
        } else {
            const double flops_per_s = p->gpu.peak_flops * p->compute_efficiency;
            const double bytes_per_s = p->gpu.mem_bandwidth * p->bandwidth_efficiency;
            if (p->gpu.attention_flops > 0) /* a device whose attention runs at its own rate */
                b.compute_ns =
                    ((b.linear_flops + b.lm_head_flops) / flops_per_s +
                     b.attention_flops / (p->gpu.attention_flops * p->compute_efficiency)) *
                    1e9;
            else
                b.compute_ns =
                    (b.linear_flops + b.lm_head_flops + b.attention_flops) / flops_per_s * 1e9;
            b.memory_ns = (b.weight_bytes + b.kv_bytes) / bytes_per_s * 1e9;
            const double bound_ns = b.compute_ns > b.memory_ns ? b.compute_ns : b.memory_ns;
            b.total_ns = (int64_t)llround(bound_ns) + p->step_overhead_ns;
        }
        if (b.total_ns < 1) /* a step takes time, whatever a fit or an override says */
            b.total_ns = 1;
    }
    /* An empty batch is no step: nothing is read, nothing waits, total 0. */
    if (out)
        *out = b;
    return b.total_ns;
}

/* The context a sequence's attention spans: its own, or under a unified cache the
 * occupied cells when they are more (they include its own). */
static int attended_context(int context, int64_t occupied_cells)
{
    if (occupied_cells > context)
        return occupied_cells > INT_MAX ? INT_MAX : (int)occupied_cells;
    return context;
}

static void sums_add_batch(step_sums *s, const cost_seq *seqs, int n, int64_t occupied_cells)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < n; i++)
        sums_add(s, seqs[i].new_tokens, attended_context(seqs[i].context, occupied_cells),
                 seqs[i].samples, 1);
}

void cost_step_features(const cost_seq *seqs, int n, cost_features *out)
{
    step_sums s;
    sums_add_batch(&s, seqs, n, 0);
    *out = s.fit;
}

int64_t cost_step_cells_ns(const cost_params *p, const cost_seq *seqs, int n,
                           int64_t occupied_cells, cost_breakdown *out)
{
    step_sums s;
    sums_add_batch(&s, seqs, n, occupied_cells);
    return sums_finish(p, &s, out);
}

int64_t cost_step_ns(const cost_params *p, const cost_seq *seqs, int n, cost_breakdown *out)
{
    return cost_step_cells_ns(p, seqs, n, 0, out);
}

int64_t cost_prefill_ns(const cost_params *p, int prompt_tokens, cost_breakdown *out)
{
    const cost_seq prompt = {prompt_tokens, 0, true};
    return cost_step_ns(p, &prompt, 1, out);
}

int64_t cost_decode_ns(const cost_params *p, int batch, int context, cost_breakdown *out)
{
    step_sums s;
    memset(&s, 0, sizeof s);
    if (batch > 0)
        sums_add(&s, 1, context, true, batch);
    return sums_finish(p, &s, out);
}

int64_t cost_injection_prefill_ns(const cost_params *p, int prompt_tokens, int decodes,
                                  int context, int chunk_budget, int64_t *longest_ns)
{
    return cost_injection_prefill_cells_ns(p, prompt_tokens, decodes, context, chunk_budget, 0,
                                           longest_ns);
}

int64_t cost_injection_prefill_cells_ns(const cost_params *p, int prompt_tokens, int decodes,
                                        int context, int chunk_budget, int64_t occupied_cells,
                                        int64_t *longest_ns)
{
    if (decodes < 0)
        decodes = 0;
    int chunk = prompt_tokens;
    if (chunk_budget > 0) {
        chunk = chunk_budget - decodes;
        if (chunk < 1)
            chunk = 1;
    }
    int64_t longest = 0, total = 0;
    for (int done = 0; done < prompt_tokens; done += chunk) {
        int c = prompt_tokens - done < chunk ? prompt_tokens - done : chunk;
        /* The batch as cost_step_ns would sum it: the prompt's chunk, then each decode. */
        step_sums s;
        memset(&s, 0, sizeof s);
        /* a unified cache: the cells before the prompt and the prompt's own so far */
        const int64_t occupied = occupied_cells > 0 ? occupied_cells + done : 0;
        sums_add(&s, c, attended_context(done, occupied), done + c == prompt_tokens, 1);
        for (int i = 0; i < decodes; i++)
            sums_add(&s, 1, attended_context(context, occupied), true, 1);
        int64_t ns = sums_finish(p, &s, NULL);
        total += ns;
        if (ns > longest)
            longest = ns;
    }
    if (longest_ns)
        *longest_ns = longest;
    return total;
}

int64_t cost_injection_step_ns(const cost_params *p, int prompt_tokens, int decodes, int context,
                               int chunk_budget)
{
    int64_t longest = 0;
    cost_injection_prefill_ns(p, prompt_tokens, decodes, context, chunk_budget, &longest);
    return longest;
}
