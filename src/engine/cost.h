/* cost — the roofline cost model of one engine step, and its catalog of GPUs and models.
 *
 * A step is a ragged batch: for each request, how many new tokens it feeds (1 for a
 * decode, a chunk or a whole prompt for a prefill), how many tokens of context it already
 * has in the KV cache, and whether it samples (its last row goes through the LM head).
 *
 *   FLOPs  = 2 x linear_params x tokens                       (every token of the step)
 *          + 2 x lm_head_params x sampling rows                (LM head only where sampled)
 *          + L x 4 x d x sum over new tokens of (position + 1) (causal attention)
 *            where d = n_heads x head_dim; for a fresh prompt of n tokens this is
 *            L x 2 x d x n (n + 1) ~= 2 n^2 d L, the lesson's figure; a chunk of c tokens over
 *            p tokens of context gives L x 4 d (c p + c (c + 1) / 2).
 *   bytes  = weight_bytes (read once per step) + KV read (context + new, every layer)
 *          + KV write (new tokens, every layer)
 *   time   = max(FLOPs / (peak_flops x compute_efficiency),     (attention FLOPs at
 *                                                                attention_flops when the
 *                                                                device gives one)
 *                bytes / (mem_bandwidth x bandwidth_efficiency)) + step_overhead
 *
 * A fitted step model (a hardware profile's step_model, fitted by `stallscope calibrate` from
 * measured steps, fit.h) replaces the roofline for the model it was fitted on:
 *   time   = step_overhead                          (per step; the fit's step_ns)
 *          + seq_ns   x sampling rows               (a decode, the last chunk of a prompt)
 *          + ctx_ns   x context tokens the decodes read (sum over 1-token items)
 *          + token_ns x prompt tokens fed           (items of 2 tokens or more)
 *          + pair_ns  x causal (query, key) pairs of those prompt tokens
 * With overlap (a device that reads under its compute, as a GPU's roofline does: calibrate
 * --target finds it from the interference probes) the memory side, step_ns + the ctx_ns
 * term, and the compute side, the token_ns and pair_ns terms, are not added: the larger
 * counts (time = seq_ns x rows + max(memory, compute)). A decode-only step costs the same
 * either way; a long prompt's step no longer pays the weights' read on top of its compute.
 * For any other model the profile's rates and the roofline above apply.
 *
 * When params_override > 0 (the lesson's arithmetic: Llama 3.1 8B taken as 8e9 params, so
 * 2 x 8e9 = 16 GFLOP per token) every token costs 2 x params_override FLOPs, LM head
 * included, and the weights weigh params_override x bytes_per_param.
 */
#ifndef STALLSCOPE_COST_H
#define STALLSCOPE_COST_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The step model of a hardware profile (see the top). model "" : none. ns per unit. */
typedef struct cost_step_fit {
    char model[64]; /* the model (cost_arch name) the terms were measured on */
    double step_ns;  /* per step */
    double seq_ns;   /* per sampling row */
    double ctx_ns;   /* per context token read by a decode */
    double token_ns; /* per prompt token */
    double pair_ns;  /* per causal (query, key) pair among prompt tokens */
    bool overlap;    /* max(ctx term, prompt terms) rather than their sum (see the top) */
} cost_step_fit;

typedef struct cost_gpu {
    char name[32];
    double peak_flops;    /* dense BF16 FLOP/s, no sparsity */
    double mem_bandwidth; /* HBM bytes/s */
    double mem_bytes;     /* device memory, bytes (KV capacity) */
    const char *source;   /* where the figures come from */
    /* Devices that are not BF16 GPUs (a CPU's hardware profile, `stallscope calibrate`);
     * 0 everywhere keeps the GPU behaviour above. */
    double attention_flops;   /* FLOP/s of causal attention; 0: peak_flops */
    double bytes_per_param;   /* weight bytes per parameter; 0: 2 (BF16) */
    double kv_bytes_per_elem; /* KV-cache bytes per element; 0: 2 (BF16) */
    int64_t step_overhead_ns; /* fixed time per step; 0: none (--step-overhead overrides) */
    int threads;              /* CPU threads the figures were measured with; 0: n/a */
    cost_step_fit fit;        /* a profile's fitted step model; model "" : none */
} cost_gpu;

typedef struct cost_arch {
    char name[64];
    int n_layers;
    int hidden;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int ffn;
    int vocab;
    int max_position; /* context length the model supports */
    bool tied_embeddings;
    const char *source;
} cost_arch;

typedef struct cost_params {
    cost_gpu gpu;
    cost_arch arch;
    double compute_efficiency;   /* 0 < e <= 1, default 1.0 */
    double bandwidth_efficiency; /* 0 < e <= 1, default 1.0 */
    int64_t step_overhead_ns;    /* added to every step, default 0 */
    double bytes_per_param;      /* 2 (BF16) */
    double kv_bytes_per_elem;    /* 2 (BF16) */
    double params_override;      /* 0: derive from arch; >0: lesson-style 2 x params */
} cost_params;

typedef struct cost_seq {
    int new_tokens; /* tokens this request feeds in this step */
    int context;    /* tokens already in its KV cache before this step */
    bool samples;   /* its last row goes through the LM head */
} cost_seq;

