/* Unit tests for the prefix cache: the block table (kvcache.h) and the scheduler's use of it
 * (sched.h, "Prefix caching"). Expectations are computed by hand from those rules; the
 * comments show the arithmetic (block_size 16 throughout). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/rng.h"
#include "engine/kvcache.h"
#include "engine/sched.h"

#define BS 16

static sched *make_sched(bool caching, int budget, int64_t kv_blocks)
{
    sched_config cfg = {
        .policy = SCHED_CHUNKED,
        .max_num_batched_tokens = budget,
        .max_num_seqs = 64,
        .max_model_len = 1 << 20,
        .block_size = BS,
        .kv_blocks = kv_blocks,
        .prefix_caching = caching,
    };
    char err[ERR_LEN] = "";
    sched *s = sched_create(&cfg, err);
    if (!s)
        fail_msg("sched_create: %s", err);
    return s;
}

/* A prompt of n tokens whose first `shared` tokens are the common text (ids 1000 + i) and
 * the rest its own (salt * 100000 + i); hashes gets the chain. */
static int64_t make_hashes(int n, int shared, int salt, uint64_t *hashes)
{
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    assert_non_null(ids);
    for (int i = 0; i < n; i++)
        ids[i] = i < shared ? 1000 + i : salt * 100000 + i;
    const int64_t blocks = kvcache_hash_blocks(ids, n, BS, hashes);
    free(ids);
    return blocks;
}

static void add_req(sched *s, sched_req *r, int64_t id, int prompt, int max_tokens,
                    const uint64_t *hashes, int64_t n_hashes)
{
    memset(r, 0, sizeof *r);
    r->id = id;
    r->prompt_tokens = prompt;
    r->max_tokens = max_tokens;
    r->block_hashes = hashes;
    r->n_block_hashes = (int)n_hashes;
    char err[ERR_LEN] = "";
    if (sched_add(s, r, err) != 0)
        fail_msg("sched_add: %s", err);
}

/* Run steps until r is finished; at most `limit` steps. */
static void run_until_done(sched *s, sched_req *r, int limit)
{
    sched_batch batch;
    for (int i = 0; i < limit && r->state != SCHED_FINISHED; i++) {
        sched_next(s, &batch);
        sched_commit(s, &batch);
    }
    assert_int_equal(r->state, SCHED_FINISHED);
}

static void test_hash_chain(void **state)
{
    (void)state;
    uint64_t a[8], b[8], c[8];
    assert_int_equal(make_hashes(100, 100, 1, a), 6); /* 100 / 16 */
    assert_int_equal(make_hashes(100, 100, 2, b), 6);
    for (int i = 0; i < 6; i++)
        assert_true(a[i] == b[i]); /* the same tokens, the same chain */
    make_hashes(100, 40, 3, c); /* shares tokens 0..39: blocks 0 and 1 (0..31) only */
    assert_true(c[0] == a[0] && c[1] == a[1]);
    for (int i = 2; i < 6; i++)
        assert_true(c[i] != a[i]);
    /* A block's hash depends on every earlier token, not only its own. */
    int32_t x[32], y[32];
    for (int i = 0; i < 32; i++)
        x[i] = y[i] = i;
    y[0] = 99;
    uint64_t hx[2], hy[2];
    kvcache_hash_blocks(x, 32, BS, hx);
    kvcache_hash_blocks(y, 32, BS, hy);
    assert_true(hx[1] != hy[1]);
}

static void test_table_lru(void **state)
{
    (void)state;
    char err[ERR_LEN];
    kvcache *c = kvcache_create(4, err);
    assert_non_null(c);
    assert_int_equal(kvcache_insert(c, 11), KVCACHE_NEW);
    assert_int_equal(kvcache_insert(c, 12), KVCACHE_NEW);
    assert_int_equal(kvcache_insert(c, 11), KVCACHE_SHARED); /* refs 2 */
    assert_int_equal(kvcache_entries(c), 2);
    assert_int_equal(kvcache_evictable(c), 0);
    const uint64_t chain[3] = {11, 12, 13};
    assert_int_equal(kvcache_match(c, chain, 3), 2);
    /* Released deepest first (as the scheduler does): 12 then 11 (still referenced once). */
    kvcache_unref(c, 12);
    kvcache_unref(c, 11);
    assert_int_equal(kvcache_evictable(c), 1);
    assert_int_equal(kvcache_unreferenced(c, chain, 2), 1);
    kvcache_unref(c, 11);
    assert_int_equal(kvcache_evictable(c), 2);
    /* Taking 12 back removes it from the evictable pool; evicting takes 11 then. */
    kvcache_ref(c, 12);
    assert_true(kvcache_evict(c));
    assert_int_equal(kvcache_match(c, chain, 3), 0); /* 11 gone: the chain breaks at 0 */
    assert_int_equal(kvcache_match(c, chain + 1, 1), 1);
    assert_false(kvcache_evict(c)); /* 12 is referenced */
    kvcache_unref(c, 12);
    assert_int_equal(kvcache_evict_all(c), 1);
    assert_int_equal(kvcache_entries(c), 0);
    kvcache_free(c);
}

