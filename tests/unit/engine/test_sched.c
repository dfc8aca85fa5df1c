/* Unit tests for the continuous-batching scheduler. Every expectation below is computed by
 * hand from the rules in sched.h; the comments show the arithmetic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/rng.h"
#include "engine/sched.h"

/* ---- helpers ---------------------------------------------------------------------- */

static sched_config make_config(sched_policy policy, int budget, int max_num_seqs,
                                int64_t kv_blocks)
{
    sched_config cfg = {
        .policy = policy,
        .max_num_batched_tokens = budget,
        .max_num_seqs = max_num_seqs,
        .max_model_len = 1 << 20,
        .block_size = 16,
        .kv_blocks = kv_blocks,
    };
    return cfg;
}

static sched *create_or_fail(const sched_config *cfg)
{
    char err[ERR_LEN] = "";
    sched *s = sched_create(cfg, err);
    if (!s)
        fail_msg("sched_create: %s", err);
    return s;
}

static void init_req(sched_req *req, int64_t id, int prompt_tokens, int max_tokens)
{
    memset(req, 0, sizeof *req);
    req->id = id;
    req->prompt_tokens = prompt_tokens;
    req->max_tokens = max_tokens;
}

static void add_or_fail(sched *s, sched_req *req)
{
    char err[ERR_LEN] = "";
    if (sched_add(s, req, err) != 0)
        fail_msg("sched_add(%lld): %s", (long long)req->id, err);
}

/* One step: build and commit at once. */
static int step(sched *s, sched_batch *batch)
{
    int n = sched_next(s, batch);
    sched_commit(s, batch);
    return n;
}

static int total_new_tokens(const sched_batch *batch)
{
    int total = 0;
    for (int i = 0; i < batch->n_items; i++)
        total += batch->items[i].new_tokens;
    return total;
}

/* Admit `n` one-token prompts in one step so they are all decoding afterwards. */
static void start_decoders(sched *s, sched_req *reqs, int n, int64_t first_id, int max_tokens)
{
    for (int i = 0; i < n; i++) {
        init_req(&reqs[i], first_id + i, 1, max_tokens);
        add_or_fail(s, &reqs[i]);
    }
    sched_batch batch;
    assert_int_equal(step(s, &batch), n);
    for (int i = 0; i < n; i++)
        assert_int_equal(reqs[i].state, SCHED_DECODING);
}

/* ---- config and parsing --------------------------------------------------------------- */

static void test_config_check(void **state)
{
    (void)state;
    char err[ERR_LEN];
    sched_config good = make_config(SCHED_MIXED, 16384, 256, 1000);
    assert_int_equal(sched_config_check(&good, err), 0);

    sched_config bad = good;
    bad.block_size = 0;
    assert_int_equal(sched_config_check(&bad, err), -1);
    assert_non_null(strstr(err, "block_size"));
    bad = good;
    bad.kv_blocks = 0;
    assert_int_equal(sched_config_check(&bad, err), -1);
    assert_non_null(strstr(err, "kv_blocks"));
    bad = good;
    bad.max_num_batched_tokens = -1;
    assert_int_equal(sched_config_check(&bad, err), -1);
    bad = good;
    bad.max_num_seqs = 0;
    assert_int_equal(sched_config_check(&bad, err), -1);
    bad = good;
    bad.max_model_len = 0;
    assert_int_equal(sched_config_check(&bad, err), -1);
    bad = good;
    bad.policy = (sched_policy)7;
    assert_int_equal(sched_config_check(&bad, err), -1);
    assert_null(sched_create(&bad, err));
}

static void test_policy_parse(void **state)
{
    (void)state;
    char err[ERR_LEN];
    sched_policy p = SCHED_MIXED;
    assert_int_equal(sched_policy_parse("chunked", &p, err), 0);
    assert_int_equal(p, SCHED_CHUNKED);
    assert_int_equal(sched_policy_parse("prefill-first", &p, err), 0);
    assert_int_equal(p, SCHED_PREFILL_FIRST);
    assert_int_equal(sched_policy_parse("mixed", &p, err), 0);
    assert_int_equal(p, SCHED_MIXED);
    assert_int_equal(sched_policy_parse("fcfs", &p, err), -1);
    assert_non_null(strstr(err, "fcfs"));
    assert_string_equal(sched_policy_name(SCHED_PREFILL_FIRST), "prefill-first");
}

/* ---- policies ------------------------------------------------------------------------ */

/* Running decodes come before any prefill in the items, under mixed and chunked. */
static void test_decode_first_order(void **state)
{
    (void)state;
    const sched_policy policies[] = {SCHED_MIXED, SCHED_CHUNKED};
    for (int p = 0; p < 2; p++) {
        sched_config cfg = make_config(policies[p], 1000, 64, 1000);
        sched *s = create_or_fail(&cfg);
        sched_req decoders[3], prompt;
        start_decoders(s, decoders, 3, 1, 100);
        init_req(&prompt, 10, 50, 10);
        add_or_fail(s, &prompt);

        sched_batch batch;
        assert_int_equal(sched_next(s, &batch), 4);
        for (int i = 0; i < 3; i++) {
            assert_ptr_equal(batch.items[i].req, &decoders[i]); /* admission order */
            assert_int_equal(batch.items[i].new_tokens, 1);
            assert_int_equal(batch.items[i].context, 1);
            assert_true(batch.items[i].samples);
        }
        assert_ptr_equal(batch.items[3].req, &prompt);
        assert_int_equal(batch.items[3].new_tokens, 50);
        assert_int_equal(batch.items[3].context, 0);
        assert_true(batch.items[3].samples);
        assert_int_equal(batch.decode_tokens, 3);
        assert_int_equal(batch.prefill_tokens, 50);
        sched_commit(s, &batch);
        assert_int_equal(prompt.state, SCHED_DECODING);
        assert_int_equal(prompt.generated, 1);
        assert_int_equal(prompt.computed, 50);
        sched_free(s);
    }
}

