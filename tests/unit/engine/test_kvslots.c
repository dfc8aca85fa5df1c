/* test_kvslots — the unified KV cache (--kv-layout unified): the slots (kvslots.h), the
 * occupied cells the scheduler puts in every batch (sched.h "KV layout"), and the cost model
 * charging attention over them (cost_step_cells_ns), down to llama.cpp's order effect: a
 * prompt prefilled after another one is slower than the same prompt on a fresh server.
 * Every expected figure is worked out in its comment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "common/err.h"
#include "engine/cost.h"
#include "engine/kvslots.h"
#include "engine/sched.h"

/* ---- the slots ----------------------------------------------------------------------- */

static void test_slots_least_recently_released(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    assert_null(kvslots_create(0, err));
    assert_non_null(strstr(err, "at least one slot"));

    kvslots *k = kvslots_create(3, err);
    assert_non_null(k);
    /* Never used slots tie (released 0): the first wins; then none is free. */
    assert_int_equal(kvslots_take(k, NULL, 0), 0);
    assert_int_equal(kvslots_take(k, NULL, 0), 1);
    assert_int_equal(kvslots_take(k, NULL, 0), 2);
    assert_int_equal(kvslots_take(k, NULL, 0), -1);
    /* Released 1 first (100 cells), then 0 (50): both retained, 150 in all. */
    kvslots_release(k, 1, 100, NULL, 0);
    kvslots_release(k, 0, 50, NULL, 0);
    assert_int_equal(kvslots_retained_cells(k), 150);
    assert_int_equal(kvslots_slot_cells(k, 1), 100);
    /* The least recently released is 1: taking it drops its 100 cells, 0 keeps its 50. */
    assert_int_equal(kvslots_take(k, NULL, 0), 1);
    assert_int_equal(kvslots_retained_cells(k), 50);
    assert_int_equal(kvslots_slot_cells(k, 1), 0);
    /* A release of nothing (a preempted request's slot) retains nothing. */
    kvslots_release(k, 2, 0, NULL, 0);
    assert_int_equal(kvslots_retained_cells(k), 50);
    /* Releasing a free slot twice changes nothing. */
    kvslots_release(k, 2, 999, NULL, 0);
    assert_int_equal(kvslots_retained_cells(k), 50);
    kvslots_free(k);
}

/* llama.cpp's POST /slots/{id}?action=erase: a free slot forgets its cells and its prompt
 * (a newcomer sharing that prompt no longer prefers it); a taken one keeps its occupant's;
 * an id past the slots is refused. */
static void test_slots_erase(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    kvslots *k = kvslots_create(3, err);
    assert_non_null(k);
    const uint64_t prompt[2] = {21, 22};
    assert_int_equal(kvslots_take(k, prompt, 2), 0);
    assert_int_equal(kvslots_take(k, NULL, 0), 1);
    kvslots_release(k, 0, 40, prompt, 2);
    assert_int_equal(kvslots_retained_cells(k), 40);
    /* slot 1 is taken: nothing erased, nothing retained changes */
    assert_int_equal(kvslots_erase(k, 1), 0);
    assert_int_equal(kvslots_retained_cells(k), 40);
    /* slot 0's 40 cells go, and with them its prompt */
    assert_int_equal(kvslots_erase(k, 0), 40);
    assert_int_equal(kvslots_retained_cells(k), 0);
    assert_int_equal(kvslots_slot_cells(k, 0), 0);
    assert_int_equal(kvslots_erase(k, 0), 0);
    /* the prompt again: slot 2 (never used, released 0) wins now that 0 matches nothing */
    assert_int_equal(kvslots_take(k, prompt, 2), 2);
    assert_int_equal(kvslots_erase(k, 3), -1);
    assert_int_equal(kvslots_erase(k, -1), -1);
    kvslots_free(k);
}

static void test_slots_prefer_shared_prefix(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    kvslots *k = kvslots_create(3, err);
    assert_non_null(k);
    const uint64_t old_prompt[3] = {11, 12, 13};
    const uint64_t shares_two[4] = {11, 12, 99, 100};
    const uint64_t shares_none[2] = {7, 8};
    for (int i = 0; i < 3; i++)
        assert_int_equal(kvslots_take(k, NULL, 0), i);
    kvslots_release(k, 0, 10, NULL, 0);        /* least recent, matches nothing */
    kvslots_release(k, 1, 48, old_prompt, 3);  /* 3 blocks of 16 */
    kvslots_release(k, 2, 20, NULL, 0);
    /* Two leading blocks shared with slot 1's prompt: slot 1, though 0 is less recent. */
    assert_int_equal(kvslots_take(k, shares_two, 4), 1);
    assert_int_equal(kvslots_retained_cells(k), 30);
    /* Nothing shared: the least recently released, 0. */
    assert_int_equal(kvslots_take(k, shares_none, 2), 0);
    assert_int_equal(kvslots_retained_cells(k), 20);
    kvslots_free(k);
}

