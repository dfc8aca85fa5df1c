#include "engine/exec_cpu.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/rng.h"
#include "engine/cpu/cpu_forward.h"
#include "engine/cpu/cpu_kv.h"
#include "engine/cpu/cpu_pool.h"
#include "engine/cpu/cpu_sample.h"
#include "engine/kvcache.h"
#include "engine/vocab.h"

#define PROMPT_SALT 0x70726f6d7074ULL /* "prompt" */

/* What the executor remembers of a request between steps. */
typedef struct cpu_seq {
    int64_t id;
    int32_t *tokens;   /* prompt ids, then sampled ids */
    int n_tokens;
    int cap_tokens;
    int kv_tokens;     /* positions whose K and V are in the cache */
    int n_shared;      /* its first n_shared KV blocks are prefix cache entries */
    bool unnamed;      /* its request's hashes do not name its ids: it caches nothing */
    bool evicted;      /* blocks taken back while it was not scheduled */
    int64_t last_step; /* last step it was in */
    cpu_kv_seq kv;
} cpu_seq;

typedef struct cpu_state {
    cpu_model model;
    cpu_runstate run;
    cpu_kv kv;
    cpu_pool *pool;
    /* The prefix cache (prefix caching: requests that name their blocks by hash): full
     * blocks by hash, the KV block id as the tag, kept after their requests leave until the
     * pool needs them (least recently released first, as the scheduler's). */
    kvcache *cache;
    uint64_t *block_hash; /* (kv blocks,) the hash a block is the cache entry of */
    int64_t reused_tokens, recomputed_tokens;
    int last_samples;     /* sampling rows of the last step's logits */
    int threads;
    bool have_cost;
    cost_params cost;
    cost_seq *cost_seqs;
    cpu_batch_seq *batch;
    cpu_seq **batch_seqs;
    int cap_batch;
    int64_t step;
    /* id -> sequence: open addressing, linear probing, backward-shift deletion */
    cpu_seq **slots;
    int cap_slots; /* power of two */
    int n_seqs;
} cpu_state;

/* ---- the sequence map -------------------------------------------------------------- */

static size_t slot_of(const cpu_state *st, int64_t id)
{
    return (size_t)(rng_hash3((uint64_t)id, 0, 0) & (uint64_t)(st->cap_slots - 1));
}

static cpu_seq *seq_find(const cpu_state *st, int64_t id)
{
    for (size_t i = slot_of(st, id);; i = (i + 1) & (size_t)(st->cap_slots - 1)) {
        if (!st->slots[i])
            return NULL;
        if (st->slots[i]->id == id)
            return st->slots[i];
    }
}

static void seq_place(cpu_state *st, cpu_seq *s)
{
    size_t i = slot_of(st, s->id);
    while (st->slots[i])
        i = (i + 1) & (size_t)(st->cap_slots - 1);
    st->slots[i] = s;
}

static int seq_map_grow(cpu_state *st)
{
    const int old_cap = st->cap_slots;
    cpu_seq **old = st->slots;
    const int cap = old_cap ? old_cap * 2 : 64;
    cpu_seq **slots = calloc((size_t)cap, sizeof *slots);
    if (!slots)
        return -1;
    st->slots = slots;
    st->cap_slots = cap;
    for (int i = 0; i < old_cap; i++)
        if (old[i])
            seq_place(st, old[i]);
    free(old);
    return 0;
}

/* Give back a sequence's KV: its cache entries stay cached (deepest first in the eviction
 * order, as the scheduler releases them), its own blocks go back to the pool. */
static void seq_drop_kv(cpu_state *st, cpu_seq *s)
{
    for (int i = s->n_shared - 1; i >= 0; i--)
        kvcache_unref(st->cache, st->block_hash[s->kv.blocks[i]]);
    cpu_kv_release_from(&st->kv, &s->kv, s->n_shared);
    s->n_shared = 0;
    s->kv_tokens = 0;
}

static void seq_destroy(cpu_state *st, cpu_seq *s)
{
    seq_drop_kv(st, s);
    cpu_kv_seq_free(&s->kv);
    free(s->tokens);
    free(s);
}