/* Budget 100 and 30 running decodes leave 70: an 80-token prompt waits, 70 is admitted. */
static void test_mixed_admits_only_whole_prompt_that_fits(void **state)
{
    (void)state;
    sched_config cfg = make_config(SCHED_MIXED, 100, 256, 10000);
    sched_batch batch;

    sched *s = create_or_fail(&cfg);
    sched_req decoders[30], too_long;
    start_decoders(s, decoders, 30, 1, 1000);
    init_req(&too_long, 100, 80, 10);
    add_or_fail(s, &too_long);
    assert_int_equal(sched_next(s, &batch), 30);
    assert_int_equal(batch.decode_tokens, 30);
    assert_int_equal(batch.prefill_tokens, 0);
    sched_commit(s, &batch);
    assert_int_equal(too_long.state, SCHED_WAITING);
    assert_int_equal(too_long.n_blocks, 0);
    assert_int_equal(sched_num_waiting(s), 1);
    sched_free(s);

    s = create_or_fail(&cfg);
    sched_req decoders2[30], fits;
    start_decoders(s, decoders2, 30, 1, 1000);
    init_req(&fits, 100, 70, 10);
    add_or_fail(s, &fits);
    assert_int_equal(sched_next(s, &batch), 31);
    assert_int_equal(batch.decode_tokens, 30);
    assert_int_equal(batch.prefill_tokens, 70);
    assert_int_equal(total_new_tokens(&batch), 100);
    assert_ptr_equal(batch.items[30].req, &fits);
    assert_int_equal(fits.n_blocks, 5); /* ceil(70 / 16) */
    sched_commit(s, &batch);
    assert_int_equal(fits.state, SCHED_DECODING);
    sched_free(s);
}

static void test_prompt_over_budget(void **state)
{
    (void)state;
    const sched_policy refusing[] = {SCHED_MIXED, SCHED_PREFILL_FIRST};
    for (int p = 0; p < 2; p++) {
        sched_config cfg = make_config(refusing[p], 16384, 256, 100000);
        sched *s = create_or_fail(&cfg);
        sched_req req;
        init_req(&req, 1, 20000, 10);
        char err[ERR_LEN] = "";
        assert_int_equal(sched_add(s, &req, err), -1);
        assert_non_null(strstr(err, "20000"));
        assert_non_null(strstr(err, "max_num_batched_tokens=16384"));
        assert_non_null(strstr(err, "--policy chunked"));
        assert_int_equal(sched_num_waiting(s), 0);
        /* exactly the budget is fine */
        init_req(&req, 2, 16384, 10);
        assert_int_equal(sched_add(s, &req, err), 0);
        sched_free(s);
    }
    sched_config cfg = make_config(SCHED_CHUNKED, 16384, 256, 100000);
    sched *s = create_or_fail(&cfg);
    sched_req req;
    init_req(&req, 1, 20000, 10);
    add_or_fail(s, &req);
    assert_int_equal(sched_num_waiting(s), 1);
    sched_free(s);
}

/* Budget 512, a 1300-token prompt: 512 (ctx 0), 512 (ctx 512), 276 (ctx 1024), sampling
 * only on the last. With 3 decodes running: 509 (ctx 0), 509 (ctx 509), 282 (ctx 1018). */
static void test_chunked_continuation(void **state)
{
    (void)state;
    sched_config cfg = make_config(SCHED_CHUNKED, 512, 256, 10000);
    sched_batch batch;

    sched *s = create_or_fail(&cfg);
    sched_req prompt;
    init_req(&prompt, 1, 1300, 5);
    add_or_fail(s, &prompt);
    const int chunks[] = {512, 512, 276}, contexts[] = {0, 512, 1024};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sched_next(s, &batch), 1);
        assert_int_equal(batch.items[0].new_tokens, chunks[i]);
        assert_int_equal(batch.items[0].context, contexts[i]);
        assert_int_equal(batch.items[0].samples, i == 2);
        assert_int_equal(batch.prefill_tokens, chunks[i]);
        assert_int_equal(batch.decode_tokens, 0);
        assert_int_equal(prompt.state, SCHED_PREFILLING);
        sched_commit(s, &batch);
        assert_int_equal(prompt.generated, i == 2 ? 1 : 0);
    }
    assert_int_equal(prompt.state, SCHED_DECODING);
    assert_int_equal(prompt.computed, 1300);
    assert_int_equal(prompt.n_blocks, 82); /* ceil(1300 / 16) */
    assert_int_equal(sched_next(s, &batch), 1);
    assert_int_equal(batch.items[0].new_tokens, 1);
    assert_int_equal(batch.items[0].context, 1300);
    assert_int_equal(batch.decode_tokens, 1);
    sched_commit(s, &batch);
    sched_free(s);

    s = create_or_fail(&cfg);
    sched_req decoders[3];
    start_decoders(s, decoders, 3, 10, 100);
    init_req(&prompt, 1, 1300, 5);
    add_or_fail(s, &prompt);
    const int chunks2[] = {509, 509, 282}, contexts2[] = {0, 509, 1018};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sched_next(s, &batch), 4);
        assert_int_equal(batch.decode_tokens, 3);
        assert_ptr_equal(batch.items[3].req, &prompt);
        assert_int_equal(batch.items[3].new_tokens, chunks2[i]);
        assert_int_equal(batch.items[3].context, contexts2[i]);
        assert_int_equal(batch.items[3].samples, i == 2);
        assert_int_equal(total_new_tokens(&batch), i == 2 ? 285 : 512);
        sched_commit(s, &batch);
    }
    assert_int_equal(prompt.generated, 1);
    sched_free(s);
}