/* Tags (the cpu executor's block ids): a new entry keeps its tag, a shared insert leaves
 * the first one's, eviction hands the tag back; untagged entries and misses read -1. */
static void test_table_tags(void **state)
{
    (void)state;
    char err[ERR_LEN];
    kvcache *c = kvcache_create(4, err);
    assert_non_null(c);
    assert_int_equal(kvcache_insert_tagged(c, 21, 7), KVCACHE_NEW);
    assert_int_equal(kvcache_insert_tagged(c, 21, 9), KVCACHE_SHARED);
    assert_int_equal(kvcache_insert(c, 22), KVCACHE_NEW);
    assert_int_equal(kvcache_tag(c, 21), 7);
    assert_int_equal(kvcache_tag(c, 22), -1);
    assert_int_equal(kvcache_tag(c, 23), -1);
    kvcache_unref(c, 21);
    kvcache_unref(c, 21);
    int64_t tag = 0;
    assert_true(kvcache_evict_tagged(c, &tag));
    assert_int_equal(tag, 7);
    assert_int_equal(kvcache_tag(c, 21), -1);
    assert_false(kvcache_evict_tagged(c, &tag)); /* 22 is referenced */
    kvcache_free(c);
}

/* Many inserts and evictions against a plain array: the open-addressing table's deletion
 * must keep every remaining entry findable. */
static void test_table_model(void **state)
{
    (void)state;
    char err[ERR_LEN];
    enum { CAP = 3000, OPS = 60000 };
    kvcache *c = kvcache_create(CAP, err);
    assert_non_null(c);
    static uint64_t live[CAP];
    int n_live = 0;
    uint64_t rng = 7;
    for (int op = 0; op < OPS; op++) {
        if (n_live < CAP && (rng_next(&rng) % 3 != 0 || n_live == 0)) {
            /* small key space so collisions and repeats happen */
            const uint64_t h = rng_next(&rng) % 20000;
            if (kvcache_insert(c, h) == KVCACHE_NEW) {
                live[n_live++] = h;
            }
            kvcache_unref(c, h); /* every entry unreferenced: all evictable */
        } else {
            assert_true(kvcache_evict(c));
            /* The evicted one is the least recently released: find which vanished. */
            int gone = -1;
            for (int i = 0; i < n_live; i++)
                if (kvcache_match(c, &live[i], 1) == 0) {
                    assert_int_equal(gone, -1);
                    gone = i;
                }
            assert_true(gone >= 0);
            live[gone] = live[--n_live];
        }
        assert_int_equal(kvcache_entries(c), n_live);
        assert_int_equal(kvcache_evictable(c), n_live);
    }
    for (int i = 0; i < n_live; i++)
        assert_int_equal(kvcache_match(c, &live[i], 1), 1);
    kvcache_free(c);
}

/* A shared prefix skips prefill: A (100 tokens) finishes; B shares A's first 100 tokens'
 * 6 full blocks -> admitted with 96 computed, feeds 4 + its own 100 = 104? No: B's prompt is
 * 200 tokens whose first 100 are A's text, so blocks 0..5 (tokens 0..95) hit: 96 computed,
 * 104 fed in its first (budget 512) step. Counters: queries 100 + 200, hits 0 + 96. */
static void test_shared_prefix_skips_prefill(void **state)
{
    (void)state;
    sched *s = make_sched(true, 512, 1000);
    uint64_t ha[16], hb[16];
    const int64_t na = make_hashes(100, 100, 1, ha);
    const int64_t nb = make_hashes(200, 100, 2, hb);
    sched_req a, b;
    add_req(s, &a, 1, 100, 2, ha, na);
    run_until_done(s, &a, 10);
    assert_int_equal(sched_blocks_used(s), 0);
    assert_int_equal(sched_blocks_cached(s), 6); /* A's 6 full prompt blocks stay */
    add_req(s, &b, 2, 200, 2, hb, nb);
    sched_batch batch;
    assert_int_equal(sched_next(s, &batch), 1);
    assert_int_equal(batch.items[0].context, 96);
    assert_int_equal(batch.items[0].new_tokens, 104);
    assert_int_equal(batch.prefill_tokens, 104);
    assert_true(batch.items[0].samples);
    sched_commit(s, &batch);
    assert_int_equal(b.cached_tokens, 96);
    assert_int_equal(sched_prefix_queries(s), 300);
    assert_int_equal(sched_prefix_hits(s), 96);
    /* B holds A's 6 blocks and its own 7th (tokens 96..111) .. 13th (192..200): 13 blocks
     * for 201 tokens after this step, 6 of them shared: nothing evictable. */
    assert_int_equal(sched_blocks_cached(s), 0);
    sched_free(s);
}