/* What the fitted step model counts in a step (see the top). */
typedef struct cost_features {
    double samples;        /* sampling rows */
    double decode_context; /* sum of the contexts of 1-token items */
    double prompt_tokens;  /* new tokens of items feeding 2 or more */
    double prompt_pairs;   /* their causal (query, key) pairs: n c + n (n + 1) / 2 */
} cost_features;

typedef struct cost_breakdown {
    double linear_flops;
    double lm_head_flops;
    double attention_flops;
    double weight_bytes;
    double kv_bytes;
    double compute_ns; /* FLOPs / effective peak */
    double memory_ns;  /* bytes / effective bandwidth */
    int64_t total_ns;  /* max(compute, memory) + overhead, rounded to ns */
} cost_breakdown;

/* Catalog look-ups: 0 and *out filled, or -1 with err listing the known names. */
int cost_gpu_find(const char *name, cost_gpu *out, char *err);
int cost_arch_find(const char *name, cost_arch *out, char *err);
/* Read a hardware profile (profile.h: the format, both versions). */
int cost_gpu_from_profile(const char *path, cost_gpu *out, char *err);
/* Read a Hugging Face config.json of a Llama-family model (hidden_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads, head_dim?, intermediate_size, vocab_size,
 * max_position_embeddings, tie_word_embeddings). */
int cost_arch_from_hf_config(const char *path, cost_arch *out, char *err);
/* Print the catalog (names and figures) for --help and errors. */
void cost_catalog_print(FILE *out);

/* Defaults: efficiencies 1.0, overhead 0, BF16 weights and KV, no override. A device with a
 * step model fitted on arch: step_overhead_ns = the fit's step_ns. */
void cost_params_init(cost_params *p, const cost_gpu *gpu, const cost_arch *arch);

/* Derived sizes. */
double cost_linear_params(const cost_params *p); /* per-token linear params, no LM head */
double cost_lm_head_params(const cost_params *p);
double cost_weight_bytes(const cost_params *p);
double cost_kv_bytes_per_token(const cost_params *p); /* all layers, K and V */
/* KV-cache capacity in 16-token blocks for a given memory utilisation (vLLM's 0.9). */
int64_t cost_kv_blocks(const cost_params *p, double gpu_memory_utilization, int block_size);

/* The step model fitted on this very model applies (else the roofline does). */
bool cost_fit_applies(const cost_params *p);
/* The fitted model's features of a step, and its time for them (without the per-step term). */
void cost_step_features(const cost_seq *seqs, int n, cost_features *out);
double cost_fit_variable_ns(const cost_step_fit *fit, const cost_features *x);

/* Duration of one step over n seqs (breakdown may be NULL). With a fitted step model the
 * breakdown's compute_ns is the fitted variable part and memory_ns 0. Each sequence's
 * attention spans its own context (a paged KV cache: vLLM, SGLang). */
int64_t cost_step_ns(const cost_params *p, const cost_seq *seqs, int n, cost_breakdown *out);
/* The same step in a unified KV cache (llama.cpp's server: every slot's cells in one cache,
 * sched.h "KV layout") holding occupied_cells cells before the step: each sequence's
 * attention spans them instead of its own context (the KQ product covers the occupied part
 * of the cache; masking the other slots' cells saves nothing), so the context terms above
 * (attention pairs, KV read, a fitted model's decode context and pairs) take
 * max(context, occupied_cells). occupied_cells 0: cost_step_ns. */
int64_t cost_step_cells_ns(const cost_params *p, const cost_seq *seqs, int n,
                           int64_t occupied_cells, cost_breakdown *out);

/* Convenience: one fresh prompt of n tokens prefilled alone (samples its first token). */
int64_t cost_prefill_ns(const cost_params *p, int prompt_tokens, cost_breakdown *out);
/* Convenience: a decode-only step of batch requests each holding context tokens. */
int64_t cost_decode_ns(const cost_params *p, int batch, int context, cost_breakdown *out);

/* The spike one long prompt causes: the longest step that carries part of a fresh prompt of
 * prompt_tokens beside one decode token for each of `decodes` running requests holding
 * `context` tokens each. chunk_budget 0: the whole prompt in one step (one-step prefill);
 * > 0: chunked prefill under that token budget, the decodes first, the prompt in chunks of
 * what they leave (at least 1 token), and the longest of those steps counts. ns. */
int64_t cost_injection_step_ns(const cost_params *p, int prompt_tokens, int decodes, int context,
                               int chunk_budget);
/* The same steps summed: the whole prefill's time beside the decodes (one step, or every
 * chunk's step), ns; *longest_ns (may be NULL) gets cost_injection_step_ns's figure. */
int64_t cost_injection_prefill_ns(const cost_params *p, int prompt_tokens, int decodes,
                                  int context, int chunk_budget, int64_t *longest_ns);
/* The same in a unified KV cache (cost_step_cells_ns) holding occupied_cells cells when the
 * prompt arrives (the decodes' among them): each step's attention spans those and the
 * prompt's cells computed so far. occupied_cells 0: cost_injection_prefill_ns. */
int64_t cost_injection_prefill_cells_ns(const cost_params *p, int prompt_tokens, int decodes,
                                        int context, int chunk_budget, int64_t occupied_cells,
                                        int64_t *longest_ns);

#endif
