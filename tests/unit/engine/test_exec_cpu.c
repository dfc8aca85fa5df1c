/* Unit tests for the cpu executor (exec_cpu.h) driven by the real scheduler, step by step
 * as the engine drives it: answers independent of batch mates and of preemption, KV blocks
 * returned, sampling rules (EOS, min_tokens, seeds), text, the modeled duration, and prefix
 * caching (a cached prefix's KV reused or recomputed gives the uncached answer). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "engine/cost.h"
#include "engine/exec_cpu.h"
#include "engine/kvcache.h"
#include "engine/sched.h"

/* A shape small enough for ASan: hidden 64, 2 layers, GQA 4/2 x 16, vocab 300. */
static cost_arch test_arch(void)
{
    cost_arch a;
    memset(&a, 0, sizeof a);
    strcpy(a.name, "test-64");
    a.n_layers = 2;
    a.hidden = 64;
    a.n_heads = 4;
    a.n_kv_heads = 2;
    a.head_dim = 16;
    a.ffn = 96;
    a.vocab = 300;
    a.max_position = 4096;
    return a;
}

static exec *make_exec(int threads, int64_t kv_blocks, const cost_params *cost)
{
    char err[ERR_LEN] = "";
    exec_cpu_config cfg = {.arch = test_arch(), .threads = threads, .kv_blocks = kv_blocks,
                           .cost = cost};
    exec *x = NULL;
    if (exec_cpu_create(&cfg, &x, err) != 0)
        fail_msg("exec_cpu_create: %s", err);
    return x;
}

enum { MAX_REQS = 8, MAX_ANSWER = 64 };

typedef struct client_req {
    sched_req sr;
    exec_seq seq;
    int32_t prompt[200];
    int32_t answer[MAX_ANSWER];
    int n_answer;
    uint64_t hashes[200 / 16]; /* prefix caching: its prompt's hash chain (name_blocks) */
    float first_logits[300];   /* the logits its first token was sampled from */
} client_req;

static void init_req(client_req *r, int64_t id, int prompt_tokens, int max_tokens, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->sr.id = id;
    r->sr.prompt_tokens = prompt_tokens;
    r->sr.max_tokens = max_tokens;
    r->sr.user = r;
    for (int i = 0; i < prompt_tokens; i++)
        r->prompt[i] = (int32_t)((i * 37 + seed * 11) % 300);
    r->seq.seed = seed;
    r->seq.ignore_eos = true;
    r->seq.prompt_ids = r->prompt;
    r->seq.n_prompt_ids = prompt_tokens;
}

/* Prefix caching: name the request's full prompt blocks. */
static void name_blocks(client_req *r)
{
    r->sr.n_block_hashes = (int)kvcache_hash_blocks(r->prompt, r->sr.prompt_tokens, 16, r->hashes);
    r->sr.block_hashes = r->hashes;
}

/* Run the scheduler and executor until every request finishes; requests join at the steps
 * given in arrive_at[]; at step drop_at (-1: never) the executor drops its kept cache blocks
 * without the scheduler knowing. Returns the number of steps. */
