/* Unit tests for the cpu engine's forward pass (cpu_forward.h): the batched, paged pass
 * against the naive one-token reference, chunked prefill against one-shot, decode after
 * prefill against recompute, and greedy answers against batch composition.
 *
 * Tolerance: logits are O(3) here; the batched pass sums in float (SGEMM, our kernels,
 * exp2) where the reference sums in double. Measured differences are about 1e-7 relative
 * to (1 + max |logit|), float rounding. Both round K and V to halves (the cache's F16), and
 * where their F32 values differ by that rounding an element can land on the neighbouring
 * half (2^-11 of it): one such case measured 1.1e-5. So TOL_REF, against the reference, is
 * 5e-5; TOL_SAME, between two batched passes over the same positions (chunked vs one-shot,
 * decode vs recompute, 1 vs 2 threads), stays 1e-5. Greedy tokens must be identical.
 *
 * Groups, one ctest test each (the line below; CMakeLists.txt reads it): the pass against
 * the reference with each instruction set's kernels (kernel_check.h; a group whose
 * instructions this CPU lacks exits 77, skipped), and the other properties with what the CPU
 * runs ("portable" also runs them: they hold for any kernels).
 * ctest: groups portable avx2 avx512 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/rng.h"
#include "engine/cpu/cpu_forward.h"
#include "engine/cpu/cpu_kernels.h"

#include "kernel_check.h"

#define TOL_REF 5e-5
#define TOL_SAME 1e-5

/* Two small shapes: head_dim 16 with 2 query heads per KV head and an FFN that is not a
 * multiple of 16; head_dim 32 with one KV head for two query heads. */
static const cpu_config shape_a = {.dim = 64, .hidden_dim = 88, .n_layers = 2, .n_heads = 4,
                                   .n_kv_heads = 2, .head_dim = 16, .vocab_size = 300,
                                   .max_seq_len = 2048, .rope_theta = 10000.0f,
                                   .norm_eps = 1e-5f, .seed = 7};
static const cpu_config shape_b = {.dim = 64, .hidden_dim = 128, .n_layers = 2, .n_heads = 2,
                                   .n_kv_heads = 1, .head_dim = 32, .vocab_size = 256,
                                   .max_seq_len = 2048, .rope_theta = 10000.0f,
                                   .norm_eps = 1e-5f, .seed = 8};

typedef struct rig {
    cpu_model model;
    cpu_runstate run;
    cpu_kv kv;
    cpu_pool *pool;
} rig;

static void rig_build(rig *r, const cpu_config *c, int threads)
{
    char err[ERR_LEN] = "";
    memset(r, 0, sizeof *r);
    if (cpu_build_model(&r->model, c, err) != 0 ||
        cpu_build_runstate(&r->run, &r->model, threads, err) != 0 ||
        cpu_kv_init(&r->kv, c, 512, err) != 0 || !(r->pool = cpu_pool_create(threads, err)))
        fail_msg("rig: %s", err);
}

static void rig_free(rig *r)
{
    cpu_pool_free(r->pool);
    cpu_kv_free(&r->kv);
    cpu_free_runstate(&r->run);
    cpu_free_model(&r->model);
}

static void forward_or_fail(rig *r, const cpu_batch_seq *seqs, int n)
{
    char err[ERR_LEN] = "";
    if (cpu_forward(&r->model, &r->run, &r->kv, r->pool, seqs, n, err) != 0)
        fail_msg("cpu_forward: %s", err);
}

static void reserve_or_fail(rig *r, cpu_kv_seq *s, int n_tokens)
{
    char err[ERR_LEN] = "";
    if (cpu_kv_reserve(&r->kv, s, n_tokens, err) != 0)
        fail_msg("cpu_kv_reserve: %s", err);
}

static void make_tokens(int32_t *t, int n, int vocab, uint64_t seed)
{
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)(rng_hash3(seed, (uint64_t)i, 0) % (uint64_t)vocab);
}

/* Prefill n tokens in chunks of `chunk` (one sequence per step); logits of the last
 * position into out. */
static void prefill_chunked(rig *r, cpu_kv_seq *s, const int32_t *tokens, int n, int chunk,
                            float *out)
{
    for (int c0 = 0; c0 < n; c0 += chunk) {
        const int len = n - c0 < chunk ? n - c0 : chunk;
        reserve_or_fail(r, s, c0 + len);
        const cpu_batch_seq seq = {tokens + c0, c0, len, s, c0 + len == n};
        forward_or_fail(r, &seq, 1);
    }
    memcpy(out, r->run.logits, sizeof(float) * (size_t)r->model.config.vocab_size);
}