/* Prefill-first: a fitting waiting prompt makes the step prefill-only (running decoders
 * wait through it); otherwise the step is decode-only. */
static void test_prefill_first_steps(void **state)
{
    (void)state;
    sched_config cfg = make_config(SCHED_PREFILL_FIRST, 100, 256, 10000);
    sched *s = create_or_fail(&cfg);
    sched_req decoders[2], a, b, c;
    start_decoders(s, decoders, 2, 1, 100);

    sched_batch batch;
    assert_int_equal(step(s, &batch), 2); /* nothing waiting: decode-only */
    assert_int_equal(batch.decode_tokens, 2);

    init_req(&a, 10, 40, 10);
    init_req(&b, 11, 50, 10);
    init_req(&c, 12, 30, 10); /* 40 + 50 + 30 > 100: waits for the next prefill step */
    add_or_fail(s, &a);
    add_or_fail(s, &b);
    add_or_fail(s, &c);
    assert_int_equal(sched_next(s, &batch), 2);
    assert_ptr_equal(batch.items[0].req, &a);
    assert_ptr_equal(batch.items[1].req, &b);
    assert_int_equal(batch.decode_tokens, 0);
    assert_int_equal(batch.prefill_tokens, 90);
    sched_commit(s, &batch);
    assert_int_equal(decoders[0].generated, 2); /* 1 + 1 decode step, none in this one */

    assert_int_equal(sched_next(s, &batch), 1); /* c fits: prefill-only again */
    assert_ptr_equal(batch.items[0].req, &c);
    assert_int_equal(batch.prefill_tokens, 30);
    sched_commit(s, &batch);

    assert_int_equal(sched_next(s, &batch), 5); /* nothing waiting: all five decode */
    assert_int_equal(batch.decode_tokens, 5);
    assert_int_equal(batch.prefill_tokens, 0);
    sched_commit(s, &batch);
    sched_free(s);

    /* A head that does not fit (max_num_seqs reached) gives a decode-only step. */
    cfg.max_num_seqs = 2;
    s = create_or_fail(&cfg);
    start_decoders(s, decoders, 2, 1, 100);
    init_req(&a, 10, 40, 10);
    add_or_fail(s, &a);
    assert_int_equal(sched_next(s, &batch), 2);
    assert_int_equal(batch.decode_tokens, 2);
    assert_int_equal(a.state, SCHED_WAITING);
    sched_commit(s, &batch);
    sched_free(s);
}

static void assert_changes(const sched_batch *batch, int n, const sched_req *const *reqs,
                           const sched_change_kind *kinds)
{
    assert_int_equal(batch->n_changes, n);
    for (int i = 0; i < n; i++) {
        assert_ptr_equal(batch->changes[i].req, reqs[i]);
        assert_int_equal(batch->changes[i].kind, kinds[i]);
    }
}

/* 4 blocks of 16 tokens. a and b (prompt 16, 40 tokens each) are admitted together and take
 * 1 block each, then a 2nd each at context 16 (step 6): the cache is full. At step 18 a
 * (context 32) needs a 3rd block: b, the newest, is preempted (generated 17) and goes to the
 * front of the queue, ahead of c which was waiting for a block. b comes back after a
 * finishes (step 40), recomputing 16 + 17 = 33 tokens in 3 blocks; c (1 block) follows it
 * in the same step. The steps' changes: b PREEMPTED at step 18, RESUMED at step 41 (c is new:
 * no change), nothing else. */