/* Remove and free; later entries of the probe chain shift back into the hole. */
static void seq_remove(cpu_state *st, cpu_seq *s)
{
    const size_t mask = (size_t)st->cap_slots - 1;
    size_t hole = slot_of(st, s->id);
    while (st->slots[hole] != s)
        hole = (hole + 1) & mask;
    st->slots[hole] = NULL;
    for (size_t i = (hole + 1) & mask; st->slots[i]; i = (i + 1) & mask) {
        const size_t home = slot_of(st, st->slots[i]->id);
        /* move back unless its home lies cyclically in (hole, i] */
        const bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (!stays) {
            st->slots[hole] = st->slots[i];
            st->slots[i] = NULL;
            hole = i;
        }
    }
    st->n_seqs--;
    seq_destroy(st, s);
}

/* A new sequence holding the request's prompt ids: the given ones, and ids drawn from
 * (seed, position) for a text prompt or past the ids given. */
static cpu_seq *seq_create(cpu_state *st, const sched_req *req, const exec_seq *es, char *err)
{
    if ((st->n_seqs + 1) * 2 > st->cap_slots && seq_map_grow(st) != 0) {
        err_set(err, "out of memory for the sequence map");
        return NULL;
    }
    cpu_seq *s = calloc(1, sizeof *s);
    const int cap = req->prompt_tokens + (req->max_tokens > 0 ? req->max_tokens : 1);
    if (s)
        s->tokens = malloc((size_t)cap * sizeof *s->tokens);
    if (!s || !s->tokens) {
        free(s);
        err_set(err, "out of memory for a sequence of %d tokens", cap);
        return NULL;
    }
    s->id = req->id;
    s->cap_tokens = cap;
    const int vocab = st->model.config.vocab_size;
    for (int i = 0; i < req->prompt_tokens; i++) {
        if (es && es->prompt_ids && i < es->n_prompt_ids)
            s->tokens[i] = es->prompt_ids[i] >= 0 && es->prompt_ids[i] < vocab ? es->prompt_ids[i] : 0;
        else
            s->tokens[i] = (int32_t)(rng_hash3(es ? es->seed : 0, (uint64_t)i, PROMPT_SALT) %
                                     (uint64_t)vocab);
    }
    s->n_tokens = req->prompt_tokens;
    seq_place(st, s);
    st->n_seqs++;
    return s;
}

static int seq_append(cpu_seq *s, int at, int32_t token)
{
    if (at >= s->cap_tokens) {
        int cap = s->cap_tokens * 2 > at + 1 ? s->cap_tokens * 2 : at + 1;
        int32_t *grown = realloc(s->tokens, (size_t)cap * sizeof *grown);
        if (!grown)
            return -1;
        s->tokens = grown;
        s->cap_tokens = cap;
    }
    s->tokens[at] = token;
    s->n_tokens = at + 1;
    return 0;
}

/* Take back the blocks of the least recently scheduled sequence not in this step. */
static bool evict_one(cpu_state *st)
{
    cpu_seq *victim = NULL;
    for (int i = 0; i < st->cap_slots; i++) {
        cpu_seq *s = st->slots[i];
        if (s && s->kv.n_blocks > 0 && s->last_step < st->step &&
            (!victim || s->last_step < victim->last_step))
            victim = s;
    }
    if (!victim)
        return false;
    seq_drop_kv(st, victim);
    victim->evicted = true;
    return true;
}

/* A block for a reservation that found the pool dry: a kept cache block nobody uses (least
 * recently released first), else the blocks of the least recently scheduled sequence not
 * in this step. */
static bool free_some(cpu_state *st)
{
    int64_t block = -1;
    if (kvcache_evict_tagged(st->cache, &block)) {
        cpu_kv_give_back(&st->kv, (int32_t)block);
        return true;
    }
    return evict_one(st);
}

/* ---- the prefix cache -------------------------------------------------------------- */

/* Does the request's hash of block i name the ids this sequence computes there? The engine
 * may name a text prompt's blocks by the ids the server tokenized it into while the
 * executor draws its ids from (seed, position) (exec_cpu.h): such a block must never be
 * shared under that name. Blocks before i are checked already (entries are made and taken
 * in chain order), so one link checks the whole prefix. */
