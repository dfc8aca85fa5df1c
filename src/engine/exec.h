/* exec — the executor interface: what runs one engine step.
 *
 * The engine thread owns the scheduler and calls an executor once per step with the batch
 * sched_next built. The executor returns the step's modeled duration and one sampled token
 * per sampling item. Executors:
 *   emulate (exec_emulate.h): the cost model gives the duration and the thread sleeps to
 *           the step's absolute deadline, a GPU of the catalog in real time; the tokens are
 *           readable words (vocab.h).
 *   cpu     (issue 5): a real forward pass on this CPU; same interface.
 * A table of function pointers (wrk's transport idea) so tests and new executors plug in
 * without the engine knowing which one runs. */
#ifndef STALLSCOPE_EXEC_H
#define STALLSCOPE_EXEC_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/sched.h"

/* What an executor may know about a sequence besides its sched_req. */
typedef struct exec_seq {
    uint64_t seed;             /* sampling seed */
    double temperature;        /* 0: greedy */
    int min_tokens;            /* EOS must not be sampled before this many tokens */
    bool ignore_eos;           /* never sample EOS */
    const int32_t *prompt_ids; /* the prompt's ids, NULL for a text prompt */
    int n_prompt_ids;
} exec_seq;

/* What a warm start did (exec.warm): the bytes it allocated and touched, how long it took. */
typedef struct exec_warm_info {
    int64_t ns;             /* the whole warm start, wall clock */
    int64_t forward_ns;     /* of which the warm-up step */
    double kv_bytes;        /* KV arena allocated */
    double kv_resident_bytes; /* of which the warm-up step's blocks, resident */
    double scratch_bytes;   /* activation buffers sized for the largest step */
    int step_tokens;        /* tokens of the warm-up step (the budget, or what the KV holds) */
    int step_seqs;          /* sequences in it (max_num_seqs, at most one per token) */
} exec_warm_info;

typedef struct exec exec;
struct exec {
    const char *name; /* "emulate", "cpu" */
    void *state;
    /* true: step() itself waits until step_start_ns + modeled duration (an emulated
     * device), so the engine starts the next step at that deadline, not when step()
     * returned, and emulated time never drifts. false: the step took as long as it took. */
    bool paced;
    /* Paced executors: set by each step() to how late the thread woke past the step's
     * deadline, ns (>= 0): the machine's delay, as the executor saw it. The engine writes
     * it to the step log (late_ns), the record a timing check may excuse a slow step by. */
    int64_t late_ns;
    int32_t vocab_size; /* token ids a prompt may use: [0, vocab_size) */

    /* Run one step on the engine thread. seqs[i] belongs to batch->items[i]. For every item
     * that samples, tokens[i] gets the sampled id (the token at completion position
     * items[i].req->generated); other slots are left alone. *modeled_ns gets the cost
     * model's duration for this batch (0 when the executor has none). 0, or -1 with err. */
    int (*step)(exec *x, const sched_batch *batch, const exec_seq *const *seqs,
                int64_t step_start_ns, int32_t *tokens, int64_t *modeled_ns, char *err);
    /* The text of a token: a stable pointer, callable from any thread (the HTTP thread
     * encodes chunks with it while the engine runs). "" for EOS. */
    const char *(*token_text)(const exec *x, int32_t token, size_t *len);
    bool (*is_eos)(const exec *x, int32_t token);
    /* Tokens of a text prompt (any thread); ids (may be NULL) gets the first max_ids. */
    int64_t (*tokenize)(const exec *x, const char *text, size_t len, int32_t *ids,
                        int64_t max_ids);
    /* The request left the engine (finished, stopped, aborted): free what the executor
     * holds for it (its KV pages). NULL when the executor keeps nothing per request. */
    void (*release)(exec *x, int64_t request_id);
    /* Before serving (vLLM sizes its KV cache and runs a profiling forward pass before it
     * answers): allocate everything a run under this scheduler will use, and run one step as
     * large as its budget, so the first real long prompt does not pay for first-use
     * allocations and the step's own page faults. The KV arena is allocated whole but only
     * the warm-up step's blocks are written: the rest become resident as traffic first
     * needs them (cpu_kv.h says why). The executor is as new afterwards (no request,
     * every KV block free). NULL when there is nothing to warm (emulate). 0, or -1 with
     * err. */
    int (*warm)(exec *x, const sched_config *sched, exec_warm_info *info, char *err);
    void (*destroy)(exec *x);
};

#endif