static void test_preemption_recompute(void **state)
{
    (void)state;
    sched_config cfg = make_config(SCHED_MIXED, 256, 256, 4);
    sched *s = create_or_fail(&cfg);
    sched_req a, b, c;
    init_req(&a, 1, 16, 40);
    init_req(&b, 2, 16, 40);
    init_req(&c, 3, 16, 1);
    add_or_fail(s, &a);
    add_or_fail(s, &b);

    sched_batch batch;
    assert_int_equal(step(s, &batch), 2);
    assert_int_equal(sched_blocks_used(s), 2);
    add_or_fail(s, &c);
    for (int k = 2; k <= 17; k++) {
        assert_int_equal(step(s, &batch), 2); /* c never gets in: no block for it */
        assert_int_equal(batch.n_preempted, 0);
        assert_int_equal(batch.n_changes, 0);
    }
    assert_int_equal(sched_blocks_used(s), 4);
    assert_int_equal(c.state, SCHED_WAITING);

    /* step 18 */
    assert_int_equal(sched_next(s, &batch), 1);
    assert_ptr_equal(batch.items[0].req, &a);
    assert_int_equal(batch.items[0].context, 32);
    assert_int_equal(batch.n_preempted, 1);
    assert_changes(&batch, 1, (const sched_req *[]){&b},
                   (const sched_change_kind[]){SCHED_CHANGE_PREEMPTED});
    assert_int_equal(b.state, SCHED_WAITING);
    assert_int_equal(b.computed, 0);
    assert_int_equal(b.n_blocks, 0);
    assert_int_equal(b.generated, 17);
    assert_int_equal(b.n_preemptions, 1);
    assert_int_equal(sched_num_preemptions(s), 1);
    assert_int_equal(a.n_blocks, 3);
    assert_int_equal(sched_blocks_used(s), 3);
    assert_int_equal(sched_num_waiting(s), 2);
    sched_commit(s, &batch);

    /* steps 19..40: a alone (b needs 3 blocks, 1 free; c may not overtake b) */
    for (int k = 19; k <= 40; k++) {
        assert_int_equal(step(s, &batch), 1);
        assert_ptr_equal(batch.items[0].req, &a);
        assert_int_equal(batch.n_changes, 0);
    }
    assert_int_equal(a.state, SCHED_FINISHED);
    assert_int_equal(a.generated, 40);
    assert_int_equal(sched_blocks_used(s), 0);

    /* step 41: b recomputes prompt + generated, then c */
    assert_int_equal(sched_next(s, &batch), 2);
    assert_ptr_equal(batch.items[0].req, &b);
    assert_int_equal(batch.items[0].new_tokens, 33);
    assert_int_equal(batch.items[0].context, 0);
    assert_true(batch.items[0].samples);
    assert_ptr_equal(batch.items[1].req, &c);
    assert_int_equal(batch.prefill_tokens, 49);
    assert_changes(&batch, 1, (const sched_req *[]){&b},
                   (const sched_change_kind[]){SCHED_CHANGE_RESUMED});
    assert_int_equal(b.n_blocks, 3);
    sched_commit(s, &batch);
    assert_int_equal(b.generated, 18);
    assert_int_equal(b.state, SCHED_DECODING);
    assert_int_equal(c.state, SCHED_FINISHED); /* max_tokens 1 */

    int steps = 0;
    while (sched_next(s, &batch) > 0) {
        sched_commit(s, &batch);
        steps++;
    }
    assert_int_equal(steps, 40 - 18);
    assert_int_equal(b.state, SCHED_FINISHED);
    assert_int_equal(sched_blocks_used(s), 0);
    assert_int_equal(sched_num_running(s), 0);
    assert_int_equal(sched_num_waiting(s), 0);
    sched_free(s);
}

/* Chunked, budget 17, 3 blocks. Step 1: a takes 16 tokens (1 block), b a 1-token chunk
 * (1 block). Step 2: a decodes at context 16 and takes the last block; b's next chunk of 16
 * (to 17 tokens, 2 blocks) finds none free and b, the newest running request, is the
 * victim: preempted and skipped, a's decode stays. b would fit again right away (16
 * tokens of budget left, 1 free block) but a step that preempted admits nobody. b comes
 * back for good after a finishes. */
static void test_preemption_of_self(void **state)
{
    (void)state;
    sched_config cfg = make_config(SCHED_CHUNKED, 17, 256, 3);
    sched *s = create_or_fail(&cfg);
    sched_req a, b;
    init_req(&a, 1, 16, 30); /* max KV 45 tokens: 3 blocks */
    init_req(&b, 2, 40, 2);  /* max KV 41 tokens: 3 blocks */
    add_or_fail(s, &a);
    add_or_fail(s, &b);

    sched_batch batch;
    assert_int_equal(step(s, &batch), 2);
    assert_int_equal(batch.items[0].new_tokens, 16);
    assert_int_equal(batch.items[1].new_tokens, 1);
    assert_false(batch.items[1].samples);
    assert_int_equal(sched_blocks_used(s), 2);

    assert_int_equal(sched_next(s, &batch), 1);
    assert_ptr_equal(batch.items[0].req, &a);
    assert_int_equal(batch.decode_tokens, 1);
    assert_int_equal(batch.n_preempted, 1);
    assert_int_equal(b.state, SCHED_WAITING);
    assert_int_equal(b.computed, 0);
    assert_int_equal(b.n_preemptions, 1);
    assert_int_equal(a.n_blocks, 2);
    assert_int_equal(sched_blocks_used(s), 2);
    sched_commit(s, &batch);

    while (sched_next(s, &batch) > 0)
        sched_commit(s, &batch);
    assert_int_equal(a.state, SCHED_FINISHED);
    assert_int_equal(b.state, SCHED_FINISHED);
    assert_int_equal(b.generated, 2);
    /* b thrashes while a holds 2 blocks: re-admitted with 16 tokens (1 block) on odd steps,
     * preempting itself on its next chunk on even steps 2..16; at step 18 a (context 32)
     * takes the 3rd block and b is preempted once more: 9 in all. */
    assert_int_equal(b.n_preemptions, 9);
    assert_int_equal(sched_num_preemptions(s), 9);
    assert_int_equal(sched_blocks_used(s), 0);
    sched_free(s);
}

/* Mixed FCFS: a long prompt at the head is not overtaken by later short ones; it runs when
 * the decoders finish and free the budget. */
static void test_fcfs_no_starvation(void **state)
{
    (void)state;
    sched_config cfg = make_config(SCHED_MIXED, 100, 256, 10000);
    sched *s = create_or_fail(&cfg);
    sched_req decoders[30], long_prompt, shorts[3];
    start_decoders(s, decoders, 30, 1, 5); /* generated 1 after this */
    init_req(&long_prompt, 100, 90, 10);
    add_or_fail(s, &long_prompt);
    for (int i = 0; i < 3; i++) {
        init_req(&shorts[i], 200 + i, 5, 10);
        add_or_fail(s, &shorts[i]);
    }
    sched_batch batch;
    /* generated 2..5: 30 decodes, 70 tokens left < 90, and the 5-token prompts would fit
     * but must not overtake */
    for (int k = 2; k <= 5; k++) {
        assert_int_equal(step(s, &batch), 30);
        assert_int_equal(batch.prefill_tokens, 0);
        assert_int_equal(sched_num_waiting(s), 4);
    }
    assert_int_equal(sched_num_running(s), 0); /* all 30 reached max_tokens 5 */
    assert_int_equal(sched_next(s, &batch), 3);
    assert_ptr_equal(batch.items[0].req, &long_prompt);
    assert_int_equal(batch.items[0].new_tokens, 90);
    assert_ptr_equal(batch.items[1].req, &shorts[0]);
    assert_ptr_equal(batch.items[2].req, &shorts[1]);
    assert_int_equal(total_new_tokens(&batch), 100); /* shorts[2] would make 105 */
    sched_commit(s, &batch);
    assert_int_equal(shorts[2].state, SCHED_WAITING);
    sched_free(s);
}