static int drive_dropping(exec *x, const sched_config *cfg, client_req **reqs, const int *arrive_at,
                          int n, int64_t *preemptions, int drop_at)
{
    char err[ERR_LEN] = "";
    sched *s = sched_create(cfg, err);
    assert_non_null(s);
    sched_batch batch;
    const exec_seq *seqs[64];
    int32_t tokens[64];
    int steps = 0, done = 0;
    bool added[MAX_REQS] = {false};
    while (done < n) {
        for (int i = 0; i < n; i++)
            if (!added[i] && arrive_at[i] <= steps) {
                if (sched_add(s, &reqs[i]->sr, err) != 0)
                    fail_msg("sched_add: %s", err);
                added[i] = true;
            }
        if (steps == drop_at)
            exec_cpu_drop_kept(x);
        const int items = sched_next(s, &batch);
        if (items > 0) {
            assert_true(items <= 64);
            for (int i = 0; i < items; i++)
                seqs[i] = &((client_req *)batch.items[i].req->user)->seq;
            int64_t modeled = -1;
            if (x->step(x, &batch, seqs, 0, tokens, &modeled, err) != 0)
                fail_msg("step: %s", err);
            for (int i = 0, k = 0; i < items; i++) {
                if (!batch.items[i].samples)
                    continue;
                client_req *r = batch.items[i].req->user;
                const float *logits = exec_cpu_logits(x, k++);
                assert_non_null(logits);
                if (r->n_answer == 0)
                    memcpy(r->first_logits, logits, sizeof r->first_logits);
                assert_true(r->n_answer < MAX_ANSWER);
                assert_int_equal(batch.items[i].req->generated, r->n_answer);
                r->answer[r->n_answer++] = tokens[i];
            }
            sched_commit(s, &batch);
        }
        done = 0;
        for (int i = 0; i < n; i++)
            done += added[i] && reqs[i]->sr.state == SCHED_FINISHED;
        steps++;
        assert_true(steps < 10000);
    }
    if (preemptions)
        *preemptions = sched_num_preemptions(s);
    sched_free(s);
    return steps;
}

static int drive(exec *x, const sched_config *cfg, client_req **reqs, const int *arrive_at, int n,
                 int64_t *preemptions)
{
    return drive_dropping(x, cfg, reqs, arrive_at, n, preemptions, -1);
}

static sched_config make_sched(sched_policy policy, int budget, int64_t kv_blocks)
{
    return (sched_config){.policy = policy, .max_num_batched_tokens = budget,
                          .max_num_seqs = 64, .max_model_len = 4096, .block_size = 16,
                          .kv_blocks = kv_blocks};
}

/* The reference: the request alone on a fresh executor of 64 blocks, no prefix caching. */
static void run_alone(client_req *r)
{
    client_req *one[1] = {r};
    const int at[1] = {0};
    exec *x = make_exec(1, 64, NULL);
    const sched_config cfg = make_sched(SCHED_MIXED, 4096, 64);
    drive(x, &cfg, one, at, 1, NULL);
    x->destroy(x);
}

/* One request alone, then among others under every policy (chunked: its prompt in pieces;
 * a long prompt arriving mid-answer): the same greedy answer each time; every KV block
 * comes back. */
static void test_answers_independent_of_company(void **state)
{
    (void)state;
    client_req alone_req;
    init_req(&alone_req, 1, 50, 30, 5);
    client_req *alone[1] = {&alone_req};
    const int at0[1] = {0};
    exec *x = make_exec(1, 256, NULL);
    sched_config cfg = make_sched(SCHED_MIXED, 4096, 256);
    drive(x, &cfg, alone, at0, 1, NULL);
    assert_int_equal(exec_cpu_blocks_used(x), 0);

    const sched_policy policies[] = {SCHED_MIXED, SCHED_CHUNKED, SCHED_PREFILL_FIRST};
    for (int p = 0; p < 3; p++) {
        client_req a, b, c, d;
        init_req(&a, 10, 50, 30, 5); /* the same request as alone_req */
        init_req(&b, 11, 20, 40, 6);
        init_req(&c, 12, 180, 8, 7); /* a long prompt, arriving at step 5 */
        init_req(&d, 13, 9, 25, 8);
        client_req *reqs[4] = {&b, &a, &c, &d};
        const int at[4] = {0, 1, 5, 2};
        sched_config pc = make_sched(policies[p], policies[p] == SCHED_CHUNKED ? 24 : 4096, 256);
        drive(x, &pc, reqs, at, 4, NULL);
        assert_int_equal(a.n_answer, 30);
        assert_memory_equal(a.answer, alone_req.answer, sizeof(int32_t) * 30);
        assert_int_equal(exec_cpu_blocks_used(x), 0);
    }
    x->destroy(x);
}