static bool names_own_ids(const cpu_seq *s, const sched_req *req, int i)
{
    const uint64_t prev = i > 0 ? req->block_hashes[i - 1] : KVCACHE_HASH_SEED;
    return kvcache_hash_block(prev, s->tokens + (size_t)i * CPU_KV_BLOCK, CPU_KV_BLOCK) ==
           req->block_hashes[i];
}

/* The sequence's computed full blocks that its request names become cache entries; a
 * block another sequence computed first is shared instead and its own copy goes back to
 * the pool (the scheduler counts it once, so must the pool). */
static void cache_computed(cpu_state *st, cpu_seq *s, const sched_req *req)
{
    if (!req->block_hashes)
        return;
    int full = s->kv_tokens / CPU_KV_BLOCK;
    if (full > req->n_block_hashes)
        full = req->n_block_hashes;
    for (; s->n_shared < full && !s->unnamed; s->n_shared++) {
        const uint64_t hash = req->block_hashes[s->n_shared];
        const int32_t own = s->kv.blocks[s->n_shared];
        if (!names_own_ids(s, req, s->n_shared)) {
            s->unnamed = true; /* its blocks from here on stay its own */
            return;
        }
        const kvcache_put put = kvcache_insert_tagged(st->cache, hash, own);
        if (put == KVCACHE_PRIVATE)
            return; /* out of memory: it stays its own (a miss later, never a wrong hit) */
        if (put == KVCACHE_NEW) {
            st->block_hash[own] = hash;
        } else {
            s->kv.blocks[s->n_shared] = (int32_t)kvcache_tag(st->cache, hash);
            cpu_kv_give_back(&st->kv, own);
        }
    }
}

/* The item continues from item->context. When the sequence's KV does not hold exactly
 * [0, context) (a new request whose prefix the scheduler found cached, one whose blocks
 * the pool took back, one preempted and readmitted), rebuild it: the longest run of
 * cached blocks its request names is shared (pages, not copies: a full block is never
 * written again, and the scheduler counts a shared block once), and the positions after
 * it up to context are recomputed in this step, fed before the item's own tokens. *start
 * gets the first position the step feeds. 0, or -1 with err. */
static int rebuild_kv(cpu_state *st, cpu_seq *s, const sched_item *item, int *start, char *err)
{
    *start = item->context;
    if (!s->evicted && s->kv_tokens == item->context)
        return 0;
    seq_drop_kv(st, s);
    s->evicted = false;
    const sched_req *req = item->req;
    int most = item->context / CPU_KV_BLOCK;
    if (!req->block_hashes || most > req->n_block_hashes)
        most = req->block_hashes ? req->n_block_hashes : 0;
    for (; s->n_shared < most; s->n_shared++) {
        const uint64_t hash = req->block_hashes[s->n_shared];
        const int64_t block = kvcache_tag(st->cache, hash);
        if (block < 0 || !names_own_ids(s, req, s->n_shared))
            break;
        if (cpu_kv_append(&s->kv, (int32_t)block, err) != 0)
            return -1;
        kvcache_ref(st->cache, hash);
    }
    s->kv_tokens = s->n_shared * CPU_KV_BLOCK;
    st->reused_tokens += s->kv_tokens;
    st->recomputed_tokens += item->context - s->kv_tokens;
    *start = s->kv_tokens;
    return 0;
}

/* ---- the step ---------------------------------------------------------------------- */

static int reserve_batch(cpu_state *st, int n)
{
    if (n <= st->cap_batch)
        return 0;
    int cap = st->cap_batch ? st->cap_batch : 64;
    while (cap < n)
        cap *= 2;
    cpu_batch_seq *batch = realloc(st->batch, (size_t)cap * sizeof *batch);
    if (batch)
        st->batch = batch;
    cpu_seq **seqs = realloc(st->batch_seqs, (size_t)cap * sizeof *seqs);
    if (seqs)
        st->batch_seqs = seqs;
    cost_seq *cs = realloc(st->cost_seqs, (size_t)cap * sizeof *cs);
    if (cs)
        st->cost_seqs = cs;
    if (!batch || !seqs || !cs)
        return -1;
    st->cap_batch = cap;
    return 0;
}

/* Find or create the item's sequence and mark it as in this step (so the pool never takes
 * back blocks from a member of the step while another member reserves). */
