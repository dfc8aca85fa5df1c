/* cpu_forward — the Llama forward pass over a ragged batch (all tokens of a step in one
 * activation matrix, as vLLM runs it), and the naive one-token reference it is tested
 * against.
 *
 * A step is a list of sequences, each feeding new_tokens tokens at positions
 * context .. context + new_tokens - 1 over a KV cache that already holds positions
 * 0 .. context - 1 (a decode feeds 1 token, a prefill chunk many). Every layer runs its
 * projections as one GEMM over all rows of the step, attention per sequence over the paged
 * cache (cpu_attn.h), and the LM head only for the last row of the sequences that sample.
 *
 * The reference (cpu_ref_forward) is llama2.c's forward(): one token at one position, a
 * contiguous KV cache of its own, matrix-vector products accumulated in double, softmax
 * attention with a full score row. Nothing is shared with the batched path but the weights
 * and the ten-line kernels of cpu_kernels.h. */
#ifndef STALLSCOPE_CPU_FORWARD_H
#define STALLSCOPE_CPU_FORWARD_H
#include <stdbool.h>
#include <stdint.h>

#include "engine/cpu/cpu_kv.h"
#include "engine/cpu/cpu_model.h"
#include "engine/cpu/cpu_pool.h"

typedef struct cpu_batch_seq {
    const int32_t *tokens; /* (new_tokens,) ids at positions context .. context + new - 1 */
    int context;           /* positions already in the cache */
    int new_tokens;        /* >= 1 */
    const cpu_kv_seq *kv;  /* block table covering context + new_tokens positions */
    bool samples;          /* compute logits of its last row */
} cpu_batch_seq;

typedef struct cpu_attn_task {
    int seq;        /* index into the step's sequences */
    int kv_head;
    int token0;     /* first new token of the tile (0-based within the sequence's chunk) */
    int n_tokens;
    double cost;    /* rows x keys, to hand out the heaviest tiles first */
} cpu_attn_task;

typedef struct cpu_runstate {
    int cap_tokens;   /* rows the activation buffers hold (grown on demand) */
    int cap_samples;  /* rows of logits */
    float *x;         /* (cap_tokens, dim) residual stream */
    float *xb;        /* (cap_tokens, dim) normalised input of a sublayer */
    float *qkv;       /* (cap_tokens, qkv_dim) q | k | v of each row, after RoPE */
    float *att;       /* (cap_tokens, q_dim) attention output */
    float *hb;        /* (cap_tokens, 2 * hidden_dim) gate | up; silu(gate) * up in the gate half */
    float *xs;        /* (cap_samples, dim) final-normed rows that sample */
    float *logits;    /* (cap_samples, vocab_size) */
    int32_t *pos;     /* (cap_tokens,) position of each row */
    int32_t *row_seq; /* (cap_tokens,) the batch sequence each row belongs to */
    int32_t *row_start; /* (n_seqs,) first row of each sequence */
    int cap_seqs;
    float *rope;      /* (cap_positions, head_dim / 2, 2): cos, sin */
    int cap_positions;
    cpu_attn_task *tasks;
    int cap_tasks;
    int n_threads;
    float **scratch;  /* (n_threads,) attention scratch */
    size_t scratch_floats;
    const float **tile_q; /* (n_threads, tile rows) row pointers */
    float **tile_out;
    int32_t *tile_pos;
    int tile_rows;    /* rows of an attention tile: tile_tokens x kv_mul */
    int tile_tokens;
    float *xpack;     /* X rearranged for the products on panels, one slice per thread
                       * (NULL: the model has none) */
    size_t xpack_floats; /* of a slice */
    /* A decode step split into parts, one per thread (cpu_forward): */
    cpu_pool **solo;  /* (n_threads,) or NULL: each thread's pool of itself alone */
    struct cpu_step_part *parts; /* (n_threads,): the step's parts (one when not split) */
    int split_min_rows; /* rows a part needs at least (CPU_FORWARD_SPLIT_ROWS; tests set it) */
    int last_parts;     /* parts the last step ran in (1: not split) */
} cpu_runstate;

/* A step splits into parts, one per thread, only when each part gets at least this many rows
 * (cpu_forward). */
#define CPU_FORWARD_SPLIT_ROWS 64

/* The matrices in panels (cpu_gemm_panels), each layer's after the previous one's; all NULL
 * where the engine runs plain C only (a CPU without AVX2, or STALLSCOPE_CPU_ISA=portable
 * when the model was built). */
typedef struct cpu_panels {
    float *wqkv, *wo, *w13, *w2, *wcls; /* cpu_panel_bytes in all */
} cpu_panels;

typedef struct cpu_model {
    cpu_config config;
    cpu_dims dims;
    cpu_weights weights;
    cpu_panels panels;
} cpu_model;

/* Build the model (config + synthetic weights, and their panels where the kernels read
 * them) / free it. */
int cpu_build_model(cpu_model *m, const cpu_config *c, char *err);
void cpu_free_model(cpu_model *m);

int cpu_build_runstate(cpu_runstate *s, const cpu_model *m, int n_threads, char *err);
void cpu_free_runstate(cpu_runstate *s);

/* Grow every per-step buffer to hold a step of n_tokens rows, n_samples sampling rows and
 * n_seqs sequences at positions below max_positions, and write every byte of them (so no
 * page is first touched inside a step). 0, or -1 with err. */
int cpu_reserve_runstate(cpu_runstate *s, const cpu_model *m, int n_tokens, int n_samples,
                         int n_seqs, int max_positions, char *err);
/* Bytes the per-step buffers hold now. */
double cpu_runstate_bytes(const cpu_runstate *s, const cpu_model *m);

/* One step. Writes K and V of every new token into kv, and logits of the sampling
 * sequences, in batch order, to s->logits (row i for the i-th sampling sequence).
 * 0, or -1 with err (out of memory, a position past max_seq_len).
 *
 * A step of short rows (each sequence's new tokens within one attention tile: decode) with
 * at least s->split_min_rows rows per thread is split into one contiguous part of the
 * sequences per thread, of about equal cost (rows through the products, keys read by the
 * attention), and each thread runs its part's whole pass alone: no section waits on
 * another thread, and no thread reads rows another one wrote. The rows' results are the
 * same as unsplit, bit for bit, where a part's products take the same kernel as the whole
 * step's (both on panels: CPU_GEMM_PANEL_M up to CPU_GEMM_SMALL_M - 1 rows, the LM head's
 * counted in sampling rows); else up to the order of sums. */
int cpu_forward(const cpu_model *m, cpu_runstate *s, cpu_kv *kv, cpu_pool *pool,
                const cpu_batch_seq *seqs, int n_seqs, char *err);

/* ---- reference ------------------------------------------------------------------ */

typedef struct cpu_ref_state {
    int seq_len;
    float *x, *xb, *xb2;   /* (dim,) */
    float *hb, *hb2;       /* (hidden_dim,) */
    float *q;              /* (q_dim,) */
    float *att;            /* (seq_len,) scores of one head */
    float *logits;         /* (vocab_size,) */
    float *key_cache;      /* (n_layers, seq_len, kv_dim) */
    float *value_cache;    /* (n_layers, seq_len, kv_dim) */
} cpu_ref_state;

int cpu_build_ref_state(cpu_ref_state *s, const cpu_config *c, int seq_len, char *err);
void cpu_free_ref_state(cpu_ref_state *s);
/* Logits after feeding token at pos (positions 0..pos-1 fed before, in order). */
float *cpu_ref_forward(const cpu_model *m, cpu_ref_state *s, int token, int pos);

#endif