static void test_max_num_seqs_cap(void **state)
{
    (void)state;
    sched_config cfg = make_config(SCHED_CHUNKED, 1000, 2, 10000);
    sched *s = create_or_fail(&cfg);
    sched_req reqs[3];
    init_req(&reqs[0], 1, 10, 1);
    init_req(&reqs[1], 2, 10, 3);
    init_req(&reqs[2], 3, 10, 3);
    for (int i = 0; i < 3; i++)
        add_or_fail(s, &reqs[i]);
    sched_batch batch;
    assert_int_equal(sched_next(s, &batch), 2);
    assert_int_equal(sched_num_running(s), 2);
    assert_int_equal(reqs[2].state, SCHED_WAITING);
    sched_commit(s, &batch); /* reqs[0] finishes (max_tokens 1) */
    assert_int_equal(reqs[0].state, SCHED_FINISHED);
    assert_int_equal(sched_next(s, &batch), 2); /* reqs[1] decode, reqs[2] admitted */
    assert_ptr_equal(batch.items[1].req, &reqs[2]);
    assert_int_equal(sched_num_running(s), 2);
    sched_commit(s, &batch);
    sched_free(s);
}

static void test_finish_and_abort(void **state)
{
    (void)state;
    sched_config cfg = make_config(SCHED_MIXED, 1000, 256, 100);
    sched *s = create_or_fail(&cfg);
    sched_req a, b, c, d;
    init_req(&a, 1, 40, 10); /* 3 blocks */
    init_req(&b, 2, 20, 10); /* 2 blocks */
    add_or_fail(s, &a);
    add_or_fail(s, &b);
    sched_batch batch;
    assert_int_equal(step(s, &batch), 2);
    assert_int_equal(sched_blocks_used(s), 5);

    sched_finish(s, &a);
    assert_int_equal(a.state, SCHED_FINISHED);
    assert_int_equal(a.n_blocks, 0);
    assert_int_equal(sched_blocks_used(s), 2);
    assert_int_equal(sched_num_running(s), 1);
    sched_finish(s, &a);
    sched_abort(s, &a); /* no-op: already finished */
    assert_int_equal(a.state, SCHED_FINISHED);
    assert_int_equal(sched_blocks_used(s), 2);
    assert_int_equal(sched_num_running(s), 1);

    sched_abort(s, &b);
    assert_int_equal(b.state, SCHED_ABORTED);
    sched_abort(s, &b);
    assert_int_equal(sched_blocks_used(s), 0);
    assert_int_equal(sched_num_running(s), 0);

    /* waiting requests leave the queue */
    init_req(&c, 3, 10, 10);
    add_or_fail(s, &c);
    sched_abort(s, &c);
    assert_int_equal(sched_num_waiting(s), 0);
    assert_int_equal(sched_next(s, &batch), 0);

    /* ended while its step runs: the commit skips it */
    init_req(&d, 4, 10, 10);
    add_or_fail(s, &d);
    assert_int_equal(sched_next(s, &batch), 1);
    assert_int_equal(sched_blocks_used(s), 1);
    sched_abort(s, &d);
    sched_commit(s, &batch);
    assert_int_equal(d.state, SCHED_ABORTED);
    assert_int_equal(d.computed, 0);
    assert_int_equal(d.generated, 0);
    assert_int_equal(sched_blocks_used(s), 0);
    sched_free(s);
}

static void test_refusals(void **state)
{
    (void)state;
    sched_config cfg = make_config(SCHED_CHUNKED, 512, 256, 100);
    cfg.max_model_len = 1000;
    sched *s = create_or_fail(&cfg);
    sched_req req;
    char err[ERR_LEN];

    init_req(&req, 1, 1001, 1);
    assert_int_equal(sched_add(s, &req, err), -1);
    assert_non_null(strstr(err, "prompt of 1001 tokens exceeds max_model_len=1000"));

    init_req(&req, 2, 900, 101);
    assert_int_equal(sched_add(s, &req, err), -1);
    assert_non_null(strstr(err, "max_tokens (101)"));
    assert_non_null(strstr(err, "max_model_len=1000"));

    init_req(&req, 3, 900, 100); /* exactly max_model_len */
    assert_int_equal(sched_add(s, &req, err), 0);
    sched_abort(s, &req);

    /* 100 blocks hold 1600 tokens: a 1000-token limit fits, so shrink the cache */
    sched_free(s);
    cfg.kv_blocks = 10; /* 160 tokens */
    s = create_or_fail(&cfg);
    init_req(&req, 4, 161, 1);
    assert_int_equal(sched_add(s, &req, err), -1);
    assert_non_null(strstr(err, "KV blocks"));
    init_req(&req, 5, 150, 12); /* KV at most 161 tokens */
    assert_int_equal(sched_add(s, &req, err), -1);
    init_req(&req, 6, 150, 11); /* KV at most 160 tokens */
    assert_int_equal(sched_add(s, &req, err), 0);

    init_req(&req, 7, 0, 1);
    assert_int_equal(sched_add(s, &req, err), -1);
    init_req(&req, 8, 10, 0);
    assert_int_equal(sched_add(s, &req, err), -1);
    assert_int_equal(sched_num_waiting(s), 1);
    sched_free(s);
}