/* ---- against the reference ------------------------------------------------------------ */

/* Feed n tokens one position at a time through the reference and through the batched pass
 * (as one-shot prefills of growing length would be too slow: decode steps of 1 token,
 * which exercise the paged cache across block edges), comparing every position's logits;
 * and the one-shot prefill of all n against the reference's last position. */
static void check_against_reference(const cpu_config *c, int threads, cpu_isa isa)
{
    char err[ERR_LEN] = "";
    enum { N = 70 };
    assert_int_equal(cpu_isa_set(isa), isa);
    rig r;
    rig_build(&r, c, threads);
    cpu_ref_state ref;
    assert_int_equal(cpu_build_ref_state(&ref, c, N, err), 0);
    int32_t tokens[N];
    make_tokens(tokens, N, c->vocab_size, 99);
    cpu_kv_seq s = {0};
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    for (int p = 0; p < N; p++) {
        reserve_or_fail(&r, &s, p + 1);
        const cpu_batch_seq one = {tokens + p, p, 1, &s, true};
        forward_or_fail(&r, &one, 1);
        const float *want = cpu_ref_forward(&r.model, &ref, tokens[p], p);
        assert_close(r.run.logits, want, c->vocab_size, TOL_REF);
    }
    cpu_kv_seq t = {0};
    prefill_chunked(&r, &t, tokens, N, N, logits);
    assert_close(logits, ref.logits, c->vocab_size, TOL_REF);
    cpu_kv_release(&r.kv, &s);
    cpu_kv_release(&r.kv, &t);
    cpu_kv_seq_free(&s);
    cpu_kv_seq_free(&t);
    free(logits);
    cpu_free_ref_state(&ref);
    rig_free(&r);
    cpu_isa_set(CPU_ISA_AVX512); /* the widest again */
}

static void check_batched_matches_reference(cpu_isa isa)
{
    for (int threads = 1; threads <= 2; threads++) {
        check_against_reference(&shape_a, threads, isa);
        check_against_reference(&shape_b, threads, isa);
    }
}

static void test_batched_matches_reference_portable(void **state)
{
    (void)state;
    check_batched_matches_reference(CPU_ISA_PORTABLE);
}

static void test_batched_matches_reference_avx2(void **state)
{
    (void)state;
    check_batched_matches_reference(CPU_ISA_AVX2);
}

static void test_batched_matches_reference_avx512(void **state)
{
    (void)state;
    check_batched_matches_reference(CPU_ISA_AVX512);
}

/* ---- chunked prefill ---------------------------------------------------------------------- */

static void test_chunked_prefill_equals_one_shot(void **state)
{
    (void)state;
    enum { N = 600 };
    const cpu_config *shapes[] = {&shape_a, &shape_b};
    for (int i = 0; i < 2; i++) {
        const cpu_config *c = shapes[i];
        rig r;
        rig_build(&r, c, 2);
        int32_t tokens[N];
        make_tokens(tokens, N, c->vocab_size, 5);
        float *one_shot = malloc(sizeof(float) * (size_t)c->vocab_size);
        float *chunked = malloc(sizeof(float) * (size_t)c->vocab_size);
        cpu_kv_seq s = {0};
        prefill_chunked(&r, &s, tokens, N, N, one_shot);
        static const int chunks[] = {1, 7, 512};
        for (int k = 0; k < 3; k++) {
            cpu_kv_seq t = {0};
            prefill_chunked(&r, &t, tokens, N, chunks[k], chunked);
            assert_close(chunked, one_shot, c->vocab_size, TOL_SAME);
            assert_int_equal(cpu_argmax(chunked, c->vocab_size), cpu_argmax(one_shot, c->vocab_size));
            cpu_kv_release(&r.kv, &t);
            cpu_kv_seq_free(&t);
        }
        cpu_kv_release(&r.kv, &s);
        cpu_kv_seq_free(&s);
        free(one_shot);
        free(chunked);
        rig_free(&r);
    }
}

/* ---- decode after prefill --------------------------------------------------------------- */

/* Prefill P tokens, then decode greedily; at every step the logits equal a one-shot
 * prefill of everything so far in a fresh sequence (full recompute). */