/* A KV pool too small for everyone: the scheduler preempts, the executor recomputes from
 * its token history, and the answers equal those of a roomy pool; two threads agree. */
static void test_preemption_recomputes_identically(void **state)
{
    (void)state;
    client_req roomy[4], tight[4];
    client_req *r1[4], *r2[4];
    const int at[4] = {0, 0, 1, 2};
    for (int i = 0; i < 4; i++) {
        init_req(&roomy[i], 20 + i, 30 + 7 * i, 40, 100 + (uint64_t)i);
        init_req(&tight[i], 20 + i, 30 + 7 * i, 40, 100 + (uint64_t)i);
        r1[i] = &roomy[i];
        r2[i] = &tight[i];
    }
    exec *big = make_exec(1, 256, NULL);
    sched_config cfg = make_sched(SCHED_MIXED, 4096, 256);
    int64_t preempted = 0;
    drive(big, &cfg, r1, at, 4, &preempted);
    assert_int_equal(preempted, 0);
    big->destroy(big);

    exec *small = make_exec(2, 14, NULL); /* 14 blocks: 224 tokens for ~4 x 75 */
    sched_config tight_cfg = make_sched(SCHED_MIXED, 4096, 14);
    drive(small, &tight_cfg, r2, at, 4, &preempted);
    assert_true(preempted > 0);
    for (int i = 0; i < 4; i++)
        assert_memory_equal(tight[i].answer, roomy[i].answer, sizeof(int32_t) * 40);
    assert_int_equal(exec_cpu_blocks_used(small), 0);
    small->destroy(small);
}

/* Sampling rules: EOS never before min_tokens nor with ignore_eos; a temperature answer is
 * a function of its seed (same seed, same answer, whatever the batch), and differs from
 * the greedy one. */
static void test_sampling_rules(void **state)
{
    (void)state;
    exec *x = make_exec(1, 256, NULL);
    sched_config cfg = make_sched(SCHED_MIXED, 4096, 256);
    client_req hot1, hot2, hot_other, greedy, mate;
    init_req(&hot1, 30, 12, 40, 77);
    hot1.seq.temperature = 1.5;
    init_req(&hot2, 31, 12, 40, 77);
    hot2.seq.temperature = 1.5;
    init_req(&hot_other, 32, 12, 40, 78);
    hot_other.seq.temperature = 1.5;
    init_req(&greedy, 33, 12, 40, 77);
    init_req(&mate, 34, 70, 40, 1);
    for (int i = 0; i < 12; i++) /* same prompt for all four */
        hot_other.prompt[i] = hot2.prompt[i] = greedy.prompt[i] = hot1.prompt[i];
    client_req *one[1] = {&hot1};
    const int at[3] = {0, 0, 3};
    drive(x, &cfg, one, at, 1, NULL);
    client_req *three[3] = {&mate, &hot2, &hot_other};
    drive(x, &cfg, three, at, 3, NULL);
    client_req *g[1] = {&greedy};
    drive(x, &cfg, g, at, 1, NULL);
    assert_memory_equal(hot1.answer, hot2.answer, sizeof(int32_t) * 40);
    assert_memory_not_equal(hot1.answer, hot_other.answer, sizeof(int32_t) * 40);
    assert_memory_not_equal(hot1.answer, greedy.answer, sizeof(int32_t) * 40);
    for (int i = 0; i < 40; i++)
        assert_int_not_equal(hot1.answer[i], CPU_EOS_ID); /* ignore_eos */
    x->destroy(x);
}

/* A prompt of only EOS ids makes EOS likely: with ignore_eos off it may end the answer, but
 * never before min_tokens; the executor frees the request when it samples EOS. */