static cpu_seq *claim_item(cpu_state *st, const sched_item *item, const exec_seq *es, char *err)
{
    const sched_req *req = item->req;
    cpu_seq *s = seq_find(st, req->id);
    if (!s && !(s = seq_create(st, req, es, err)))
        return NULL;
    s->last_step = st->step;
    return s;
}

/* Make the sequence's cache hold [0, context) (rebuild_kv) and cover the step's
 * positions; *start gets the first position the step feeds. */
static int prepare_item(cpu_state *st, cpu_seq *s, const sched_item *item, int *start, char *err)
{
    const sched_req *req = item->req;
    const int end = item->context + item->new_tokens;
    if (end > s->n_tokens)
        return err_set(err, "request %lld: the step feeds positions up to %d but only %d tokens "
                            "are known", (long long)req->id, end - 1, s->n_tokens);
    if (rebuild_kv(st, s, item, start, err) != 0)
        return -1;
    char why[ERR_LEN];
    while (cpu_kv_reserve(&st->kv, &s->kv, end, why) != 0)
        if (!free_some(st))
            return err_set(err, "request %lld: %s", (long long)req->id, why);
    return 0;
}

static int cpu_step(exec *x, const sched_batch *batch, const exec_seq *const *seqs,
                    int64_t step_start_ns, int32_t *tokens, int64_t *modeled_ns, char *err)
{
    (void)step_start_ns;
    cpu_state *st = x->state;
    const int n = batch->n_items;
    *modeled_ns = 0;
    if (n == 0)
        return 0;
    if (reserve_batch(st, n) != 0)
        return err_set(err, "out of memory for a batch of %d", n);
    st->step++;
    for (int i = 0; i < n; i++)
        if (!(st->batch_seqs[i] = claim_item(st, &batch->items[i], seqs ? seqs[i] : NULL, err)))
            return -1;
    for (int i = 0; i < n; i++) {
        const sched_item *item = &batch->items[i];
        cpu_seq *s = st->batch_seqs[i];
        int start = 0;
        if (prepare_item(st, s, item, &start, err) != 0)
            return -1;
        st->batch[i] = (cpu_batch_seq){s->tokens + start, start,
                                       item->context + item->new_tokens - start, &s->kv,
                                       item->samples};
        st->cost_seqs[i] = (cost_seq){item->new_tokens, item->context, item->samples};
    }
    if (cpu_forward(&st->model, &st->run, &st->kv, st->pool, st->batch, n, err) != 0)
        return -1;

    const int vocab = st->model.config.vocab_size;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const sched_item *item = &batch->items[i];
        cpu_seq *s = st->batch_seqs[i];
        s->kv_tokens = item->context + item->new_tokens;
        cache_computed(st, s, item->req);
        if (!item->samples)
            continue;
        const exec_seq *es = seqs ? seqs[i] : NULL;
        const int generated = item->req->generated;
        const bool eos_allowed = es && !es->ignore_eos && generated >= es->min_tokens;
        const int32_t token = cpu_sample(st->run.logits + (size_t)k * vocab, vocab,
                                         es ? es->temperature : 0, es ? es->seed : 0, generated,
                                         eos_allowed ? -1 : CPU_EOS_ID);
        k++;
        tokens[i] = token;
        if (seq_append(s, item->req->prompt_tokens + generated, token) != 0)
            return err_set(err, "out of memory for the tokens of request %lld",
                           (long long)item->req->id);
        /* Its last token: sched_commit (max_tokens) or the engine (EOS) ends it now. */
        if (generated + 1 >= item->req->max_tokens || token == CPU_EOS_ID)
            seq_remove(st, s);
    }
    st->last_samples = k;
    if (st->have_cost)
        *modeled_ns =
            cost_step_cells_ns(&st->cost, st->cost_seqs, n, batch->occupied_cells, NULL);
    return 0;
}

/* ---- warm start ------------------------------------------------------------------------ */

/* The warm-up step: `tokens` tokens over `n` fresh sequences (as even as they divide), each
 * sampling, so every row, logit and sequence buffer of the largest step is written. Its KV
 * blocks go back to the pool afterwards. */