static void test_decode_equals_recompute(void **state)
{
    (void)state;
    enum { P = 45, D = 20 };
    const cpu_config *c = &shape_a;
    rig r;
    rig_build(&r, c, 2);
    int32_t tokens[P + D];
    make_tokens(tokens, P, c->vocab_size, 17);
    float *decoded = malloc(sizeof(float) * (size_t)c->vocab_size);
    float *recomputed = malloc(sizeof(float) * (size_t)c->vocab_size);
    cpu_kv_seq s = {0};
    prefill_chunked(&r, &s, tokens, P, P, decoded);
    for (int n = P; n < P + D; n++) {
        tokens[n] = cpu_argmax(decoded, c->vocab_size);
        reserve_or_fail(&r, &s, n + 1);
        const cpu_batch_seq step = {tokens + n, n, 1, &s, true};
        forward_or_fail(&r, &step, 1);
        memcpy(decoded, r.run.logits, sizeof(float) * (size_t)c->vocab_size);
        cpu_kv_seq fresh = {0};
        prefill_chunked(&r, &fresh, tokens, n + 1, n + 1, recomputed);
        assert_close(decoded, recomputed, c->vocab_size, TOL_SAME);
        cpu_kv_release(&r.kv, &fresh);
        cpu_kv_seq_free(&fresh);
    }
    cpu_kv_release(&r.kv, &s);
    cpu_kv_seq_free(&s);
    free(decoded);
    free(recomputed);
    rig_free(&r);
}

/* ---- greedy answers whatever the batch ---------------------------------------------------- */

enum { GEN = 24, PROMPT = 40 };

typedef struct lane {
    int32_t tokens[PROMPT + GEN + 64];
    int n;        /* tokens known */
    int computed; /* positions in the cache */
    cpu_kv_seq kv;
} lane;

/* Step every lane once: a lane with nothing computed prefills its prompt (in chunks of
 * `chunk`), else decodes one token; sampling lanes append their greedy token. Lanes are
 * placed in the batch in the order given. */
static void step_lanes(rig *r, lane **lanes, int n, int chunk)
{
    cpu_batch_seq batch[8];
    int samples[8];
    int k = 0;
    memset(batch, 0, sizeof batch); /* n <= 8 lanes; gcc -O1 cannot see that */
    for (int i = 0; i < n; i++) {
        lane *l = lanes[i];
        int len = l->n - l->computed;
        if (len > chunk)
            len = chunk;
        reserve_or_fail(r, &l->kv, l->computed + len);
        batch[i] = (cpu_batch_seq){l->tokens + l->computed, l->computed, len, &l->kv,
                                   l->computed + len == l->n};
        samples[i] = batch[i].samples ? k++ : -1;
    }
    forward_or_fail(r, batch, n);
    const int vocab = r->model.config.vocab_size;
    for (int i = 0; i < n; i++) {
        lanes[i]->computed += batch[i].new_tokens;
        if (samples[i] >= 0)
            lanes[i]->tokens[lanes[i]->n++] = cpu_argmax(r->run.logits + (size_t)samples[i] * vocab, vocab);
    }
}

static void lane_init(lane *l, int prompt, uint64_t seed, int vocab)
{
    memset(l, 0, sizeof *l);
    make_tokens(l->tokens, prompt, vocab, seed);
    l->n = prompt;
}

static void lane_free(rig *r, lane *l)
{
    cpu_kv_release(&r->kv, &l->kv);
    cpu_kv_seq_free(&l->kv);
}

static void test_greedy_independent_of_batch(void **state)
{
    (void)state;
    const cpu_config *c = &shape_b;
    rig r;
    rig_build(&r, c, 2);
    /* alone */
    lane alone;
    lane_init(&alone, PROMPT, 31, c->vocab_size);
    lane *only[1] = {&alone};
    while (alone.n < PROMPT + GEN)
        step_lanes(&r, only, 1, 1 << 20);

    /* with company: a decoding neighbour, a long prompt prefilled in chunks of 13 that
     * arrives mid-answer, target placed first, then last, then in the middle; and the
     * target's own prompt in chunks of 9. */
    for (int layout = 0; layout < 3; layout++) {
        lane target, chat, doc;
        lane_init(&target, PROMPT, 31, c->vocab_size);
        lane_init(&chat, 12, 32, c->vocab_size);
        lane_init(&doc, 100, 33, c->vocab_size);
        int steps = 0;
        while (target.n < PROMPT + GEN) {
            lane *batch[3];
            int n = 0;
            if (layout == 1)
                batch[n++] = &chat;
            batch[n++] = &target;
            if (layout != 1)
                batch[n++] = &chat;
            if (steps >= 3 && doc.n < 100 + GEN) { /* the document arrives at step 3 */
                if (layout == 2)
                    batch[n++] = &doc;
                else
                    memmove(batch + 1, batch, sizeof *batch * (size_t)n), batch[0] = &doc, n++;
            }
            step_lanes(&r, batch, n, layout == 0 ? 9 : 13);
            steps++;
        }
        assert_memory_equal(target.tokens, alone.tokens, sizeof(int32_t) * (PROMPT + GEN));
        lane_free(&r, &target);
        lane_free(&r, &chat);
        lane_free(&r, &doc);
    }
    lane_free(&r, &alone);
    rig_free(&r);
}