/* ---- the scheduler's occupied cells --------------------------------------------------- */

static sched *make_sched(sched_kv_layout layout, int max_num_seqs, int64_t kv_blocks, int budget)
{
    sched_config cfg = {
        .policy = SCHED_MIXED,
        .max_num_batched_tokens = budget,
        .max_num_seqs = max_num_seqs,
        .max_model_len = 1 << 20,
        .block_size = 16,
        .kv_blocks = kv_blocks,
        .kv_layout = layout,
    };
    char err[ERR_LEN] = "";
    sched *s = sched_create(&cfg, err);
    if (!s)
        fail_msg("sched_create: %s", err);
    return s;
}

/* One request alone from arrival to its end: the occupied cells its prefill step saw. */
static int64_t run_alone(sched *s, sched_req *req, int64_t id, int prompt, int max_tokens,
                         const cost_params *cost, int64_t *prefill_ns)
{
    char err[ERR_LEN] = "";
    memset(req, 0, sizeof *req);
    req->id = id;
    req->prompt_tokens = prompt;
    req->max_tokens = max_tokens;
    if (sched_add(s, req, err) != 0)
        fail_msg("sched_add: %s", err);
    sched_batch batch;
    int64_t first_cells = -1;
    for (int steps = 0; req->state != SCHED_FINISHED; steps++) {
        assert_true(steps <= max_tokens);
        assert_int_equal(sched_next(s, &batch), 1);
        if (first_cells < 0) {
            first_cells = batch.occupied_cells;
            assert_int_equal(batch.items[0].new_tokens, prompt);
            if (cost) {
                const cost_seq seq = {prompt, batch.items[0].context, true};
                *prefill_ns = cost_step_cells_ns(cost, &seq, 1, batch.occupied_cells, NULL);
            }
        }
        sched_commit(s, &batch);
    }
    return first_cells;
}

static void test_sched_slots_keep_cells(void **state)
{
    (void)state;
    /* 33 slots (llama-server -np 33). A: 8192 prompt + 4 tokens: its KV ends at 8192 + 3
     * (the last token is never fed back) = 8195 cells, kept by its slot. B takes another
     * slot: its prefill sees those 8195. C sees A's and B's: 16390. */
    sched *s = make_sched(SCHED_KV_UNIFIED, 33, 4096, 16384);
    sched_req a, b, c;
    assert_int_equal(run_alone(s, &a, 1, 8192, 4, NULL, NULL), 0);
    assert_int_equal(sched_cells_occupied(s), 8195);
    assert_int_equal(run_alone(s, &b, 2, 8192, 4, NULL, NULL), 8195);
    assert_int_equal(run_alone(s, &c, 3, 2048, 4, NULL, NULL), 16390);
    /* A's slot was never reused, C's cells (2048 + 3) joined: 8195 x 2 + 2051. */
    assert_int_equal(sched_cells_occupied(s), 18441);
    sched_free(s);

    /* One slot: the next request replaces what the last one left, so it sees nothing. */
    s = make_sched(SCHED_KV_UNIFIED, 1, 4096, 16384);
    assert_int_equal(run_alone(s, &a, 1, 8192, 4, NULL, NULL), 0);
    assert_int_equal(run_alone(s, &b, 2, 8192, 4, NULL, NULL), 0);
    assert_int_equal(sched_cells_occupied(s), 8195);
    sched_free(s);

    /* Paged: no slots, no cells, whatever ran before. */
    s = make_sched(SCHED_KV_PAGED, 33, 4096, 16384);
    assert_int_equal(run_alone(s, &a, 1, 8192, 4, NULL, NULL), 0);
    assert_int_equal(run_alone(s, &b, 2, 8192, 4, NULL, NULL), 0);
    assert_int_equal(sched_cells_occupied(s), 0);
    sched_free(s);
}

/* A preempted request's KV is dropped: its slot keeps nothing. 4 blocks of 16 tokens, two
 * requests of 16 prompt tokens decoding: once both hold 2 blocks (32 tokens each) the next
 * decode of A needs a third block, and B (the newest) is preempted. That step's batch holds
 * A alone, and the cells are A's context: nothing of B's. */