static int warm_forward(cpu_state *st, int tokens, int n, char *err)
{
    const int vocab = st->model.config.vocab_size;
    int32_t *ids = malloc((size_t)tokens * sizeof *ids);
    cpu_kv_seq *kv = calloc((size_t)n, sizeof *kv);
    int rc = -1;
    if (!ids || !kv || reserve_batch(st, n) != 0) {
        err_set(err, "out of memory for a warm-up step of %d tokens", tokens);
        goto done;
    }
    for (int t = 0; t < tokens; t++)
        ids[t] = (int32_t)(((int64_t)t * 7919 + 3) % vocab);
    int at = 0;
    for (int i = 0; i < n; i++) {
        const int len = tokens / n + (i < tokens % n ? 1 : 0);
        if (cpu_kv_reserve(&st->kv, &kv[i], len, err) != 0)
            goto done;
        st->batch[i] = (cpu_batch_seq){ids + at, 0, len, &kv[i], true};
        at += len;
    }
    rc = cpu_forward(&st->model, &st->run, &st->kv, st->pool, st->batch, n, err);
done:
    if (kv)
        for (int i = 0; i < n; i++) {
            cpu_kv_release(&st->kv, &kv[i]);
            cpu_kv_seq_free(&kv[i]);
        }
    free(kv);
    free(ids);
    return rc;
}

static int cpu_warm(exec *x, const sched_config *sched, exec_warm_info *info, char *err)
{
    cpu_state *st = x->state;
    memset(info, 0, sizeof *info);
    const int64_t t0 = clock_now_ns();
    if (st->n_seqs > 0 || st->kv.n_free != st->kv.n_blocks)
        return err_set(err, "a warm start runs before any request (%d are held)", st->n_seqs);
    int budget = sched->max_num_batched_tokens > 0 ? sched->max_num_batched_tokens : 1;
    /* A step never holds more tokens than the KV cache has room for. */
    const int64_t kv_tokens = st->kv.n_blocks * CPU_KV_BLOCK;
    if (budget > kv_tokens)
        budget = (int)kv_tokens;
    int seqs = sched->max_num_seqs > 0 ? sched->max_num_seqs : 1;
    if (seqs > budget)
        seqs = budget;
    /* Each sequence rounds up to whole blocks: fewer sequences when that overflows. */
    while (seqs > 1 && (int64_t)budget / CPU_KV_BLOCK + seqs > st->kv.n_blocks)
        seqs /= 2;
    info->kv_bytes = cpu_kv_bytes(&st->model.config, st->kv.n_blocks);
    const int max_positions = sched->max_model_len > 0 ? sched->max_model_len
                                                       : st->model.config.max_seq_len;
    while (st->cap_slots < 2 * (seqs + 1))
        if (seq_map_grow(st) != 0)
            return err_set(err, "out of memory for the sequence map");
    if (reserve_batch(st, seqs) != 0)
        return err_set(err, "out of memory for a batch of %d", seqs);
    if (cpu_reserve_runstate(&st->run, &st->model, budget, seqs, seqs, max_positions, err) != 0)
        return -1;
    const int64_t f0 = clock_now_ns();
    if (warm_forward(st, budget, seqs, err) != 0)
        return -1;
    info->forward_ns = clock_now_ns() - f0;
    info->kv_resident_bytes = cpu_kv_bytes(&st->model.config, st->kv.n_touched);
    info->scratch_bytes = cpu_runstate_bytes(&st->run, &st->model);
    info->step_tokens = budget;
    info->step_seqs = seqs;
    info->ns = clock_now_ns() - t0;
    return 0;
}

/* ---- text ---------------------------------------------------------------------------- */

static const char *cpu_token_text(const exec *x, int32_t token, size_t *len)
{
    if (token == CPU_EOS_ID || token < 0 || token >= x->vocab_size) {
        *len = 0;
        return "";
    }
    return vocab_text(token % VOCAB_WORDS, len);
}

static bool cpu_is_eos(const exec *x, int32_t token)
{
    (void)x;
    return token == CPU_EOS_ID;
}

static int64_t cpu_tokenize(const exec *x, const char *text, size_t len, int32_t *ids,
                            int64_t max_ids)
{
    return vocab_tokenize(text, len, ids, max_ids, x->vocab_size);
}

/* ---- life cycle ------------------------------------------------------------------------ */