/* Thread count changes only the order of sums. */
static void test_threads_agree(void **state)
{
    (void)state;
    enum { N = 150 };
    const cpu_config *c = &shape_a;
    float *logits[2];
    int32_t tokens[N];
    make_tokens(tokens, N, c->vocab_size, 3);
    for (int t = 0; t < 2; t++) {
        rig r;
        rig_build(&r, c, t + 1);
        logits[t] = malloc(sizeof(float) * (size_t)c->vocab_size);
        cpu_kv_seq s = {0};
        prefill_chunked(&r, &s, tokens, N, 40, logits[t]);
        cpu_kv_release(&r.kv, &s);
        cpu_kv_seq_free(&s);
        rig_free(&r);
    }
    assert_close(logits[1], logits[0], c->vocab_size, TOL_SAME);
    free(logits[0]);
    free(logits[1]);
}

/* ---- a decode step split into one part per thread ---------------------------------------- */

enum { SPLIT_SEQS = 41 };

/* SPLIT_SEQS sequences, each prefilled alone to its own context (5 .. 45 positions, across
 * block edges; `long_context` for the middle one when it is above 0), then one decode step
 * of them all, every one sampling. */
typedef struct split_rig {
    rig r;
    cpu_kv_seq kv[SPLIT_SEQS];
    int32_t tokens[SPLIT_SEQS][2];
    cpu_batch_seq step[SPLIT_SEQS];
} split_rig;

static void split_rig_build(split_rig *t, int long_context)
{
    const cpu_config *c = &shape_a;
    memset(t, 0, sizeof *t);
    rig_build(&t->r, c, 2);
    t->r.run.split_min_rows = 1 << 30; /* the prefills: never split */
    int32_t prompt[2048];
    float *logits = malloc(sizeof(float) * (size_t)c->vocab_size);
    for (int i = 0; i < SPLIT_SEQS; i++) {
        const int context = i == SPLIT_SEQS / 2 && long_context > 0 ? long_context : 5 + i;
        make_tokens(prompt, context, c->vocab_size, 1000 + (uint64_t)i);
        prefill_chunked(&t->r, &t->kv[i], prompt, context, 256, logits);
        reserve_or_fail(&t->r, &t->kv[i], context + 1);
        t->tokens[i][0] = (int32_t)((7 * i + 3) % c->vocab_size);
        t->step[i] = (cpu_batch_seq){t->tokens[i], context, 1, &t->kv[i], true};
    }
    free(logits);
}

static void split_rig_free(split_rig *t)
{
    for (int i = 0; i < SPLIT_SEQS; i++) {
        cpu_kv_release(&t->r.kv, &t->kv[i]);
        cpu_kv_seq_free(&t->kv[i]);
    }
    rig_free(&t->r);
}

/* The same decode step (the same tokens at the same positions, so the cache holds the same
 * keys after either) run whole, then split into two parts of 20 and 21 rows: the same logits
 * for every sampling row. With every sequence sampling, every product of both runs is on
 * panels where the model has them (16 rows and up), and the logits are the same bit for bit;
 * with every third not sampling, a part's LM head has fewer than 16 rows and takes the
 * small-batch kernel, whose sums run in another order (TOL_SAME); likewise with plain C only. */
static void test_split_step_equals_whole(void **state)
{
    (void)state;
    const cpu_config *c = &shape_a;
    split_rig t;
    split_rig_build(&t, 0);
    const size_t n = (size_t)SPLIT_SEQS * c->vocab_size;
    float *whole = malloc(sizeof(float) * n);
    for (int pass = 0; pass < 2; pass++) {
        int samples = 0;
        for (int i = 0; i < SPLIT_SEQS; i++) {
            t.step[i].samples = pass == 0 || i % 3 != 2;
            samples += t.step[i].samples ? 1 : 0;
        }
        const size_t floats = (size_t)samples * c->vocab_size;
        t.r.run.split_min_rows = 1 << 30;
        forward_or_fail(&t.r, t.step, SPLIT_SEQS);
        assert_int_equal(t.r.run.last_parts, 1);
        memcpy(whole, t.r.run.logits, sizeof(float) * floats);
        t.r.run.split_min_rows = 16;
        forward_or_fail(&t.r, t.step, SPLIT_SEQS);
        assert_int_equal(t.r.run.last_parts, 2);
        if (pass == 0 && t.r.model.panels.wcls) {
            const int same = memcmp(t.r.run.logits, whole, sizeof(float) * floats) == 0;
            assert_true(same);
        } else {
            assert_close(t.r.run.logits, whole, (int)floats, TOL_SAME);
        }
    }
    free(whole);
    split_rig_free(&t);
}