static void test_eos_respects_min_tokens(void **state)
{
    (void)state;
    exec *x = make_exec(1, 256, NULL);
    sched_config cfg = make_sched(SCHED_MIXED, 4096, 256);
    for (uint64_t seed = 1; seed <= 6; seed++) {
        client_req r;
        init_req(&r, 40 + (int64_t)seed, 20, 60, seed);
        r.seq.ignore_eos = false;
        r.seq.min_tokens = 10;
        r.seq.temperature = 3.0; /* flat: EOS gets its 1/300 chance and more */
        client_req *one[1] = {&r};
        const int at[1] = {0};
        char err[ERR_LEN];
        sched *s = sched_create(&cfg, err);
        sched_add(s, &r.sr, err);
        sched_batch batch;
        const exec_seq *seqs[1];
        int32_t token = -1;
        while (sched_next(s, &batch) > 0) {
            seqs[0] = &r.seq;
            int64_t modeled;
            assert_int_equal(x->step(x, &batch, seqs, 0, &token, &modeled, err), 0);
            if (batch.items[0].samples) {
                if (token == CPU_EOS_ID) {
                    assert_true(batch.items[0].req->generated >= 10);
                    assert_true(x->is_eos(x, token));
                    sched_commit(s, &batch);
                    sched_finish(s, &r.sr);
                    break;
                }
            }
            sched_commit(s, &batch);
        }
        (void)one, (void)at;
        sched_free(s);
        assert_int_equal(exec_cpu_blocks_used(x), 0);
    }
    x->destroy(x);
}

/* Released requests (a stop string, a client gone) give their blocks back. */
static void test_release(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    exec *x = make_exec(1, 64, NULL);
    sched_config cfg = make_sched(SCHED_MIXED, 4096, 64);
    sched *s = sched_create(&cfg, err);
    client_req r;
    init_req(&r, 50, 40, 30, 3);
    sched_add(s, &r.sr, err);
    sched_batch batch;
    const exec_seq *seqs[1] = {&r.seq};
    int32_t token;
    int64_t modeled;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sched_next(s, &batch), 1);
        assert_int_equal(x->step(x, &batch, seqs, 0, &token, &modeled, err), 0);
        sched_commit(s, &batch);
    }
    assert_int_equal(exec_cpu_blocks_used(x), 3); /* 42 positions: 3 blocks */
    sched_abort(s, &r.sr);
    exec_cpu_release(x, 50);
    assert_int_equal(exec_cpu_blocks_used(x), 0);
    exec_cpu_release(x, 12345); /* unknown: ignored */
    sched_free(s);
    x->destroy(x);
}

/* Without release, a pool that runs dry takes blocks back from requests not in the step;
 * one of those coming back has its KV recomputed from its tokens in that step (counted),
 * and samples what it would have sampled uninterrupted. */
static void test_eviction_is_honest(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    exec *x = make_exec(1, 4, NULL); /* 64 positions */
    sched_config cfg = make_sched(SCHED_MIXED, 4096, 64); /* the scheduler thinks 64 */
    sched *s = sched_create(&cfg, err);
    client_req a, b;
    init_req(&a, 60, 40, 30, 1);
    init_req(&b, 61, 40, 30, 2);
    sched_batch batch;
    const exec_seq *seqs[2];
    int32_t tokens[2];
    int64_t modeled;
    sched_add(s, &a.sr, err);
    assert_int_equal(sched_next(s, &batch), 1);
    seqs[0] = &a.seq;
    assert_int_equal(x->step(x, &batch, seqs, 0, tokens, &modeled, err), 0);
    sched_commit(s, &batch);
    sched_abort(s, &a.sr); /* gone, but nobody tells the executor */
    sched_add(s, &b.sr, err);
    assert_int_equal(sched_next(s, &batch), 1);
    seqs[0] = &b.seq;
    assert_int_equal(x->step(x, &batch, seqs, 0, tokens, &modeled, err), 0); /* takes a's */
    sched_commit(s, &batch);
    sched_free(s);
    /* a comes back as if it were alive, feeding its first sampled token */
    sched *s2 = sched_create(&cfg, err);
    client_req a2;
    init_req(&a2, 60, 40, 30, 1);
    a2.sr.generated = 1; /* as the first scheduler left it: its second token comes next */
    sched_add(s2, &a2.sr, err);
    sched_next(s2, &batch);
    batch.items[0].context = 40; /* its prompt, whose blocks the pool took back */
    batch.items[0].new_tokens = 1;
    seqs[0] = &a2.seq;
    assert_int_equal(exec_cpu_recomputed_tokens(x), 0);
    assert_int_equal(x->step(x, &batch, seqs, 0, tokens, &modeled, err), 0);
    assert_int_equal(exec_cpu_recomputed_tokens(x), 40);
    sched_free(s2);
    x->destroy(x);

    /* the same request uninterrupted samples the same second token */
    client_req ref;
    init_req(&ref, 60, 40, 2, 1);
    run_alone(&ref);
    assert_int_equal(tokens[0], ref.answer[1]);
}