static void test_sched_preempted_slot_keeps_nothing(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    sched *s = make_sched(SCHED_KV_UNIFIED, 4, 4, 64);
    sched_req a = {.id = 1, .prompt_tokens = 16, .max_tokens = 40};
    sched_req b = {.id = 2, .prompt_tokens = 16, .max_tokens = 40};
    assert_int_equal(sched_add(s, &a, err), 0);
    assert_int_equal(sched_add(s, &b, err), 0);
    sched_batch batch;
    bool preempted = false;
    for (int steps = 0; steps < 100 && !preempted; steps++) {
        assert_true(sched_next(s, &batch) > 0);
        if (batch.n_preempted > 0) {
            preempted = true;
            assert_int_equal(b.state, SCHED_WAITING);
            assert_int_equal(batch.n_items, 1);
            assert_ptr_equal(batch.items[0].req, &a);
            assert_int_equal(batch.occupied_cells, a.computed);
        } else {
            /* Both running: the cells are both contexts, nothing retained. */
            assert_int_equal(batch.occupied_cells, a.computed + b.computed);
        }
        sched_commit(s, &batch);
    }
    assert_true(preempted);
    sched_free(s);
}

/* With prefix caching a request that finds its prefix cached takes the slot that holds it
 * (llama.cpp's slot choice), so those cells are counted once. A: 64 tokens (4 blocks, hash
 * chain 1..4) + 2 answer tokens, leaves 65 cells in slot 0; C (no hashes) 32 + 2, leaves 33
 * in slot 1; B, A's prompt again, finds 3 blocks cached (one token short of its 64: 48
 * tokens) and takes slot 0, dropping A's 65: its prefill sees C's 33 + its own 48 = 81. (The
 * least recently released rule alone would give B a never used slot: 65 + 33 + 48 = 146.) */
static void test_sched_cached_prefix_takes_its_slot(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    sched_config cfg = {
        .policy = SCHED_MIXED,
        .max_num_batched_tokens = 1024,
        .max_num_seqs = 33,
        .max_model_len = 4096,
        .block_size = 16,
        .kv_blocks = 256,
        .prefix_caching = true,
        .kv_layout = SCHED_KV_UNIFIED,
    };
    sched *s = sched_create(&cfg, err);
    assert_non_null(s);
    static const uint64_t chain[4] = {1, 2, 3, 4};
    sched_req a = {.id = 1, .prompt_tokens = 64, .max_tokens = 2, .block_hashes = chain,
                   .n_block_hashes = 4};
    sched_req c = {.id = 2, .prompt_tokens = 32, .max_tokens = 2};
    sched_req b = {.id = 3, .prompt_tokens = 64, .max_tokens = 2, .block_hashes = chain,
                   .n_block_hashes = 4};
    sched_req *order[3] = {&a, &c, &b};
    sched_batch batch;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sched_add(s, order[i], err), 0);
        for (int steps = 0; order[i]->state != SCHED_FINISHED; steps++) {
            assert_true(steps < 4);
            assert_int_equal(sched_next(s, &batch), 1);
            if (order[i] == &b && steps == 0) {
                assert_int_equal(batch.items[0].context, 48);
                assert_int_equal(batch.occupied_cells, 33 + 48);
            }
            sched_commit(s, &batch);
        }
    }
    assert_int_equal(sched_cells_occupied(s), 33 + 65);
    sched_free(s);
}

/* ---- the cost: attention over the occupied cells -------------------------------------- */

static cost_params cpu_ref_params(void)
{
    cost_gpu gpu;
    cost_arch arch;
    char err[ERR_LEN];
    assert_int_equal(cost_gpu_find("cpu", &gpu, err), 0);
    assert_int_equal(cost_arch_find("ref-256", &arch, err), 0);
    cost_params p;
    cost_params_init(&p, &gpu, &arch);
    return p;
}

