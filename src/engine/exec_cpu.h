/* exec_cpu — the `cpu` executor: a real Llama-architecture forward pass on this CPU.
 *
 * Each step runs the scheduler's ragged batch through the model (engine/cpu/: synthetic
 * F32 weights of a catalog shape, OpenBLAS SGEMM and our own kernels, a paged KV cache of
 * 16-token blocks) and samples one token for every item that samples. Nothing models time:
 * the step lasts as long as the arithmetic takes (paced = false). When a cost model is
 * given (a calibrated --hardware profile), its prediction for each batch is reported as
 * modeled_ns, so steps.csv holds measured and predicted durations side by side.
 *
 * Tokens: ids in [0, vocab); CPU_EOS_ID ends a sequence (never sampled when the request
 * sets ignore_eos or has fewer than min_tokens tokens). Text: token id t reads as word
 * t mod 256 of vocab.h, EOS as "". A text prompt is tokenized as vocab.h says and its ids
 * drawn from (seed, position): the weights are random, so which ids a prompt has changes
 * what the model says, never how long it takes.
 *
 * Sequences: the executor keeps, per request id, the token history (prompt and sampled
 * ids) and the block table. A request that comes back with context 0 was preempted: its
 * blocks are freed and it is recomputed from its history. A request's blocks are freed
 * when its last token is sampled (max_tokens reached, EOS), when exec_cpu_release is called
 * (the engine's hook for stop strings and aborts), or, when the pool runs dry, taken back
 * from the least recently scheduled requests that are not in the step; such a request
 * coming back with context > 0 fails the step with a clear error rather than computing
 * on lost keys.
 *
 * Threads: cfg->threads (default: the CPUs this process may run on - 1, at least 1:
 * cpu_pool_default_threads) run the step; OpenBLAS is set to one thread for the whole
 * process (the pool splits the work instead). */
#ifndef STALLSCOPE_EXEC_CPU_H
#define STALLSCOPE_EXEC_CPU_H
#include <stdint.h>

#include "engine/cost.h"
#include "engine/exec.h"

#define CPU_EOS_ID 2
#define CPU_DEFAULT_WEIGHT_SEED 20240101ULL

typedef struct exec_cpu_config {
    cost_arch arch;          /* the model's shape: a catalog entry or a config.json */
    uint64_t weight_seed;    /* 0: CPU_DEFAULT_WEIGHT_SEED */
    int threads;             /* 0: the CPUs it may run on - 1, at least 1 */
    int64_t kv_blocks;       /* 16-token blocks of KV cache: the scheduler's kv_blocks */
    const cost_params *cost; /* optional (copied): its step time goes to modeled_ns */
    double max_weight_bytes; /* 0: half of physical memory */
} exec_cpu_config;

/* A new executor in *out (free with (*out)->destroy(*out)). 0, or -1 with err. */
int exec_cpu_create(const exec_cpu_config *cfg, exec **out, char *err);

/* Forget a request (finished or aborted): its KV blocks go back to the pool. Engine
 * thread; unknown ids are ignored. */
void exec_cpu_release(exec *x, int64_t request_id);

/* Threads the executor runs on. */
int exec_cpu_threads(const exec *x);
/* KV blocks in use / in the pool (for tests). */
int64_t exec_cpu_blocks_used(const exec *x);

#endif