/* Greedy answers and first logits of a request equal the uncached run's. The logits are
 * compared to 1e-5 of the largest one: the forward pass is deterministic for a given
 * thread count and batch, but a cache hit feeds only the prompt's last rows, so the GEMMs
 * and attention tiles split the work differently than in the uncached prefill and the
 * float sums round differently (seen: at most 9.5e-7 on logits up to 5.4, a few ulps).
 * A wrong key, value or position moves logits by O(1), far past it. */
static void assert_same_answer(const client_req *got, const client_req *want, int n)
{
    assert_int_equal(got->n_answer, n);
    assert_memory_equal(got->answer, want->answer, sizeof(int32_t) * (size_t)n);
    float scale = 0, worst = 0;
    for (int v = 0; v < 300; v++) {
        if (!isfinite(want->first_logits[v])) { /* EOS masked (ignore_eos): -inf in both */
            assert_true(got->first_logits[v] == want->first_logits[v]);
            continue;
        }
        scale = fmaxf(scale, fabsf(want->first_logits[v]));
        worst = fmaxf(worst, fabsf(got->first_logits[v] - want->first_logits[v]));
    }
    assert_true(scale > 0);
    if (worst > 1e-5f * scale)
        fail_msg("first logits differ by %g (largest %g)", (double)worst, (double)scale);
}

/* The prefix caching tests: a prompt of 9 full blocks and 6 tokens, 16 tokens answered. */
enum { PROMPT = 150, ANSWER = 16 };

/* Prefix caching: the same 150-token prompt three times, once uncached for reference. With
 * the cache, the first computes its 9 full blocks; the second, arriving while the first
 * runs, shares them (144 positions), the third, arriving after both left, finds them kept.
 * Both answer as the uncached request does, and nothing is recomputed. */
static void test_cached_prefix_same_logits(void **state)
{
    (void)state;
    client_req ref;
    init_req(&ref, 1, PROMPT, ANSWER, 3);
    run_alone(&ref);
    sched_config cfg = make_sched(SCHED_MIXED, 4096, 64);

    client_req first, during, after;
    init_req(&first, 10, PROMPT, ANSWER, 3);
    init_req(&during, 11, PROMPT, ANSWER, 3);
    init_req(&after, 12, PROMPT, ANSWER, 3);
    client_req *reqs[3] = {&first, &during, &after};
    for (int i = 0; i < 3; i++)
        name_blocks(reqs[i]);
    const int at[3] = {0, 3, 40}; /* the first ends at step 16 */
    exec *x = make_exec(1, 64, NULL);
    cfg.prefix_caching = true;
    drive(x, &cfg, reqs, at, 3, NULL);
    for (int i = 0; i < 3; i++)
        assert_same_answer(reqs[i], &ref, ANSWER);
    assert_int_equal(exec_cpu_reused_tokens(x), 2 * 144);
    assert_int_equal(exec_cpu_recomputed_tokens(x), 0);
    assert_int_equal(exec_cpu_blocks_used(x), 0);
    assert_int_equal(exec_cpu_blocks_kept(x), 9); /* shared, not copied: one set */
    x->destroy(x);
}

