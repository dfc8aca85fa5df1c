/* test_cost — the roofline cost model against hand-computed figures, the catalog, and the
 * Hugging Face config reader. Every expected number below is worked out in its comment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "engine/cost.h"

/* |actual - expected| <= rel x |expected| */
#define assert_close(actual, expected, rel)                                                  \
    do {                                                                                     \
        double a_ = (actual), e_ = (expected);                                               \
        if (!(fabs(a_ - e_) <= (rel) * fabs(e_))) {                                          \
            print_error("%s = %.10g, expected %.10g (rel %.1g)\n", #actual, a_, e_,           \
                        (double)(rel));                                                      \
            fail();                                                                          \
        }                                                                                    \
    } while (0)

static cost_params params_for(const char *gpu_name, const char *model_name)
{
    cost_gpu gpu;
    cost_arch arch;
    char err[ERR_LEN];
    assert_int_equal(cost_gpu_find(gpu_name, &gpu, err), 0);
    assert_int_equal(cost_arch_find(model_name, &arch, err), 0);
    cost_params p;
    cost_params_init(&p, &gpu, &arch);
    return p;
}

static cost_params lesson_params(void)
{
    cost_params p = params_for("h100-sxm", "llama-3.1-8b");
    p.params_override = 8e9; /* --lesson-flops */
    return p;
}

/* ---- derived sizes ------------------------------------------------------------- */

static void test_defaults(void **state)
{
    (void)state;
    cost_params p = params_for("h100-sxm", "llama-3.1-8b");
    assert_true(p.compute_efficiency == 1.0);
    assert_true(p.bandwidth_efficiency == 1.0);
    assert_int_equal(p.step_overhead_ns, 0);
    assert_true(p.bytes_per_param == 2.0);
    assert_true(p.kv_bytes_per_elem == 2.0);
    assert_true(p.params_override == 0);
}

static void test_llama8b_params(void **state)
{
    (void)state;
    cost_params p = params_for("h100-sxm", "llama-3.1-8b");
    /* per layer: q 4096x4096 = 16,777,216; k, v 4096x1024 = 4,194,304 each; o 16,777,216;
     * MLP 3 x 4096 x 14336 = 176,160,768 -> 218,103,808; x 32 layers = 6,979,321,856 */
    assert_true(cost_linear_params(&p) == 6979321856.0);
    /* LM head 4096 x 128256 = 525,336,576 */
    assert_true(cost_lm_head_params(&p) == 525336576.0);
    /* weights read per step: (linear + LM head) x 2 B; the embedding table is gathered by
     * row, not streamed */
    assert_true(cost_weight_bytes(&p) == (6979321856.0 + 525336576.0) * 2);
}

static void test_kv_bytes_per_token(void **state)
{
    (void)state;
    cost_params p = params_for("h100-sxm", "llama-3.1-8b");
    /* K and V x 32 layers x 8 KV heads x 128 x 2 B = 131,072 */
    assert_true(cost_kv_bytes_per_token(&p) == 131072.0);
    p.kv_bytes_per_elem = 1; /* an FP8 cache halves it */
    assert_true(cost_kv_bytes_per_token(&p) == 65536.0);
}

static void test_override_params(void **state)
{
    (void)state;
    cost_params p = lesson_params();
    assert_true(cost_linear_params(&p) == 8e9);
    assert_true(cost_lm_head_params(&p) == 0);
    assert_true(cost_weight_bytes(&p) == 16e9);
    /* KV still comes from the architecture */
    assert_true(cost_kv_bytes_per_token(&p) == 131072.0);
}

static void test_kv_blocks(void **state)
{
    (void)state;
    cost_params p = params_for("h100-sxm", "llama-3.1-8b");
    /* resident: (6,979,321,856 linear + 2 x 525,336,576 LM head and untied embedding) x 2 B
     * = 16,059,990,016 B; 80e9 x 0.9 - that = 55,940,009,984 B;
     * / (131,072 B x 16 tokens) = 26,674.27 -> 26,674 blocks */
    assert_int_equal(cost_kv_blocks(&p, 0.9, 16), 26674);
    /* Llama 3.2 1B, tied: weights (973,078,528 + 262,668,288) x 2 B, embedding not again;
     * KV 2 x 16 x 8 x 64 x 2 = 32,768 B/token; (72e9 - 2,471,493,632) / 524,288 = 132,615 */
    cost_params tied = params_for("h100-sxm", "llama-3.2-1b");
    assert_int_equal(cost_kv_blocks(&tied, 0.9, 16), 132615);
    /* 70B in BF16 is 141 GB: it does not fit in 72 GB */
    cost_params big = params_for("h100-sxm", "llama-3.1-70b");
    assert_true(cost_kv_blocks(&big, 0.9, 16) <= 0);
    /* nor in an H200's 141 GB x 0.9 */
    big = params_for("h200", "llama-3.1-70b");
    assert_true(cost_kv_blocks(&big, 0.9, 16) <= 0);
    /* invalid arguments */
    assert_true(cost_kv_blocks(&p, 0, 16) <= 0);
    assert_true(cost_kv_blocks(&p, 0.9, 0) <= 0);
    /* override: weights 8e9 x 2 B = 16e9; (72e9 - 16e9) / 2,097,152 = 26,702.88 */
    cost_params lesson = lesson_params();
    assert_int_equal(cost_kv_blocks(&lesson, 0.9, 16), 26702);
}