static void cpu_destroy(exec *x)
{
    if (!x)
        return;
    cpu_state *st = x->state;
    if (st) {
        for (int i = 0; i < st->cap_slots; i++)
            if (st->slots[i])
                seq_destroy(st, st->slots[i]);
        free(st->slots);
        free(st->batch);
        free(st->batch_seqs);
        free(st->cost_seqs);
        cpu_free_runstate(&st->run);
        kvcache_free(st->cache);
        free(st->block_hash);
        cpu_kv_free(&st->kv);
        cpu_free_model(&st->model);
        cpu_pool_free(st->pool);
        free(st);
    }
    free(x);
}

void exec_cpu_release(exec *x, int64_t request_id)
{
    cpu_state *st = x->state;
    cpu_seq *s = st->cap_slots ? seq_find(st, request_id) : NULL;
    if (s)
        seq_remove(st, s);
}

int exec_cpu_threads(const exec *x)
{
    return ((const cpu_state *)x->state)->threads;
}

int64_t exec_cpu_blocks_used(const exec *x)
{
    const cpu_state *st = x->state;
    return st->kv.n_blocks - st->kv.n_free - kvcache_evictable(st->cache);
}

int64_t exec_cpu_blocks_kept(const exec *x)
{
    return kvcache_evictable(((const cpu_state *)x->state)->cache);
}

int64_t exec_cpu_drop_kept(exec *x)
{
    cpu_state *st = x->state;
    int64_t n = 0, block = -1;
    while (kvcache_evict_tagged(st->cache, &block)) {
        cpu_kv_give_back(&st->kv, (int32_t)block);
        n++;
    }
    return n;
}

int64_t exec_cpu_reused_tokens(const exec *x)
{
    return ((const cpu_state *)x->state)->reused_tokens;
}

int64_t exec_cpu_recomputed_tokens(const exec *x)
{
    return ((const cpu_state *)x->state)->recomputed_tokens;
}

const float *exec_cpu_logits(const exec *x, int k)
{
    const cpu_state *st = x->state;
    if (k < 0 || k >= st->last_samples)
        return NULL;
    return st->run.logits + (size_t)k * st->model.config.vocab_size;
}

int exec_cpu_create(const exec_cpu_config *cfg, exec **out, char *err)
{
    *out = NULL;
    exec *x = calloc(1, sizeof *x);
    cpu_state *st = calloc(1, sizeof *st);
    if (!x || !st) {
        free(x);
        free(st);
        return err_set(err, "out of memory creating the cpu executor");
    }
    x->state = st;
    x->destroy = cpu_destroy;
    double max_bytes = cfg->max_weight_bytes;
    if (max_bytes <= 0)
        max_bytes = 0.5 * (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    cpu_config config;
    const uint64_t seed = cfg->weight_seed ? cfg->weight_seed : CPU_DEFAULT_WEIGHT_SEED;
    st->threads = cfg->threads > 0 ? cfg->threads : cpu_pool_default_threads();
    if (cpu_config_from_arch(&cfg->arch, seed, max_bytes, &config, err) != 0)
        goto fail;
    /* One thread inside OpenBLAS: our pool splits each product over the threads. */
    openblas_set_num_threads(1);
    if (!(st->pool = cpu_pool_create(st->threads, err)) ||
        cpu_build_model(&st->model, &config, err) != 0 ||
        cpu_build_runstate(&st->run, &st->model, st->threads, err) != 0 ||
        cpu_kv_init(&st->kv, &config, cfg->kv_blocks, err) != 0 || seq_map_grow(st) != 0 ||
        !(st->cache = kvcache_create(cfg->kv_blocks, err)) ||
        !(st->block_hash = calloc((size_t)cfg->kv_blocks, sizeof *st->block_hash))) {
        if (!err || !err[0])
            err_set(err, "out of memory creating the cpu executor");
        goto fail;
    }
    if (cfg->cost) {
        st->have_cost = true;
        st->cost = *cfg->cost;
    }
    x->name = "cpu";
    x->paced = false;
    x->vocab_size = config.vocab_size;
    x->step = cpu_step;
    x->token_text = cpu_token_text;
    x->is_eos = cpu_is_eos;
    x->tokenize = cpu_tokenize;
    x->release = exec_cpu_release;
    x->warm = cpu_warm;
    *out = x;
    return 0;
fail:
    cpu_destroy(x);
    return -1;
}