/* The executor lost blocks the scheduler still counts cached: all of them (dropped by
 * force), or its deepest one (its pool is smaller than the scheduler's, and another prompt
 * took the block). The missing positions are recomputed and the answer is still the
 * uncached one. */
static void test_evicted_prefix_recomputed(void **state)
{
    (void)state;
    client_req ref;
    init_req(&ref, 1, PROMPT, ANSWER, 4);
    run_alone(&ref);
    sched_config cfg = make_sched(SCHED_MIXED, 4096, 64);
    cfg.prefix_caching = true;

    client_req first, second;
    init_req(&first, 10, PROMPT, ANSWER, 4);
    init_req(&second, 11, PROMPT, ANSWER, 4);
    client_req *two[2] = {&first, &second};
    name_blocks(&first);
    name_blocks(&second);
    const int at[2] = {0, 30};
    exec *x = make_exec(1, 64, NULL);
    drive_dropping(x, &cfg, two, at, 2, NULL, 25);
    assert_same_answer(&second, &ref, ANSWER);
    assert_int_equal(exec_cpu_reused_tokens(x), 0);
    assert_int_equal(exec_cpu_recomputed_tokens(x), 144);
    x->destroy(x);

    /* 12 blocks here, 64 for the scheduler: the first leaves 9 kept and 2 free, the other
     * prompt (50 tokens, 4 blocks) evicts the deepest kept one */
    client_req again, other, third;
    init_req(&again, 20, PROMPT, ANSWER, 4);
    init_req(&other, 21, 50, 2, 9);
    init_req(&third, 22, PROMPT, ANSWER, 4);
    client_req *three[3] = {&again, &other, &third};
    for (int i = 0; i < 3; i++)
        name_blocks(three[i]);
    const int at3[3] = {0, 20, 30};
    exec *small = make_exec(1, 12, NULL);
    drive(small, &cfg, three, at3, 3, NULL);
    assert_same_answer(&third, &ref, ANSWER);
    assert_int_equal(exec_cpu_reused_tokens(small), 128);
    assert_int_equal(exec_cpu_recomputed_tokens(small), 16);
    assert_int_equal(exec_cpu_blocks_used(small), 0);
    small->destroy(small);
}

/* Hashes that do not name the ids the executor computes (as when the engine names a text
 * prompt's blocks by the server's ids while the executor draws its own): the second
 * request, under the first one's names, is a scheduler hit, but the executor shares
 * nothing, recomputes, and answers with its own ids. */
static void test_foreign_names_not_shared(void **state)
{
    (void)state;
    client_req ref;
    init_req(&ref, 1, PROMPT, ANSWER, 5);
    run_alone(&ref);
    sched_config cfg = make_sched(SCHED_MIXED, 4096, 64);
    cfg.prefix_caching = true;

    client_req first, second;
    init_req(&first, 10, PROMPT, ANSWER, 6); /* other ids */
    init_req(&second, 11, PROMPT, ANSWER, 5);
    name_blocks(&first);
    memcpy(second.hashes, first.hashes, sizeof second.hashes); /* the first one's names */
    second.sr.block_hashes = second.hashes;
    second.sr.n_block_hashes = first.sr.n_block_hashes;
    client_req *two[2] = {&first, &second};
    const int at[2] = {0, 30};
    exec *x = make_exec(1, 64, NULL);
    drive(x, &cfg, two, at, 2, NULL);
    assert_same_answer(&second, &ref, ANSWER);
    assert_int_equal(exec_cpu_reused_tokens(x), 0);
    assert_int_equal(exec_cpu_recomputed_tokens(x), 144);
    assert_int_equal(exec_cpu_blocks_kept(x), 9); /* the first one's; the second kept none */
    x->destroy(x);
}