/* Mixed, budget 24, 4 blocks: a and b (prompt 12) share step 1. At step 22 a (context 32)
 * needs a 3rd block; b is preempted with generated 21, so its recompute is 33 tokens, more
 * than the whole budget. After a finishes (step 50) b is recomputed in chunks: 24, then 9
 * with sampling. */
static void test_mixed_recompute_longer_than_budget(void **state)
{
    (void)state;
    sched_config cfg = make_config(SCHED_MIXED, 24, 256, 4);
    sched *s = create_or_fail(&cfg);
    sched_req a, b;
    init_req(&a, 1, 12, 50); /* max KV 61: 4 blocks */
    init_req(&b, 2, 12, 50);
    add_or_fail(s, &a);
    add_or_fail(s, &b);
    sched_batch batch;
    for (int k = 1; k <= 21; k++)
        assert_int_equal(step(s, &batch), 2);
    assert_int_equal(sched_next(s, &batch), 1);
    assert_int_equal(batch.n_preempted, 1);
    assert_int_equal(b.generated, 21);
    sched_commit(s, &batch);
    for (int k = 23; k <= 50; k++) {
        assert_int_equal(step(s, &batch), 1);
        assert_ptr_equal(batch.items[0].req, &a);
    }
    assert_int_equal(a.state, SCHED_FINISHED);

    assert_int_equal(sched_next(s, &batch), 1);
    assert_int_equal(batch.items[0].new_tokens, 24);
    assert_int_equal(batch.items[0].context, 0);
    assert_false(batch.items[0].samples);
    sched_commit(s, &batch);
    assert_int_equal(b.state, SCHED_PREFILLING);
    assert_int_equal(sched_next(s, &batch), 1);
    assert_int_equal(batch.items[0].new_tokens, 9);
    assert_int_equal(batch.items[0].context, 24);
    assert_true(batch.items[0].samples);
    sched_commit(s, &batch);
    assert_int_equal(b.state, SCHED_DECODING);
    assert_int_equal(b.generated, 22);
    while (sched_next(s, &batch) > 0)
        sched_commit(s, &batch);
    assert_int_equal(b.state, SCHED_FINISHED);
    assert_int_equal(sched_blocks_used(s), 0);
    sched_free(s);
}

/* ---- changes: who was preempted, resumed, left out, back in ---------------------------- */

/* Prefill-first: a prefill-only step leaves the two decoders out (LEFT_OUT once, however many
 * prefill steps follow), the next decode step has them back (REJOINED). A request that has no
 * token yet is never "left out": a waits through the decoders' steps without a change. */
static void test_changes_left_out(void **state)
{
    (void)state;
    sched_config cfg = make_config(SCHED_PREFILL_FIRST, 100, 256, 10000);
    sched *s = create_or_fail(&cfg);
    sched_req decoders[2], a, b;
    start_decoders(s, decoders, 2, 1, 100);
    const sched_req *both[] = {&decoders[0], &decoders[1]};

    sched_batch batch;
    init_req(&a, 10, 90, 10);
    init_req(&b, 11, 50, 10); /* 90 + 50 > 100: its own prefill step */
    add_or_fail(s, &a);
    add_or_fail(s, &b);
    assert_int_equal(step(s, &batch), 1);
    assert_changes(&batch, 2, both,
                   (const sched_change_kind[]){SCHED_CHANGE_LEFT_OUT, SCHED_CHANGE_LEFT_OUT});
    assert_int_equal(step(s, &batch), 1); /* b: still out, nothing new; a has a token now */
    assert_ptr_equal(batch.items[0].req, &b);
    assert_changes(&batch, 1, (const sched_req *[]){&a},
                   (const sched_change_kind[]){SCHED_CHANGE_LEFT_OUT});
    assert_int_equal(step(s, &batch), 4); /* everyone decodes: the three left out are back */
    assert_changes(&batch, 3, (const sched_req *[]){&decoders[0], &decoders[1], &a},
                   (const sched_change_kind[]){SCHED_CHANGE_REJOINED, SCHED_CHANGE_REJOINED,
                                               SCHED_CHANGE_REJOINED});
    assert_int_equal(step(s, &batch), 4);
    assert_int_equal(batch.n_changes, 0);
    sched_free(s);

    /* A prefilled request (its first token sampled elsewhere) waiting for a seat is left out
     * of the first step it could have been in, and back when a seat frees. */
    cfg = make_config(SCHED_CHUNKED, 100, 1, 10000);
    s = create_or_fail(&cfg);
    start_decoders(s, decoders, 1, 1, 3);
    sched_req p;
    init_req(&p, 20, 40, 5);
    char err[ERR_LEN] = "";
    assert_int_equal(sched_add_prefilled(s, &p, err), 0);
    assert_int_equal(step(s, &batch), 1); /* the decoder's 2nd token; p has no seat */
    assert_changes(&batch, 1, (const sched_req *[]){&p},
                   (const sched_change_kind[]){SCHED_CHANGE_LEFT_OUT});
    assert_int_equal(step(s, &batch), 1); /* its 3rd and last */
    assert_int_equal(batch.n_changes, 0);
    assert_int_equal(step(s, &batch), 1);
    assert_ptr_equal(batch.items[0].req, &p);
    assert_changes(&batch, 1, (const sched_req *[]){&p},
                   (const sched_change_kind[]){SCHED_CHANGE_REJOINED});
    sched_free(s);

    /* Seated at once: no change at all. */
    s = create_or_fail(&cfg);
    assert_int_equal(sched_add_prefilled(s, &p, err), 0);
    assert_int_equal(step(s, &batch), 1);
    assert_int_equal(batch.n_changes, 0);
    sched_free(s);
}

