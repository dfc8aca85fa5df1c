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
 * ids) and the block table. A request's blocks are freed when its last token is sampled
 * (max_tokens reached, EOS), when exec_cpu_release is called (the engine's hook for stop
 * strings and aborts), or, when the pool runs dry, taken back from the least recently
 * scheduled requests that are not in the step.
 *
 * Prefix caching (the scheduler's, sched.h): a request that names its full blocks by hash
 * (sched_req.block_hashes) leaves them cached: each full block it computes becomes a cache
 * entry (one another request computed first is shared instead, its own copy freed, so the
 * pool counts blocks as the scheduler does), and entries outlive the request until the
 * pool needs their memory (least recently released first, kvcache.h). Shared means the
 * block tables name the same pages: a full block is never written again. A block is cached
 * or shared only under a hash of the ids this executor computes there (the engine may name
 * a text prompt's blocks by the ids the server tokenized while the ids here are drawn from
 * the seed): otherwise the request caches nothing and a scheduler hit is recomputed.
 *
 * An item's context is what the scheduler says is in KV. When the sequence's cache does not
 * hold exactly [0, context) - a new request whose prefix the scheduler found cached, a
 * request preempted (context 0) or readmitted, one whose blocks the pool took back - its
 * KV is rebuilt before the forward pass: the longest run of cached blocks its hashes name
 * is shared (exec_cpu_reused_tokens counts those positions), and the positions after it
 * up to context are recomputed from its token history in the same step
 * (exec_cpu_recomputed_tokens): correct always, only slower. The two LRUs (the
 * scheduler's and this pool's) may disagree, e.g. when requests are aborted or the pools
 * differ in size; then a scheduler hit is a recompute here.
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
/* KV blocks requests hold (for tests): kept cache blocks nobody uses are not counted. */
int64_t exec_cpu_blocks_used(const exec *x);
/* Prefix caching: cache blocks kept that no request uses (evicted when the pool needs
 * them). */
int64_t exec_cpu_blocks_kept(const exec *x);
/* Evict every kept block now (the scheduler is not told: tests force the recompute path
 * with it). The count. */
int64_t exec_cpu_drop_kept(exec *x);
/* Positions whose KV was shared from cache blocks / recomputed because the sequence's
 * cache did not hold [0, context) (see above), since creation. */
int64_t exec_cpu_reused_tokens(const exec *x);
int64_t exec_cpu_recomputed_tokens(const exec *x);
/* The logits (vocab_size floats) of the k-th sampling item of the last step, NULL when k is
 * out of range; valid until the next step (for tests). */
const float *exec_cpu_logits(const exec *x, int k);

#endif