static void test_text_and_tokens(void **state)
{
    (void)state;
    exec *x = make_exec(1, 16, NULL);
    assert_string_equal(x->name, "cpu");
    assert_false(x->paced);
    assert_int_equal(x->vocab_size, 300);
    size_t len = 99;
    assert_string_equal(x->token_text(x, CPU_EOS_ID, &len), "");
    assert_int_equal(len, 0);
    const char *t = x->token_text(x, 0, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(t, " the", 4);
    x->token_text(x, 299, &len);
    assert_true(len > 1);
    x->token_text(x, 300, &len); /* out of range: no text */
    assert_int_equal(len, 0);
    assert_true(x->is_eos(x, CPU_EOS_ID));
    assert_false(x->is_eos(x, 0));
    int32_t ids[8];
    assert_int_equal(x->tokenize(x, "The quick brownish fox", 22, ids, 8), 6);
    for (int i = 0; i < 6; i++)
        assert_true(ids[i] >= 0 && ids[i] < 300);
    x->destroy(x);
}

/* Text prompts (no ids) get ids from (seed, position): two requests with the same seed
 * answer alike. With a CPU cost model, modeled_ns is its prediction. */
static void test_text_prompt_and_modeled_ns(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    cost_gpu g;
    assert_int_equal(cost_gpu_find("cpu", &g, err), 0);
    cost_arch a = test_arch();
    cost_params cost;
    cost_params_init(&cost, &g, &a);
    exec *x = make_exec(1, 64, &cost);
    sched_config cfg = make_sched(SCHED_MIXED, 4096, 64);
    client_req r1, r2;
    init_req(&r1, 70, 30, 10, 9);
    init_req(&r2, 71, 30, 10, 9);
    r1.seq.prompt_ids = r2.seq.prompt_ids = NULL;
    client_req *one[1] = {&r1}, *two[1] = {&r2};
    const int at[1] = {0};
    drive(x, &cfg, one, at, 1, NULL);
    drive(x, &cfg, two, at, 1, NULL);
    assert_memory_equal(r1.answer, r2.answer, sizeof(int32_t) * 10);

    sched *s = sched_create(&cfg, err);
    client_req r;
    init_req(&r, 72, 30, 2, 1);
    sched_add(s, &r.sr, err);
    sched_batch batch;
    sched_next(s, &batch);
    const exec_seq *seqs[1] = {&r.seq};
    int32_t token;
    int64_t modeled = -1;
    assert_int_equal(x->step(x, &batch, seqs, 0, &token, &modeled, err), 0);
    const cost_seq cs = {30, 0, true};
    assert_int_equal(modeled, cost_step_ns(&cost, &cs, 1, NULL));
    assert_true(modeled > 0);
    sched_commit(s, &batch);
    sched_free(s);
    exec_cpu_release(x, 72);
    x->destroy(x);
}

/* The warm start: the KV arena allocated (only the warm-up step's blocks resident), the
 * buffers of a budget-sized step written, one step of that size run; afterwards every block
 * is free and answers are the same as from a cold executor. Refused once a request is held. */
static void test_warm_start(void **state)
{
    (void)state;
    const sched_config cfg = make_sched(SCHED_MIXED, 512, 100);
    client_req cold_req, warm_req;
    init_req(&cold_req, 1, 120, 20, 9);
    init_req(&warm_req, 1, 120, 20, 9);
    const int at[1] = {0};

    exec *cold = make_exec(1, 100, NULL);
    client_req *cold_list[1] = {&cold_req};
    drive(cold, &cfg, cold_list, at, 1, NULL);
    cold->destroy(cold);

    exec *x = make_exec(2, 100, NULL);
    assert_non_null(x->warm);
    exec_warm_info info;
    char err[ERR_LEN] = "";
    assert_int_equal(x->warm(x, &cfg, &info, err), 0);
    /* 2 layers x K and V x 100 blocks x 2 KV heads x 16 x 16 halves */
    assert_true(info.kv_bytes == 2.0 * 2 * 100 * 2 * 16 * 16 * 2);
    assert_int_equal(info.step_tokens, 512);
    assert_int_equal(info.step_seqs, 64); /* max_num_seqs */
    /* 64 sequences of 8 tokens: one block each, the rest of the arena never written */
    assert_true(info.kv_resident_bytes == 2.0 * 2 * 64 * 2 * 16 * 16 * 2);
    assert_true(info.scratch_bytes > 512.0 * 64 * 4); /* at least the residual stream */
    assert_true(info.forward_ns > 0 && info.ns >= info.forward_ns);
    assert_int_equal(exec_cpu_blocks_used(x), 0);
    client_req *warm_list[1] = {&warm_req};
    drive(x, &cfg, warm_list, at, 1, NULL);
    assert_int_equal(warm_req.n_answer, cold_req.n_answer);
    assert_memory_equal(warm_req.answer, cold_req.answer, sizeof(int32_t) * (size_t)cold_req.n_answer);
    assert_int_equal(exec_cpu_blocks_used(x), 0);

    /* a budget past what the KV cache holds: the step shrinks to the cache */
    const sched_config big = make_sched(SCHED_MIXED, 16384, 100);
    assert_int_equal(x->warm(x, &big, &info, err), 0);
    assert_int_equal(info.step_tokens, 100 * 16);
    assert_int_equal(info.step_seqs, 1); /* one sequence of every block: nothing left to split */
    assert_true(info.kv_resident_bytes == info.kv_bytes);

    /* a request in flight: no warm start over it */
    client_req held;
    init_req(&held, 7, 40, 5, 1);
    sched *s = sched_create(&cfg, err);
    assert_non_null(s);
    assert_int_equal(sched_add(s, &held.sr, err), 0);
    sched_batch batch;
    assert_int_equal(sched_next(s, &batch), 1);
    const exec_seq *seqs[1] = {&held.seq};
    int32_t tokens[1];
    int64_t modeled;
    assert_int_equal(x->step(x, &batch, seqs, 0, tokens, &modeled, err), 0);
    assert_int_equal(x->warm(x, &cfg, &info, err), -1);
    assert_non_null(strstr(err, "before any request"));
    sched_free(s);
    x->destroy(x);
}

static void test_create_refuses(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    exec *x = NULL;
    exec_cpu_config cfg = {.arch = test_arch(), .threads = 1, .kv_blocks = 0};
    assert_int_equal(exec_cpu_create(&cfg, &x, err), -1); /* no KV blocks */
    assert_null(x);
    assert_non_null(strstr(err, "blocks"));
    cfg.kv_blocks = 16;
    cfg.arch.n_kv_heads = 3;
    assert_int_equal(exec_cpu_create(&cfg, &x, err), -1);
    assert_null(x);
    cost_arch big;
    assert_int_equal(cost_arch_find("llama-3.1-8b", &big, err), 0);
    cfg.arch = big;
    cfg.max_weight_bytes = 1e9;
    assert_int_equal(exec_cpu_create(&cfg, &x, err), -1);
    assert_non_null(strstr(err, "GB"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answers_independent_of_company),
        cmocka_unit_test(test_preemption_recomputes_identically),
        cmocka_unit_test(test_sampling_rules),
        cmocka_unit_test(test_eos_respects_min_tokens),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_eviction_is_honest),
        cmocka_unit_test(test_cached_prefix_same_logits),
        cmocka_unit_test(test_evicted_prefix_recomputed),
        cmocka_unit_test(test_foreign_names_not_shared),
        cmocka_unit_test(test_text_and_tokens),
        cmocka_unit_test(test_text_prompt_and_modeled_ns),
        cmocka_unit_test(test_warm_start),
        cmocka_unit_test(test_create_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