/* ---- randomized invariants ------------------------------------------------------------- */

enum { POOL = 96 };

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static void check_invariants(const sched *s, sched_req *pool, const bool *in_use)
{
    int64_t blocks = 0;
    int running = 0, waiting = 0, prefilling = 0;
    for (int i = 0; i < POOL; i++) {
        if (!in_use[i])
            continue;
        const sched_req *req = &pool[i];
        blocks += req->n_blocks;
        if (req->state == SCHED_WAITING) {
            waiting++;
            assert_int_equal(req->n_blocks, 0);
            assert_int_equal(req->computed, 0);
        } else if (req->state == SCHED_PREFILLING || req->state == SCHED_DECODING) {
            running++;
            prefilling += req->state == SCHED_PREFILLING;
            assert_int_equal(req->n_blocks, ceil_div(req->computed, 16));
            assert_true(req->computed <= req->prompt_tokens + req->generated);
            assert_true(req->generated < req->max_tokens);
            if (req->state == SCHED_DECODING)
                assert_int_equal(req->computed, req->prompt_tokens + req->generated - 1);
        } else {
            fail_msg("request %lld in use but ended", (long long)req->id);
        }
    }
    /* a partial prefill takes the whole budget left, so nobody is admitted behind it */
    assert_true(prefilling <= 1);
    assert_int_equal(blocks, sched_blocks_used(s));
    assert_int_equal(running, sched_num_running(s));
    assert_int_equal(waiting, sched_num_waiting(s));
    assert_true(sched_blocks_used(s) <= sched_blocks_total(s));
    assert_true(running <= sched_get_config(s)->max_num_seqs);
}

static void check_batch(const sched *s, const sched_batch *batch, sched_req *pool)
{
    const sched_config *cfg = sched_get_config(s);
    int total = 0, decode = 0, prefill = 0;
    for (int i = 0; i < batch->n_items; i++) {
        const sched_item *item = &batch->items[i];
        const sched_req *req = item->req;
        assert_true(req >= pool && req < pool + POOL);
        for (int j = 0; j < i; j++)
            assert_ptr_not_equal(batch->items[j].req, req); /* once per step */
        assert_true(req->state == SCHED_PREFILLING || req->state == SCHED_DECODING);
        assert_int_equal(item->context, req->computed);
        assert_true(item->new_tokens >= 1);
        const int known = req->prompt_tokens + req->generated;
        assert_true(item->context + item->new_tokens <= known);
        assert_int_equal(item->samples, item->context + item->new_tokens == known);
        /* blocks already cover the step */
        assert_int_equal(req->n_blocks, ceil_div(item->context + item->new_tokens, 16));
        total += item->new_tokens;
        if (req->state == SCHED_DECODING && item->new_tokens == 1)
            decode++;
        else
            prefill += item->new_tokens;
        /* decodes precede everything else, except under prefill-first where a step is
         * one kind only */
        if (i > 0 && req->state == SCHED_DECODING)
            assert_int_equal(batch->items[i - 1].req->state, SCHED_DECODING);
    }
    assert_true(total <= cfg->max_num_batched_tokens);
    assert_int_equal(batch->decode_tokens, decode);
    assert_int_equal(batch->prefill_tokens, prefill);
    if (cfg->policy == SCHED_PREFILL_FIRST)
        assert_true(decode == 0 || prefill == 0);
}

/* The changes against a model of each request's absence (0 present, 1 preempted, 2 left
 * out): each follows from the one before, and a request with a token is out exactly when the
 * step has no item for it. */
static void check_changes(const sched_batch *batch, sched_req *pool, const bool *in_use,
                          int *absence)
{
    bool changed[POOL] = {false}, carried[POOL] = {false};
    for (int i = 0; i < batch->n_items; i++)
        carried[batch->items[i].req - pool] = true;
    if (batch->n_items == 0)
        assert_int_equal(batch->n_changes, 0);
    for (int i = 0; i < batch->n_changes; i++) {
        const sched_change *c = &batch->changes[i];
        const int k = (int)(c->req - pool);
        assert_true(k >= 0 && k < POOL && in_use[k]);
        assert_false(changed[k]); /* one change per request */
        changed[k] = true;
        switch (c->kind) {
        case SCHED_CHANGE_PREEMPTED:
            assert_int_equal(pool[k].state, SCHED_WAITING);
            assert_false(carried[k]);
            absence[k] = 1;
            break;
        case SCHED_CHANGE_RESUMED:
            assert_int_equal(absence[k], 1);
            assert_true(carried[k]);
            absence[k] = 0;
            break;
        case SCHED_CHANGE_LEFT_OUT:
            assert_int_equal(absence[k], 0);
            assert_true(pool[k].generated >= 1);
            assert_false(carried[k]);
            absence[k] = 2;
            break;
        case SCHED_CHANGE_REJOINED:
            assert_int_equal(absence[k], 2);
            assert_true(carried[k]);
            absence[k] = 0;
            break;
        default:
            fail_msg("unknown change %d", (int)c->kind);
        }
    }
    if (batch->n_items == 0)
        return;
    for (int k = 0; k < POOL; k++)
        if (in_use[k] && pool[k].state <= SCHED_DECODING && pool[k].generated >= 1 &&
            (absence[k] != 0) != !carried[k])
            fail_msg("request %lld (state %d, generated %d, abs %d): absence %d, carried %d",
                     (long long)pool[k].id, (int)pool[k].state, pool[k].generated,
                     pool[k].absence, absence[k], (int)carried[k]);
}