/* A prompt cached whole is recomputed from one block short: 96 tokens = 6 blocks; the
 * lookup stops at (96 - 1) / 16 = 5 blocks, so 80 computed and 16 fed. */
static void test_whole_prompt_cached_feeds_last_block(void **state)
{
    (void)state;
    sched *s = make_sched(true, 512, 1000);
    uint64_t h[8];
    const int64_t n = make_hashes(96, 96, 1, h);
    sched_req a, b;
    add_req(s, &a, 1, 96, 1, h, n);
    run_until_done(s, &a, 5);
    add_req(s, &b, 2, 96, 1, h, n);
    sched_batch batch;
    sched_next(s, &batch);
    assert_int_equal(batch.items[0].context, 80);
    assert_int_equal(batch.items[0].new_tokens, 16);
    sched_commit(s, &batch);
    assert_int_equal(b.state, SCHED_FINISHED);
    assert_int_equal(sched_prefix_hits(s), 80);
    sched_free(s);
}

/* Off, the same requests prefill whole and the counters stay 0. */
static void test_off_shares_nothing(void **state)
{
    (void)state;
    sched *s = make_sched(false, 512, 1000);
    uint64_t h[8];
    const int64_t n = make_hashes(100, 100, 1, h);
    sched_req a, b;
    add_req(s, &a, 1, 100, 1, h, n);
    run_until_done(s, &a, 5);
    assert_int_equal(sched_blocks_cached(s), 0);
    add_req(s, &b, 2, 100, 1, h, n);
    sched_batch batch;
    sched_next(s, &batch);
    assert_int_equal(batch.items[0].context, 0);
    assert_int_equal(batch.items[0].new_tokens, 100);
    sched_commit(s, &batch);
    assert_int_equal(sched_prefix_queries(s), 0);
    assert_int_equal(sched_prefix_hits(s), 0);
    sched_free(s);
}

/* Cached blocks give way to live ones: a pool of 10 blocks holds A's 6 cached blocks; C
 * (unrelated, 120 tokens + 1 = 8 blocks) needs 8 > 4 free, so 4 cached blocks are evicted,
 * deepest first: A's blocks 0 and 1 survive and a request sharing A's text hits 2 blocks. */
static void test_eviction_deepest_first(void **state)
{
    (void)state;
    sched *s = make_sched(true, 512, 10);
    uint64_t ha[8], hc[8];
    const int64_t na = make_hashes(100, 100, 1, ha);
    const int64_t nc = make_hashes(120, 0, 3, hc);
    sched_req a, c, d;
    add_req(s, &a, 1, 100, 1, ha, na);
    run_until_done(s, &a, 5);
    assert_int_equal(sched_blocks_cached(s), 6);
    add_req(s, &c, 2, 120, 2, hc, nc);
    sched_batch batch;
    sched_next(s, &batch);
    assert_int_equal(batch.n_items, 1);
    assert_int_equal(sched_blocks_used(s), 8);
    assert_int_equal(sched_blocks_cached(s), 2);
    sched_commit(s, &batch);
    run_until_done(s, &c, 5);
    /* C's 7 full prompt blocks are cached now too; the pool is 10: A's 2 + C's 7 = 9. */
    assert_int_equal(sched_blocks_cached(s), 9);
    add_req(s, &d, 3, 100, 1, ha, na);
    sched_next(s, &batch);
    assert_int_equal(batch.items[0].context, 32);
    sched_commit(s, &batch);
    sched_free(s);
}

/* A preempted request comes back to its own cached blocks. Pool 12 blocks, budget 64: P and
 * Q (64-token prompts: 4 full blocks each, cached once computed; 60 tokens to answer, 8
 * blocks at most) grow together until the pool runs out at 6 blocks each; Q, admitted last,
 * is the victim: its 4 prompt blocks stay cached, its 2 others are freed. P grows to its 8
 * (12 - 6 - 4 cached = 2 free: no eviction), finishes, and Q returns with 64 tokens
 * computed (its 4 cached blocks; (64 + generated - 1) / 16 >= 4). */
