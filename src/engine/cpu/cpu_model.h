/* cpu_model — the Llama architecture's shape (Config), its weights (Weights) and their
 * synthetic, seeded construction, after llama2.c's run.c.
 *
 * The weights are random (uniform, scaled by 1 / sqrt(fan_in) so activations stay O(1))
 * and a pure function of (seed, tensor, element): the engine needs a model whose forward
 * pass costs what a trained model of the same shape costs, and time depends on the shape,
 * never on what the weights learned. All tensors are F32, row-major, "out x in" like
 * llama2.c: y = W x for one token, Y = X W^T for a batch.
 *
 * Two fusions a serving engine makes and the naive reference does not need: wq, wk and wv
 * are consecutive row ranges of one wqkv matrix (one GEMM per layer instead of three), and
 * the gate (w1) and up (w3) projections are consecutive row ranges of one w13 matrix. */
#ifndef STALLSCOPE_CPU_MODEL_H
#define STALLSCOPE_CPU_MODEL_H
#include <stddef.h>
#include <stdint.h>

#include "engine/cost.h"

typedef struct cpu_config {
    int dim;         /* hidden size */
    int hidden_dim;  /* FFN size */
    int n_layers;
    int n_heads;
    int n_kv_heads;  /* grouped-query attention: n_heads / n_kv_heads query heads share one */
    int head_dim;
    int vocab_size;
    int max_seq_len; /* positions the model accepts */
    float rope_theta;
    float norm_eps;
    uint64_t seed;   /* of the synthetic weights */
} cpu_config;

typedef struct cpu_weights {
    float *token_embedding; /* (vocab_size, dim) */
    float *rms_att;         /* (n_layers, dim) */
    float *rms_ffn;         /* (n_layers, dim) */
    /* (n_layers, (n_heads + 2 n_kv_heads) * head_dim, dim): rows [0, q_dim) are wq,
     * then wk (kv_dim rows), then wv (kv_dim rows) */
    float *wqkv;
    float *wo;              /* (n_layers, dim, n_heads * head_dim) */
    float *w13;             /* (n_layers, 2 * hidden_dim, dim): w1 (gate) rows, then w3 (up) */
    float *w2;              /* (n_layers, dim, hidden_dim) */
    float *rms_final;       /* (dim,) */
    float *wcls;            /* (vocab_size, dim): the LM head, untied */
} cpu_weights;

/* Derived sizes, computed once, named as the kernels use them. */
typedef struct cpu_dims {
    int q_dim;    /* n_heads * head_dim */
    int kv_dim;   /* n_kv_heads * head_dim */
    int qkv_dim;  /* q_dim + 2 kv_dim: rows of one layer's wqkv */
    int kv_mul;   /* n_heads / n_kv_heads: query heads per KV head */
} cpu_dims;

cpu_dims cpu_config_dims(const cpu_config *c);

/* A config for a catalog architecture: validates the shape (GQA divides, head_dim even)
 * and the F32 weights, with their panels where AVX2 or AVX-512 kernels are active
 * (cpu_panel_bytes), against max_weight_bytes (0: no limit). 0 or -1 with err. */
int cpu_config_from_arch(const cost_arch *arch, uint64_t seed, double max_weight_bytes,
                         cpu_config *out, char *err);
/* Bytes of F32 weights build_weights allocates. */
double cpu_weight_bytes(const cpu_config *c);
/* Bytes of the second copy of the products' weights in panels (cpu_gemm_panels in
 * cpu_kernels.h) that cpu_build_model makes when AVX2 or AVX-512 kernels are active. */
double cpu_panel_bytes(const cpu_config *c);

/* Allocate and fill the weights deterministically from c->seed. 0 or -1 with err. */
int cpu_build_weights(cpu_weights *w, const cpu_config *c, char *err);
void cpu_free_weights(cpu_weights *w);

/* RoPE: the rotation angle of pair i (0 <= i < head_dim / 2) at position pos, as every
 * implementation here computes it (Meta's interleaved pairs, llama2.c's formula). */
double cpu_rope_angle(const cpu_config *c, int pos, int pair);

#endif