/* A step whose middle sequence reads 2,001 keys, where the others read 6 to 46, is run
 * whole: its keys are over a third of the step's cost, so the first part costs about 30 %
 * more than half the step with that sequence and the second part more still without it;
 * no split into contiguous parts comes within cpu_forward's 10 % of equal. */
static void test_unbalanced_step_not_split(void **state)
{
    (void)state;
    split_rig t;
    split_rig_build(&t, 2000);
    t.r.run.split_min_rows = 16;
    forward_or_fail(&t.r, t.step, SPLIT_SEQS);
    assert_int_equal(t.r.run.last_parts, 1);
    split_rig_free(&t);
}

/* Bad input is refused with a reason, not computed. */
static void test_forward_refuses_past_max_seq_len(void **state)
{
    (void)state;
    cpu_config c = shape_a;
    c.max_seq_len = 20;
    rig r;
    rig_build(&r, &c, 1);
    int32_t tokens[21] = {0};
    cpu_kv_seq s = {0};
    reserve_or_fail(&r, &s, 21);
    const cpu_batch_seq seq = {tokens, 0, 21, &s, true};
    char err[ERR_LEN] = "";
    assert_int_equal(cpu_forward(&r.model, &r.run, &r.kv, r.pool, &seq, 1, err), -1);
    assert_non_null(strstr(err, "position 20"));
    cpu_kv_release(&r.kv, &s);
    cpu_kv_seq_free(&s);
    rig_free(&r);
}

/* Model configs from the catalog: the presets build, and shapes that cannot be run are
 * refused. */
static void test_config_from_arch(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    cost_arch a;
    cpu_config c;
    assert_int_equal(cost_arch_find("ref-256", &a, err), 0);
    assert_int_equal(cpu_config_from_arch(&a, 1, 0, &c, err), 0);
    assert_int_equal(c.dim, 256);
    assert_int_equal(c.n_layers, 4);
    assert_int_equal(c.n_heads, 8);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.hidden_dim, 768);
    assert_int_equal(c.vocab_size, 32000);
    assert_int_equal(cost_arch_find("tiny", &a, err), 0);
    assert_int_equal(cpu_config_from_arch(&a, 1, 0, &c, err), 0);
    assert_int_equal(cost_arch_find("small", &a, err), 0);
    assert_int_equal(cpu_config_from_arch(&a, 1, 0, &c, err), 0);
    /* 8e9 params in F32 are 32 GB: refused under a 16 GB limit, with the way out */
    assert_int_equal(cost_arch_find("llama-3.1-8b", &a, err), 0);
    assert_int_equal(cpu_config_from_arch(&a, 1, 16e9, &c, err), -1);
    assert_non_null(strstr(err, "tiny"));
    a.n_kv_heads = 3; /* 32 heads are not a multiple of 3 */
    assert_int_equal(cpu_config_from_arch(&a, 1, 0, &c, err), -1);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest portable[] = {
        cmocka_unit_test(test_batched_matches_reference_portable),
        cmocka_unit_test(test_chunked_prefill_equals_one_shot),
        cmocka_unit_test(test_decode_equals_recompute),
        cmocka_unit_test(test_greedy_independent_of_batch),
        cmocka_unit_test(test_threads_agree),
        cmocka_unit_test(test_split_step_equals_whole),
        cmocka_unit_test(test_unbalanced_step_not_split),
        cmocka_unit_test(test_forward_refuses_past_max_seq_len),
        cmocka_unit_test(test_config_from_arch),
    };
    const struct CMUnitTest avx2[] = {
        cmocka_unit_test(test_batched_matches_reference_avx2),
    };
    const struct CMUnitTest avx512[] = {
        cmocka_unit_test(test_batched_matches_reference_avx512),
    };
    const isa_group groups[] = {ISA_GROUP(portable), ISA_GROUP(avx2), ISA_GROUP(avx512)};
    return isa_groups_run(argc, argv, groups, 3);
}