static void test_preempted_request_hits_its_blocks(void **state)
{
    (void)state;
    sched *s = make_sched(true, 64, 12);
    uint64_t hp[4], hq[4];
    const int64_t np = make_hashes(64, 0, 1, hp);
    const int64_t nq = make_hashes(64, 0, 2, hq);
    sched_req p, q;
    add_req(s, &p, 1, 64, 60, hp, np);
    sched_batch batch;
    sched_next(s, &batch);
    sched_commit(s, &batch);
    add_req(s, &q, 2, 64, 60, hq, nq);
    int preempted_at = -1;
    for (int i = 0; i < 200 && preempted_at < 0; i++) {
        sched_next(s, &batch);
        if (batch.n_preempted)
            preempted_at = i;
        sched_commit(s, &batch);
    }
    assert_true(preempted_at >= 0);
    assert_int_equal(q.state, SCHED_WAITING);
    assert_int_equal(q.computed, 0);
    assert_true(q.n_preemptions == 1);
    /* Let P finish; then Q comes back with its prompt (and nothing else) cached. */
    run_until_done(s, &p, 200);
    sched_next(s, &batch);
    assert_int_equal(batch.n_items, 1);
    assert_ptr_equal(batch.items[0].req, &q);
    assert_int_equal(batch.items[0].context, 64);
    sched_commit(s, &batch);
    /* Counted once: queries are the two prompts, whatever the re-admission found. */
    assert_int_equal(sched_prefix_queries(s), 128);
    run_until_done(s, &q, 200);
    sched_free(s);
}

/* A reset forgets what nobody uses. */
static void test_reset(void **state)
{
    (void)state;
    sched *s = make_sched(true, 512, 100);
    uint64_t h[8];
    const int64_t n = make_hashes(100, 100, 1, h);
    sched_req a, b;
    add_req(s, &a, 1, 100, 1, h, n);
    run_until_done(s, &a, 5);
    assert_int_equal(sched_reset_prefix_cache(s), 6);
    assert_int_equal(sched_blocks_cached(s), 0);
    assert_int_equal(sched_blocks_used(s), 0);
    add_req(s, &b, 2, 100, 1, h, n);
    sched_batch batch;
    sched_next(s, &batch);
    assert_int_equal(batch.items[0].context, 0);
    sched_commit(s, &batch);
    sched_free(s);
}

/* Random traffic over a few shared prefixes in a tight pool: the block counts always add
 * up (used + cached <= total, never negative) and every request finishes. */
static void test_random_invariants(void **state)
{
    (void)state;
    enum { N = 120 };
    sched *s = make_sched(true, 256, 60);
    static sched_req reqs[N];
    static uint64_t hashes[N][32];
    uint64_t rng = 42;
    int added = 0, done = 0;
    sched_batch batch;
    for (int stepi = 0; stepi < 20000 && done < N; stepi++) {
        if (added < N && rng_next(&rng) % 3 == 0) {
            const int prompt = 20 + (int)(rng_next(&rng) % 300);
            const int shared = (int)(rng_next(&rng) % (prompt + 1));
            const int64_t nh = make_hashes(prompt, shared, 10 + added, hashes[added]);
            add_req(s, &reqs[added], added, prompt, 1 + (int)(rng_next(&rng) % 40),
                    hashes[added], nh);
            added++;
        }
        sched_next(s, &batch);
        sched_commit(s, &batch);
        assert_true(sched_blocks_used(s) >= 0);
        assert_true(sched_blocks_cached(s) >= 0);
        assert_true(sched_blocks_used(s) + sched_blocks_cached(s) <= 60);
        done = 0;
        for (int i = 0; i < added; i++)
            done += reqs[i].state == SCHED_FINISHED;
    }
    assert_int_equal(done, N);
    assert_int_equal(sched_blocks_used(s), 0);
    assert_true(sched_prefix_hits(s) > 0);
    assert_true(sched_prefix_hits(s) < sched_prefix_queries(s));
    sched_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_chain),
        cmocka_unit_test(test_table_lru),
        cmocka_unit_test(test_table_tags),
        cmocka_unit_test(test_table_model),
        cmocka_unit_test(test_shared_prefix_skips_prefill),
        cmocka_unit_test(test_whole_prompt_cached_feeds_last_block),
        cmocka_unit_test(test_off_shares_nothing),
        cmocka_unit_test(test_eviction_deepest_first),
        cmocka_unit_test(test_preempted_request_hits_its_blocks),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_random_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