/* ---- step formulas ------------------------------------------------------------- */

static void test_lesson_prefill_8k(void **state)
{
    (void)state;
    cost_params p = lesson_params();
    cost_breakdown b;
    int64_t ns = cost_prefill_ns(&p, 8000, &b);
    /* 2 x 8e9 x 8000 = 1.28e14 FLOP; / 989e12 = 129.42 ms */
    assert_true(b.linear_flops == 1.28e14);
    assert_true(b.lm_head_flops == 0);
    /* L x 2 x d x n (n + 1) = 32 x 2 x 4096 x 8000 x 8001 = 1.677931e13; / 989e12 = 16.97 ms */
    assert_true(b.attention_flops == 32.0 * 2 * 4096 * 8000 * 8001);
    assert_close(b.compute_ns, (1.28e14 + 32.0 * 2 * 4096 * 8000 * 8001) / 989e12 * 1e9, 1e-12);
    assert_close(b.compute_ns / 1e6, 146.39, 1e-3);
    /* bytes: 16e9 weights + KV read 8000 + write 8000 tokens x 131,072 B */
    assert_true(b.weight_bytes == 16e9);
    assert_true(b.kv_bytes == 16000.0 * 131072);
    assert_close(b.memory_ns, (16e9 + 16000.0 * 131072) / 3.35e12 * 1e9, 1e-12);
    /* compute-bound: the step is its compute time */
    assert_true(b.compute_ns > b.memory_ns);
    assert_int_equal(ns, llround(b.compute_ns));
    assert_int_equal(b.total_ns, ns);
}

static void test_lesson_scaling(void **state)
{
    (void)state;
    cost_params p = lesson_params();
    double t4 = (double)cost_prefill_ns(&p, 4000, NULL);
    double t8 = (double)cost_prefill_ns(&p, 8000, NULL);
    double t16 = (double)cost_prefill_ns(&p, 16000, NULL);
    /* the lesson's figures: 2.12x from 4k to 8k, 2.23x from 8k to 16k */
    assert_close(t8 / t4, 2.12, 0.005);
    assert_close(t16 / t8, 2.23, 0.005);
    /* 130 / 4.8 = 27x a decode step */
    cost_breakdown b;
    cost_prefill_ns(&p, 8000, &b);
    double decode = (double)cost_decode_ns(&p, 1, 0, NULL);
    assert_close(b.linear_flops / 989e12 * 1e9 / decode, 27.1, 0.01);
}