static void run_random(sched_policy policy, uint64_t seed, int steps)
{
    sched_config cfg = make_config(policy, 256, 24, 160); /* 2,560 tokens of KV */
    cfg.max_model_len = 2000;
    sched *s = create_or_fail(&cfg);
    sched_req *pool = calloc(POOL, sizeof *pool);
    bool in_use[POOL] = {false};
    assert_non_null(pool);
    uint64_t rng = seed;
    int64_t next_id = 1, added = 0, refused = 0, ended_early = 0, finished = 0;
    int absence[POOL] = {0}, changes = 0;
    sched_batch batch;

    for (int t = 0; t < steps; t++) {
        /* arrivals: a few per step while there is room in the pool */
        const int arrivals = (int)rng_range(&rng, 0, 2);
        for (int a = 0; a < arrivals; a++) {
            int slot = -1;
            for (int i = 0; i < POOL && slot < 0; i++)
                if (!in_use[i])
                    slot = i;
            if (slot < 0)
                break;
            const int prompt = rng_uniform(&rng) < 0.1 ? (int)rng_range(&rng, 200, 1200)
                                                       : (int)rng_range(&rng, 1, 120);
            init_req(&pool[slot], next_id++, prompt, (int)rng_range(&rng, 1, 300));
            char err[ERR_LEN];
            if (sched_add(s, &pool[slot], err) == 0) {
                in_use[slot] = true;
                absence[slot] = 0;
                added++;
            } else {
                refused++; /* over the budget under mixed / prefill-first */
                assert_int_not_equal(policy, SCHED_CHUNKED);
            }
        }
        /* early ends: aborts and stop strings, in any live state */
        if (rng_uniform(&rng) < 0.05) {
            const int slot = (int)rng_range(&rng, 0, POOL - 1);
            if (in_use[slot]) {
                if (rng_uniform(&rng) < 0.5)
                    sched_abort(s, &pool[slot]);
                else
                    sched_finish(s, &pool[slot]);
                sched_abort(s, &pool[slot]); /* idempotent */
                in_use[slot] = false;
                ended_early++;
            }
        }
        check_invariants(s, pool, in_use);

        const int live = sched_num_running(s) + sched_num_waiting(s);
        const int n = sched_next(s, &batch);
        if (live > 0 && n == 0)
            fail_msg("empty step with work left: policy %s seed %llu step %d running %d "
                     "waiting %d blocks used %lld",
                     sched_policy_name(policy), (unsigned long long)seed, t,
                     sched_num_running(s), sched_num_waiting(s),
                     (long long)sched_blocks_used(s));
        check_batch(s, &batch, pool);
        check_changes(&batch, pool, in_use, absence);
        changes += batch.n_changes;
        /* sometimes a request ends while its step runs */
        if (n > 0 && rng_uniform(&rng) < 0.02) {
            sched_req *victim = batch.items[rng_range(&rng, 0, n - 1)].req;
            sched_abort(s, victim);
            in_use[victim - pool] = false;
            ended_early++;
        }
        sched_commit(s, &batch);
        for (int i = 0; i < POOL; i++) {
            if (in_use[i] && pool[i].state == SCHED_FINISHED) {
                assert_int_equal(pool[i].generated, pool[i].max_tokens);
                in_use[i] = false;
                finished++;
            }
        }
        check_invariants(s, pool, in_use);
    }
    /* drain */
    int guard = 0;
    while (sched_next(s, &batch) > 0) {
        check_batch(s, &batch, pool);
        check_changes(&batch, pool, in_use, absence);
        changes += batch.n_changes;
        sched_commit(s, &batch);
        assert_true(++guard < 1000000);
    }
    for (int i = 0; i < POOL; i++) {
        if (in_use[i]) {
            assert_int_equal(pool[i].state, SCHED_FINISHED);
            finished++;
        }
    }
    assert_int_equal(sched_blocks_used(s), 0);
    assert_int_equal(sched_num_running(s), 0);
    assert_int_equal(sched_num_waiting(s), 0);
    assert_int_equal(finished + ended_early, added);
    assert_true(finished > 100);
    /* the cache is small on purpose: the run must have exercised preemption */
    assert_true(sched_num_preemptions(s) > 0);
    assert_true(changes >= sched_num_preemptions(s));
    (void)refused;
    free(pool);
    sched_free(s);
}

static void test_randomized_invariants(void **state)
{
    (void)state;
    const sched_policy policies[] = {SCHED_MIXED, SCHED_CHUNKED, SCHED_PREFILL_FIRST};
    for (int p = 0; p < 3; p++)
        for (uint64_t seed = 1; seed <= 4; seed++)
            run_random(policies[p], seed * 7919 + (uint64_t)p, 5000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_check),
        cmocka_unit_test(test_policy_parse),
        cmocka_unit_test(test_decode_first_order),
        cmocka_unit_test(test_mixed_admits_only_whole_prompt_that_fits),
        cmocka_unit_test(test_prompt_over_budget),
        cmocka_unit_test(test_chunked_continuation),
        cmocka_unit_test(test_prefill_first_steps),
        cmocka_unit_test(test_preemption_recompute),
        cmocka_unit_test(test_preemption_of_self),
        cmocka_unit_test(test_changes_left_out),
        cmocka_unit_test(test_fcfs_no_starvation),
        cmocka_unit_test(test_max_num_seqs_cap),
        cmocka_unit_test(test_finish_and_abort),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_mixed_recompute_longer_than_budget),
        cmocka_unit_test(test_randomized_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