static void test_cost_charges_occupied_cells(void **state)
{
    (void)state;
    const cost_params p = cpu_ref_params();
    const cost_seq fresh = {8192, 0, true};
    cost_breakdown paged, alone, after;
    /* No cells: cost_step_ns exactly. */
    assert_int_equal(cost_step_cells_ns(&p, &fresh, 1, 0, &alone),
                     cost_step_ns(&p, &fresh, 1, &paged));
    assert_true(alone.attention_flops == paged.attention_flops);
    /* 8195 cells before it: every query also spans them. Pairs: 8192 x 8195 + 8192 x 8193 / 2
     * against 8192 x 8193 / 2 alone, a ratio of (2 x 8195 + 8193) / 8193 = 24583 / 8193. */
    const int64_t slower = cost_step_cells_ns(&p, &fresh, 1, 8195, &after);
    assert_true(slower > alone.total_ns);
    const double ratio = after.attention_flops / alone.attention_flops;
    assert_true(ratio > 24583.0 / 8193 - 1e-9 && ratio < 24583.0 / 8193 + 1e-9);
    /* KV read: (8195 + 8192) tokens against 8192, written 8192 either way. */
    const double kv_ratio = after.kv_bytes / alone.kv_bytes;
    assert_true(kv_ratio > (8195.0 + 2 * 8192) / (2 * 8192) - 1e-9 &&
                kv_ratio < (8195.0 + 2 * 8192) / (2 * 8192) + 1e-9);
    /* Fewer cells than its own context (never under sched): its own context counts. */
    const cost_seq chunk = {512, 4096, true};
    assert_int_equal(cost_step_cells_ns(&p, &chunk, 1, 100, NULL),
                     cost_step_ns(&p, &chunk, 1, NULL));

    /* An injection beside 4 decodes of context 100 in a cache of 400 cells (theirs): the
     * one-step prefill is that batch's cost_step_cells_ns; chunked (budget 2052: chunks of
     * 2048), the last chunk spans the 400 cells and the prompt's 6144 before it; 0 cells is
     * the paged injection. */
    const cost_seq batch[5] = {{8192, 0, true}, {1, 100, true}, {1, 100, true}, {1, 100, true},
                               {1, 100, true}};
    int64_t longest = 0;
    cost_injection_prefill_cells_ns(&p, 8192, 4, 100, 0, 400, &longest);
    assert_int_equal(longest, cost_step_cells_ns(&p, batch, 5, 400, NULL));
    cost_seq last[5];
    memcpy(last, batch, sizeof last);
    last[0] = (cost_seq){2048, 6144, true};
    int64_t total = cost_injection_prefill_cells_ns(&p, 8192, 4, 100, 2052, 400, &longest);
    assert_int_equal(longest, cost_step_cells_ns(&p, last, 5, 400 + 6144, NULL));
    assert_true(total > longest);
    assert_int_equal(cost_injection_prefill_cells_ns(&p, 8192, 4, 100, 2052, 0, &longest),
                     cost_injection_prefill_ns(&p, 8192, 4, 100, 2052, NULL));
}

/* llama.cpp's order effect on the scheduler and the cost model together: a lone 8192-token
 * prompt on a fresh server, a second different one, then a 2048-token one. Unified: the
 * second prefill is slower than the first (it spans the first's cells) and the 2048 one
 * slower than fresh; paged: the two 8192 prefills cost the same. */
static void test_order_effect(void **state)
{
    (void)state;
    const cost_params p = cpu_ref_params();
    int64_t ns[2][3];
    for (int layout = 0; layout < 2; layout++) {
        sched *s = make_sched(layout ? SCHED_KV_UNIFIED : SCHED_KV_PAGED, 33, 4096, 16384);
        sched_req r[3];
        const int prompts[3] = {8192, 8192, 2048};
        for (int i = 0; i < 3; i++)
            run_alone(s, &r[i], i + 1, prompts[i], 16, &p, &ns[layout][i]);
        sched_free(s);
    }
    const cost_seq fresh_2048 = {2048, 0, true};
    assert_int_equal(ns[0][1], ns[0][0]);
    assert_int_equal(ns[0][2], cost_step_ns(&p, &fresh_2048, 1, NULL));
    assert_int_equal(ns[1][0], ns[0][0]); /* a fresh server: nothing to span */
    assert_true(ns[1][1] > ns[1][0] * 3 / 2);
    assert_true(ns[1][2] > ns[0][2] * 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_least_recently_released),
        cmocka_unit_test(test_slots_prefer_shared_prefix),
        cmocka_unit_test(test_slots_erase),
        cmocka_unit_test(test_sched_slots_keep_cells),
        cmocka_unit_test(test_sched_preempted_slot_keeps_nothing),
        cmocka_unit_test(test_sched_cached_prefix_takes_its_slot),
        cmocka_unit_test(test_cost_charges_occupied_cells),
        cmocka_unit_test(test_order_effect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