static void test_attention_chunk_is_difference(void **state)
{
    (void)state;
    cost_params p = params_for("h100-sxm", "llama-3.1-8b");
    const int cases[][2] = {{0, 1}, {1, 1}, {100, 1}, {4000, 4000}, {512, 2048}, {8191, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int context = cases[i][0], chunk = cases[i][1];
        cost_breakdown whole, before, piece;
        cost_prefill_ns(&p, context + chunk, &whole);
        if (context > 0)
            cost_prefill_ns(&p, context, &before);
        else
            memset(&before, 0, sizeof before);
        const cost_seq seq = {chunk, context, true};
        cost_step_ns(&p, &seq, 1, &piece);
        /* a chunk over existing context does exactly the attention the longer fresh prompt
         * did beyond the shorter one */
        assert_true(piece.attention_flops == whole.attention_flops - before.attention_flops);
        /* and the closed form L x 4 d (c p + c (c + 1) / 2) */
        const double c = chunk, past = context;
        assert_true(piece.attention_flops == 32.0 * 4 * 4096 * (c * past + c * (c + 1) / 2));
    }
}

static void test_decode_is_bytes_over_bandwidth(void **state)
{
    (void)state;
    cost_params p = params_for("h100-sxm", "llama-3.1-8b");
    cost_breakdown b;
    int64_t ns = cost_decode_ns(&p, 1, 0, &b);
    /* bytes: 15,009,316,864 weights + KV read 1 + write 1 token x 131,072 */
    const double bytes = (6979321856.0 + 525336576.0) * 2 + 2 * 131072.0;
    assert_true(b.weight_bytes + b.kv_bytes == bytes);
    assert_close(b.memory_ns, bytes / 3.35e12 * 1e9, 1e-12);
    assert_true(b.memory_ns > b.compute_ns);
    assert_int_equal(ns, llround(bytes / 3.35e12 * 1e9)); /* 4,480,471.3 ns */
    assert_int_equal(ns, 4480471);

    /* 32 requests holding 1,000 tokens each: KV read 32 x 1,001, write 32 x 1 */
    ns = cost_decode_ns(&p, 32, 1000, &b);
    assert_true(b.kv_bytes == 32.0 * (1001 + 1) * 131072);
    assert_true(b.linear_flops == 2 * 6979321856.0 * 32);
    assert_true(b.lm_head_flops == 2 * 525336576.0 * 32);
    assert_int_equal(ns, llround((b.weight_bytes + b.kv_bytes) / 3.35e12 * 1e9));

    /* the lesson's decode step: 16e9 B / 3.35 TB/s = 4.776 ms (+ 262,144 B of KV) */
    cost_params lesson = lesson_params();
    ns = cost_decode_ns(&lesson, 1, 0, NULL);
    assert_int_equal(ns, llround((16e9 + 2 * 131072.0) / 3.35e12 * 1e9));
    assert_close((double)ns / 1e6, 4.78, 0.005);
}

static void test_decode_helper_matches_step(void **state)
{
    (void)state;
    cost_params p = params_for("a100-80g", "mistral-7b");
    cost_seq seqs[5];
    for (int i = 0; i < 5; i++)
        seqs[i] = (cost_seq){1, 777, true};
    cost_breakdown a, b;
    assert_int_equal(cost_decode_ns(&p, 5, 777, &a), cost_step_ns(&p, seqs, 5, &b));
    assert_memory_equal(&a, &b, sizeof a);
}

static void test_efficiency_and_overhead(void **state)
{
    (void)state;
    cost_params p = lesson_params();
    cost_breakdown full, half;
    cost_prefill_ns(&p, 8000, &full);
    p.compute_efficiency = 0.5;
    int64_t ns = cost_prefill_ns(&p, 8000, &half);
    assert_close(half.compute_ns, 2 * full.compute_ns, 1e-12);
    assert_close(half.memory_ns, full.memory_ns, 1e-12);
    assert_int_equal(ns, llround(2 * full.compute_ns));

    p = lesson_params();
    cost_decode_ns(&p, 1, 0, &full);
    p.bandwidth_efficiency = 0.8;
    ns = cost_decode_ns(&p, 1, 0, &half);
    assert_close(half.memory_ns, full.memory_ns / 0.8, 1e-12);
    assert_int_equal(ns, llround(full.memory_ns / 0.8));

    /* the overhead is added on top of max(compute, memory), to the nanosecond */
    p = lesson_params();
    const int64_t bare = cost_decode_ns(&p, 1, 0, NULL);
    p.step_overhead_ns = 5000000;
    assert_int_equal(cost_decode_ns(&p, 1, 0, NULL), bare + 5000000);
    const cost_params no_overhead = lesson_params();
    const int64_t bare_prefill = cost_prefill_ns(&no_overhead, 8000, NULL);
    assert_int_equal(cost_prefill_ns(&p, 8000, NULL), bare_prefill + 5000000);
}

static void test_max_switch(void **state)
{
    (void)state;
    cost_params p = params_for("h100-sxm", "llama-3.1-8b");
    /* small prefills are memory-bound (weights dominate), long ones compute-bound; the
     * step is always the larger of the two */
    bool saw_memory = false, saw_compute = false;
    int previous_bound = -1, switches = 0;
    for (int n = 1; n <= 4096; n *= 2) {
        cost_breakdown b;
        int64_t ns = cost_prefill_ns(&p, n, &b);
        const bool compute = b.compute_ns > b.memory_ns;
        assert_int_equal(ns, llround(compute ? b.compute_ns : b.memory_ns));
        saw_memory |= !compute;
        saw_compute |= compute;
        if (previous_bound >= 0 && previous_bound != (int)compute)
            switches++;
        previous_bound = compute;
    }
    assert_true(saw_memory && saw_compute);
    assert_int_equal(switches, 1);
    /* ridge: 989e12 / 3.35e12 = 295 FLOP/B; at 2 x 7.5e9 FLOP per token over 15 GB of
     * weights that is about 2 x 7.5e9 x n / 15e9 = 295 -> n ~ 295: 256 is memory-bound,
     * 512 compute-bound */
    cost_breakdown b;
    cost_prefill_ns(&p, 256, &b);
    assert_true(b.memory_ns > b.compute_ns);
    cost_prefill_ns(&p, 512, &b);
    assert_true(b.compute_ns > b.memory_ns);
}

static void test_lm_head_only_for_sampling_rows(void **state)
{
    (void)state;
    cost_params p = params_for("h100-sxm", "llama-3.1-8b");
    const cost_seq partial = {2048, 0, false}; /* a chunk that does not finish its prompt */
    const cost_seq last = {2048, 0, true};
    cost_breakdown a, b;
    cost_step_ns(&p, &partial, 1, &a);
    cost_step_ns(&p, &last, 1, &b);
    assert_true(a.lm_head_flops == 0);
    assert_true(b.lm_head_flops == 2 * 525336576.0);
    assert_true(a.linear_flops == b.linear_flops);
    assert_true(a.linear_flops == 2 * 6979321856.0 * 2048);

    /* with the lesson's override the LM head is in the 2 x 8e9, sampling or not */
    p = lesson_params();
    cost_step_ns(&p, &partial, 1, &a);
    cost_step_ns(&p, &last, 1, &b);
    assert_memory_equal(&a, &b, sizeof a);
    assert_true(a.linear_flops == 2 * 8e9 * 2048);
}

static void test_mixed_batch_sums(void **state)
{
    (void)state;
    cost_params p = params_for("h100-sxm", "llama-3.1-8b");
    /* two decodes and a chunk: sums of their parts, weights read once */
    const cost_seq seqs[] = {{1, 100, true}, {1, 300, true}, {512, 1024, false}};
    cost_breakdown b;
    cost_step_ns(&p, seqs, 3, &b);
    assert_true(b.linear_flops == 2 * 6979321856.0 * 514);
    assert_true(b.lm_head_flops == 2 * 2 * 525336576.0);
    /* pairs: 101 + 301 + (512 x 1024 + 512 x 513 / 2) = 402 + 655,616 */
    assert_true(b.attention_flops == 32.0 * 4 * 4096 * (402 + 512.0 * 1024 + 512.0 * 513 / 2));
    /* KV read (101 + 301 + 1536) + write (1 + 1 + 512) tokens */
    assert_true(b.kv_bytes == (1938.0 + 514) * 131072);
    assert_true(b.weight_bytes == cost_weight_bytes(&p));
}

static void test_empty_step(void **state)
{
    (void)state;
    cost_params p = params_for("h100-sxm", "llama-3.1-8b");
    p.step_overhead_ns = 1000;
    cost_breakdown b;
    assert_int_equal(cost_step_ns(&p, NULL, 0, &b), 0);
    assert_true(b.weight_bytes == 0 && b.total_ns == 0);
    const cost_seq nothing = {0, 50, true};
    assert_int_equal(cost_step_ns(&p, &nothing, 1, NULL), 0);
    assert_int_equal(cost_decode_ns(&p, 0, 10, NULL), 0);
}

/* ---- the injection spike (cost_injection_step_ns) -------------------------------- */

/* A made-up model and device small enough to do every step by hand.
 *
 * Model "toy": 2 layers, hidden 4, 2 query heads and 1 KV head of head_dim 2, FFN 8, vocab
 * 16, untied. Per layer: wq 4 x 4 = 16, wk + wv 2 x (4 x 2) = 16, wo 4 x 4 = 16, MLP
 * 3 x 4 x 8 = 96 -> 144; x 2 layers = 288 linear params. LM head 4 x 16 = 64. So:
 *   per token      2 x 288 = 576 FLOPs;   per sampling row  2 x 64 = 128 FLOPs
 *   attention      L x 4 x d x pairs = 2 x 4 x (2 x 2) x pairs = 32 FLOPs per pair
 *   weights read   (288 + 64) x 2 B = 704 B per step
 *   KV per token   K and V x 2 layers x (1 x 2) x 2 B = 16 B
 * Device "toy-gpu": 2e9 FLOP/s (0.5 ns a FLOP), 1e9 B/s (1 ns a byte).
 *
 * Every expected figure below is a whole number of ns (the FLOP counts are even), and the
 * doubles involved are integers far below 2^53 until the final division, whose relative
 * error (~1e-16) is nowhere near the 0.5 ns that would move llround: so to the ns. */
static cost_params toy_params(void)
{
    const cost_gpu gpu = {.name = "toy-gpu", .peak_flops = 2e9, .mem_bandwidth = 1e9,
                          .mem_bytes = 1e6, .source = "made up for test_cost"};
    const cost_arch arch = {.name = "toy", .n_layers = 2, .hidden = 4, .n_heads = 2,
                            .n_kv_heads = 1, .head_dim = 2, .ffn = 8, .vocab = 16,
                            .max_position = 4096, .tied_embeddings = false,
                            .source = "made up for test_cost"};
    cost_params p;
    cost_params_init(&p, &gpu, &arch);
    return p;
}

static void test_toy_sizes(void **state)
{
    (void)state;
    const cost_params p = toy_params();
    assert_true(cost_linear_params(&p) == 288.0);
    assert_true(cost_lm_head_params(&p) == 64.0);
    assert_true(cost_weight_bytes(&p) == 704.0);
    assert_true(cost_kv_bytes_per_token(&p) == 16.0);
}

/* One-step prefill: a 40-token prompt beside 2 decodes holding 10 tokens each.
 *   tokens 40 + 2 = 42; sampling rows 1 + 2 = 3 (the prompt's last row samples)
 *   pairs  prompt 40 x 41 / 2 = 820; each decode 10 + 1 = 11 -> 842
 *   FLOPs  576 x 42 + 128 x 3 + 32 x 842 = 24,192 + 384 + 26,944 = 51,520 -> 25,760 ns
 *   bytes  704 + 16 x (KV read (40 + 2 x 11) + KV write (40 + 2)) = 704 + 16 x 104
 *          = 2,368 -> 2,368 ns
 *   step   max(25,760, 2,368) = 25,760 ns (compute-bound) */
static void test_injection_step_one_step(void **state)
{
    (void)state;
    const cost_params p = toy_params();
    assert_int_equal(cost_injection_step_ns(&p, 40, 2, 10, 0), 25760);
    /* the same batch through cost_step_ns: the function builds the batch it says */
    const cost_seq batch[] = {{1, 10, true}, {1, 10, true}, {40, 0, true}};
    cost_breakdown b;
    assert_int_equal(cost_step_ns(&p, batch, 3, &b), 25760);
    assert_true(b.linear_flops + b.lm_head_flops + b.attention_flops == 51520.0);
    assert_true(b.weight_bytes + b.kv_bytes == 2368.0);

    /* Memory-bound: the same device with 0.25e9 B/s (4 ns a byte), a 4-token prompt beside
     * the 2 decodes. tokens 6, rows 3, pairs 4 x 5 / 2 + 22 = 32:
     *   FLOPs 576 x 6 + 384 + 32 x 32 = 3,456 + 384 + 1,024 = 4,864 -> 2,432 ns
     *   bytes 704 + 16 x ((4 + 22) + (4 + 2)) = 704 + 512 = 1,216 -> 4,864 ns: the step */
    cost_params slow = toy_params();
    slow.gpu.mem_bandwidth = 0.25e9;
    assert_int_equal(cost_injection_step_ns(&slow, 4, 2, 10, 0), 4864);

    /* the overhead rides on top, once */
    cost_params with_overhead = toy_params();
    with_overhead.step_overhead_ns = 1000;
    assert_int_equal(cost_injection_step_ns(&with_overhead, 40, 2, 10, 0), 26760);
}

/* Chunked, budget 16: the 2 decodes go first and leave 14 tokens, so the prompt of 40 goes
 * as 14 + 14 + 12, and only the last chunk samples.
 *   chunk 1 (past 0):  tokens 16, rows 2, pairs 14 x 15 / 2 + 22 = 127
 *            FLOPs 576 x 16 + 128 x 2 + 32 x 127 = 9,216 + 256 + 4,064 = 13,536 -> 6,768 ns
 *            bytes 704 + 16 x ((14 + 22) + (14 + 2)) = 1,536 -> 1,536 ns      step 6,768
 *   chunk 2 (past 14): pairs 14 x 14 + 105 + 22 = 323
 *            FLOPs 9,216 + 256 + 10,336 = 19,808 -> 9,904 ns
 *            bytes 704 + 16 x ((28 + 22) + 16) = 1,760 -> 1,760 ns              step 9,904
 *   chunk 3 (past 28): tokens 14, rows 3, pairs 12 x 28 + 12 x 13 / 2 + 22 = 436
 *            FLOPs 576 x 14 + 384 + 32 x 436 = 8,064 + 384 + 13,952 = 22,400 -> 11,200 ns
 *            bytes 704 + 16 x ((40 + 22) + (12 + 2)) = 1,920 -> 1,920 ns       step 11,200
 *   longest: the last chunk, 11,200 ns (vs 25,760 in one step). */
static void test_injection_step_chunked(void **state)
{
    (void)state;
    const cost_params p = toy_params();
    assert_int_equal(cost_injection_step_ns(&p, 40, 2, 10, 16), 11200);
    /* a budget the whole batch fits in is one step again */
    assert_int_equal(cost_injection_step_ns(&p, 40, 2, 10, 42), 25760);

    /* A budget the decodes use up still moves the prompt, 1 token a step (cost.h). Budget
     * 2, 2 decodes, a prompt of 3: three steps of 1 prompt token + 2 decodes.
     *   step 1 (past 0): tokens 3, rows 2, pairs 1 + 22 = 23
     *            FLOPs 1,728 + 256 + 736 = 2,720 -> 1,360; bytes 704 + 16 x (23 + 3) = 1,120
     *   step 2 (past 1): pairs 2 + 22 = 24: FLOPs 2,752 -> 1,376; bytes 704 + 16 x 27 = 1,136
     *   step 3 (past 2, samples): rows 3, pairs 25
     *            FLOPs 1,728 + 384 + 800 = 2,912 -> 1,456; bytes 704 + 16 x 28 = 1,152
     *   longest 1,456 ns. */
    assert_int_equal(cost_injection_step_ns(&p, 3, 2, 10, 2), 1456);

    /* No decodes, budget 16, a prompt of 40: chunks of 16 + 16 + 8 (test_sim.c runs this
     * one through the simulator). Here the longest step is not the last one, so a chunk
     * charged for a sampling row it does not have (128 FLOPs, 64 ns) would show.
     *   chunk 1 (past 0):  pairs 16 x 17 / 2 = 136; FLOPs 9,216 + 4,352 = 13,568 -> 6,784
     *            bytes 704 + 16 x (16 + 16) = 1,216                          step 6,784
     *   chunk 2 (past 16): pairs 16 x 16 + 136 = 392; FLOPs 9,216 + 12,544 = 21,760 -> 10,880
     *            bytes 704 + 16 x (32 + 16) = 1,472                         step 10,880
     *   chunk 3 (past 32, samples): pairs 8 x 32 + 8 x 9 / 2 = 292
     *            FLOPs 4,608 + 128 + 9,344 = 14,080 -> 7,040; bytes 704 + 16 x (40 + 8)
     *            = 1,472                                                      step 7,040
     *   longest: the middle chunk, 10,880 ns. */
    assert_int_equal(cost_injection_step_ns(&p, 40, 0, 0, 16), 10880);

    /* The whole prefill is those steps summed (calibrate --target predicts a probe's TTFT
     * with it): 6,768 + 9,904 + 11,200 and 6,784 + 10,880 + 7,040; one step is itself. */
    int64_t longest = 0;
    assert_int_equal(cost_injection_prefill_ns(&p, 40, 2, 10, 16, &longest), 27872);
    assert_int_equal(longest, 11200);
    assert_int_equal(cost_injection_prefill_ns(&p, 40, 0, 0, 16, &longest), 24704);
    assert_int_equal(longest, 10880);
    assert_int_equal(cost_injection_prefill_ns(&p, 40, 2, 10, 0, NULL), 25760);
}

/* ---- catalog ------------------------------------------------------------------- */

static void test_catalog_gpus(void **state)
{
    (void)state;
    cost_gpu g;
    char err[ERR_LEN];
    assert_int_equal(cost_gpu_find("h100-sxm", &g, err), 0);
    assert_string_equal(g.name, "h100-sxm");
    assert_true(g.peak_flops == 989e12); /* exactly the lesson's figure */
    assert_true(g.mem_bandwidth == 3.35e12);
    assert_true(g.mem_bytes == 80e9);
    assert_non_null(g.source);
    assert_int_equal(cost_gpu_find("h200", &g, err), 0);
    assert_true(g.peak_flops == 989e12 && g.mem_bandwidth == 4.8e12 && g.mem_bytes == 141e9);
    assert_int_equal(cost_gpu_find("a100-80g", &g, err), 0);
    assert_true(g.peak_flops == 312e12 && g.mem_bandwidth == 2.039e12 && g.mem_bytes == 80e9);
    assert_int_equal(cost_gpu_find("H100-SXM", &g, err), 0); /* case-insensitive */
    assert_string_equal(g.name, "h100-sxm");

    err[0] = '\0';
    assert_int_equal(cost_gpu_find("h100", &g, err), -1);
    assert_non_null(strstr(err, "unknown GPU 'h100'"));
    assert_non_null(strstr(err, "h100-sxm"));
    assert_non_null(strstr(err, "mi300x")); /* the whole list */
    assert_int_equal(cost_gpu_find("", &g, err), -1);
}

static void test_catalog_models(void **state)
{
    (void)state;
    cost_arch a;
    char err[ERR_LEN];
    assert_int_equal(cost_arch_find("llama-3.1-8b", &a, err), 0);
    assert_int_equal(a.n_layers, 32);
    assert_int_equal(a.hidden, 4096);
    assert_int_equal(a.n_heads, 32);
    assert_int_equal(a.n_kv_heads, 8);
    assert_int_equal(a.head_dim, 128);
    assert_int_equal(a.ffn, 14336);
    assert_int_equal(a.vocab, 128256);
    assert_int_equal(a.max_position, 131072);
    assert_false(a.tied_embeddings);
    assert_int_equal(cost_arch_find("llama-3.1-70b", &a, err), 0);
    assert_int_equal(a.n_layers, 80);
    assert_int_equal(a.ffn, 28672);
    assert_int_equal(cost_arch_find("mistral-7b", &a, err), 0);
    assert_int_equal(a.vocab, 32768);
    assert_int_equal(a.max_position, 32768);
    assert_int_equal(cost_arch_find("qwen2.5-7b", &a, err), 0);
    assert_int_equal(a.hidden, 3584);
    assert_int_equal(a.n_kv_heads, 4);
    assert_int_equal(a.vocab, 152064);

    err[0] = '\0';
    assert_int_equal(cost_arch_find("gpt-5", &a, err), -1);
    assert_non_null(strstr(err, "unknown model 'gpt-5'"));
    assert_non_null(strstr(err, "llama-3.1-8b"));
    assert_non_null(strstr(err, "qwen2.5-7b"));
}

static void test_catalog_print(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    assert_non_null(f);
    cost_catalog_print(f);
    fclose(f);
    assert_non_null(strstr(buf, "h100-sxm"));
    assert_non_null(strstr(buf, "llama-3.1-8b"));
    assert_non_null(strstr(buf, "989.0"));
    free(buf);
}

/* ---- Hugging Face config.json -------------------------------------------------- */

typedef struct tmpdir {
    char dir[256];
    char path[300];
} tmpdir;

static int setup_tmp(void **state)
{
    tmpdir *t = calloc(1, sizeof *t);
    if (!t)
        return -1;
    const char *base = getenv("TMPDIR");
    snprintf(t->dir, sizeof t->dir, "%s/test_cost.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(t->dir)) {
        free(t);
        return -1;
    }
    /* a directory named like the model, as a snapshot download has */
    char model_dir[280];
    snprintf(model_dir, sizeof model_dir, "%s/My-Llama", t->dir);
    if (mkdir(model_dir, 0700) != 0) {
        free(t);
        return -1;
    }
    snprintf(t->path, sizeof t->path, "%s/config.json", model_dir);
    *state = t;
    return 0;
}

static int teardown_tmp(void **state)
{
    tmpdir *t = *state;
    char model_dir[280];
    unlink(t->path);
    snprintf(model_dir, sizeof model_dir, "%s/My-Llama", t->dir);
    rmdir(model_dir);
    rmdir(t->dir);
    free(t);
    return 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The official Llama-3.1-8B config.json, trimmed of fields we do not read. */
static const char llama8b_json[] =
    "{\n"
    "  \"_name_or_path\": \"meta-llama/Llama-3.1-8B\",\n"
    "  \"architectures\": [\"LlamaForCausalLM\"],\n"
    "  \"head_dim\": 128,\n"
    "  \"hidden_size\": 4096,\n"
    "  \"intermediate_size\": 14336,\n"
    "  \"max_position_embeddings\": 131072,\n"
    "  \"model_type\": \"llama\",\n"
    "  \"num_attention_heads\": 32,\n"
    "  \"num_hidden_layers\": 32,\n"
    "  \"num_key_value_heads\": 8,\n"
    "  \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"llama3\"},\n"
    "  \"rope_theta\": 500000.0,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"vocab_size\": 128256\n"
    "}\n";

static void test_hf_config_llama8b(void **state)
{
    tmpdir *t = *state;
    write_file(t->path, llama8b_json);
    cost_arch from_file, from_catalog;
    char err[ERR_LEN];
    err[0] = '\0';
    assert_int_equal(cost_arch_from_hf_config(t->path, &from_file, err), 0);
    assert_int_equal(cost_arch_find("llama-3.1-8b", &from_catalog, err), 0);
    assert_string_equal(from_file.name, "Llama-3.1-8B");
    assert_int_equal(from_file.n_layers, from_catalog.n_layers);
    assert_int_equal(from_file.hidden, from_catalog.hidden);
    assert_int_equal(from_file.n_heads, from_catalog.n_heads);
    assert_int_equal(from_file.n_kv_heads, from_catalog.n_kv_heads);
    assert_int_equal(from_file.head_dim, from_catalog.head_dim);
    assert_int_equal(from_file.ffn, from_catalog.ffn);
    assert_int_equal(from_file.vocab, from_catalog.vocab);
    assert_int_equal(from_file.max_position, from_catalog.max_position);
    assert_int_equal(from_file.tied_embeddings, from_catalog.tied_embeddings);
    assert_non_null(from_file.source);
}

static void test_hf_config_defaults(void **state)
{
    tmpdir *t = *state;
    /* no head_dim, no num_key_value_heads, no tie flag, no _name_or_path: Llama 2 7B */
    write_file(t->path, "{\"hidden_size\": 4096, \"num_hidden_layers\": 32,"
                        " \"num_attention_heads\": 32, \"intermediate_size\": 11008,"
                        " \"vocab_size\": 32000, \"max_position_embeddings\": 4096,"
                        " \"head_dim\": null}");
    cost_arch a;
    char err[ERR_LEN];
    assert_int_equal(cost_arch_from_hf_config(t->path, &a, err), 0);
    assert_int_equal(a.head_dim, 128);   /* 4096 / 32 */
    assert_int_equal(a.n_kv_heads, 32);  /* no GQA */
    assert_false(a.tied_embeddings);     /* LlamaConfig's default */
    assert_string_equal(a.name, "My-Llama"); /* the directory holding the file */

    /* a tied small model with an explicit head_dim that is not hidden / heads */
    write_file(t->path, "{\"hidden_size\": 2048, \"num_hidden_layers\": 16,"
                        " \"num_attention_heads\": 32, \"num_key_value_heads\": 8,"
                        " \"head_dim\": 64, \"intermediate_size\": 8192,"
                        " \"vocab_size\": 128256, \"max_position_embeddings\": 131072,"
                        " \"tie_word_embeddings\": true}");
    assert_int_equal(cost_arch_from_hf_config(t->path, &a, err), 0);
    assert_int_equal(a.head_dim, 64);
    assert_true(a.tied_embeddings);

    /* a multimodal wrapper: the language model under text_config */
    write_file(t->path, "{\"model_type\": \"mllama\", \"text_config\": {\"hidden_size\": 4096,"
                        " \"num_hidden_layers\": 40, \"num_attention_heads\": 32,"
                        " \"num_key_value_heads\": 8, \"intermediate_size\": 14336,"
                        " \"vocab_size\": 128256, \"max_position_embeddings\": 131072}}");
    assert_int_equal(cost_arch_from_hf_config(t->path, &a, err), 0);
    assert_int_equal(a.n_layers, 40);
}

static void expect_hf_error(const char *path, const char *text, const char *needle)
{
    write_file(path, text);
    cost_arch a;
    char err[ERR_LEN];
    err[0] = '\0';
    assert_int_equal(cost_arch_from_hf_config(path, &a, err), -1);
    if (!strstr(err, needle)) {
        print_error("error '%s' lacks '%s'\n", err, needle);
        fail();
    }
    assert_non_null(strstr(err, path)); /* says which file */
}

static void test_hf_config_errors(void **state)
{
    tmpdir *t = *state;
    const char *base = "\"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
                       " \"intermediate_size\": 14336, \"vocab_size\": 128256,"
                       " \"max_position_embeddings\": 131072";
    char text[512];

    snprintf(text, sizeof text, "{%s}", base);
    expect_hf_error(t->path, text, "missing field \"hidden_size\"");
    snprintf(text, sizeof text, "{\"hidden_size\": \"4096\", %s}", base);
    expect_hf_error(t->path, text, "\"hidden_size\" must be an integer");
    snprintf(text, sizeof text, "{\"hidden_size\": 4096.5, %s}", base);
    expect_hf_error(t->path, text, "\"hidden_size\" must be an integer");
    snprintf(text, sizeof text, "{\"hidden_size\": 0, %s}", base);
    expect_hf_error(t->path, text, "\"hidden_size\" = 0 is out of range");
    snprintf(text, sizeof text, "{\"hidden_size\": -4096, %s}", base);
    expect_hf_error(t->path, text, "out of range");
    snprintf(text, sizeof text, "{\"hidden_size\": 4096, \"num_key_value_heads\": 5, %s}", base);
    expect_hf_error(t->path, text, "not a multiple of num_key_value_heads 5");
    snprintf(text, sizeof text, "{\"hidden_size\": 4000, \"num_hidden_layers\": 32,"
                                " \"num_attention_heads\": 48, \"intermediate_size\": 14336,"
                                " \"vocab_size\": 128256, \"max_position_embeddings\": 131072}");
    expect_hf_error(t->path, text, "head_dim is not given");
    snprintf(text, sizeof text, "{\"hidden_size\": 4096, \"tie_word_embeddings\": 1, %s}", base);
    expect_hf_error(t->path, text, "tie_word_embeddings");
    snprintf(text, sizeof text, "{\"hidden_size\": 4096, \"num_local_experts\": 8, %s}", base);
    expect_hf_error(t->path, text, "mixture-of-experts");
    expect_hf_error(t->path, "[1, 2, 3]", "not a JSON object");
    expect_hf_error(t->path, "{\"hidden_size\": 4096,", "");  /* malformed: file:line:col */

    cost_arch a;
    char err[ERR_LEN];
    err[0] = '\0';
    assert_int_equal(cost_arch_from_hf_config("/nonexistent/config.json", &a, err), -1);
    assert_non_null(strstr(err, "/nonexistent/config.json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_llama8b_params),
        cmocka_unit_test(test_kv_bytes_per_token),
        cmocka_unit_test(test_override_params),
        cmocka_unit_test(test_kv_blocks),
        cmocka_unit_test(test_lesson_prefill_8k),
        cmocka_unit_test(test_lesson_scaling),
        cmocka_unit_test(test_attention_chunk_is_difference),
        cmocka_unit_test(test_decode_is_bytes_over_bandwidth),
        cmocka_unit_test(test_decode_helper_matches_step),
        cmocka_unit_test(test_efficiency_and_overhead),
        cmocka_unit_test(test_max_switch),
        cmocka_unit_test(test_lm_head_only_for_sampling_rows),
        cmocka_unit_test(test_mixed_batch_sums),
        cmocka_unit_test(test_empty_step),
        cmocka_unit_test(test_toy_sizes),
        cmocka_unit_test(test_injection_step_one_step),
        cmocka_unit_test(test_injection_step_chunked),
        cmocka_unit_test(test_catalog_gpus),
        cmocka_unit_test(test_catalog_models),
        cmocka_unit_test(test_catalog_print),
        cmocka_unit_test_setup_teardown(test_hf_config_llama8b, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_hf_config_defaults, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_hf_config_errors, setup_tmp, teardown_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
