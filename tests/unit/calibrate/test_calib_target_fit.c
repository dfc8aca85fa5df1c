/* calibrate/calib_target_fit — the pure pieces of calibrate --target: the probe grids, the
 * steady gap and the stall of synthetic token series, the policy and budget inferred from
 * synthetic stalls, the refusal of a bad fit, the served-model mapping, the check of the
 * tokens streamed against usage, and the step model and profile fitted from a result. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "calibrate/calib_target_fit.h"
#include "client/chunk.h"
#include "common/err.h"
#include "engine/cost.h"
#include "engine/fit.h"
#include "engine/sched.h"

#define MS 1000000LL

static void test_batches(void **state)
{
    (void)state;
    int b[CALIB_TARGET_MAX_BATCHES];
    assert_int_equal(calib_target_batches(128, b, CALIB_TARGET_MAX_BATCHES), 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(b[i], 1 << i);
    assert_int_equal(calib_target_batches(100, b, CALIB_TARGET_MAX_BATCHES), 8);
    assert_int_equal(b[6], 64);
    assert_int_equal(b[7], 100);
    assert_int_equal(calib_target_batches(1, b, CALIB_TARGET_MAX_BATCHES), 1);
    assert_int_equal(b[0], 1);
    assert_int_equal(calib_target_batches(1024, b, 3), 3); /* never past the cap */
    assert_int_equal(b[2], 4);
}

static void test_prompts(void **state)
{
    (void)state;
    int p[CALIB_TARGET_MAX_PROMPTS];
    assert_int_equal(calib_target_prompts(256, 16384, p, CALIB_TARGET_MAX_PROMPTS), 7);
    assert_int_equal(p[0], 256);
    assert_int_equal(p[6], 16384);
    assert_int_equal(calib_target_prompts(256, 10000, p, CALIB_TARGET_MAX_PROMPTS), 7);
    assert_int_equal(p[5], 8192);
    assert_int_equal(p[6], 10000);
    assert_int_equal(calib_target_prompts(512, 512, p, CALIB_TARGET_MAX_PROMPTS), 1);
    assert_int_equal(p[0], 512);
}

/* Streams of n events every gap_ns from t0, one token each. */
typedef struct synth {
    int64_t t[64];
    int cum[64];
} synth;

static void synth_fill(synth *s, calib_target_series *out, int n, int64_t t0, int64_t gap_ns)
{
    for (int i = 0; i < n; i++) {
        s->t[i] = t0 + i * gap_ns;
        s->cum[i] = i + 1;
    }
    *out = (calib_target_series){s->t, s->cum, n};
}

static void test_steady_gap(void **state)
{
    (void)state;
    synth s[3];
    calib_target_series series[3];
    for (int k = 0; k < 3; k++)
        synth_fill(&s[k], &series[k], 40, k * MS, 7 * MS);
    /* one outlier gap (a stall) in stream 1 and a slow start in stream 2: the median holds */
    for (int i = 20; i < 40; i++)
        s[1].t[i] += 100 * MS;
    s[2].t[0] -= 50 * MS;
    double gap = 0, ctx = 0;
    int64_t n = 0;
    assert_int_equal(calib_target_steady_gap(series, 3, 4, 64, 0, 1000 * MS, &gap, &ctx, &n), 0);
    assert_true(fabs(gap - 7 * MS) < 1);
    /* gaps i-1 -> i for i = 4 .. 39 in each stream: 36 each */
    assert_int_equal(n, 3 * 36);
    /* context: prompt + tokens before the gap's token, 64 + (4 .. 39), mean 64 + 21.5 */
    assert_true(fabs(ctx - 85.5) < 1e-9);

    /* an event carrying 2 tokens counts as 2 gaps of half its length */
    s[0].cum[10] = s[0].cum[9] + 2;
    for (int i = 11; i < 40; i++)
        s[0].cum[i] = s[0].cum[i - 1] + 1;
    assert_int_equal(calib_target_steady_gap(series, 1, 4, 64, 0, 1000 * MS, &gap, &ctx, &n), 0);
    assert_int_equal(n, 37);

    /* a window with no gap in it */
    assert_int_equal(calib_target_steady_gap(series, 3, 4, 64, 5000 * MS, 6000 * MS, &gap, &ctx, &n), -1);
}

static void test_stall_of(void **state)
{
    (void)state;
    synth s[4];
    calib_target_series series[4];
    for (int k = 0; k < 4; k++) {
        synth_fill(&s[k], &series[k], 60, k * MS, 7 * MS);
        /* a 380 ms step from 200 ms on, in every stream but the last */
        for (int i = 30; i < 60 && k < 3; i++)
            s[k].t[i] += 373 * MS;
    }
    calib_target_seen seen;
    /* the prompt sent at 190 ms, its first token at 590 ms */
    assert_int_equal(calib_target_stall_of(series, 4, 190 * MS, 590 * MS, 0, 7 * MS, 21 * MS, &seen), 0);
    assert_int_equal(seen.stalled, 3);
    assert_true(fabs(seen.stall_ns - 380 * MS) < 1); /* median of {380, 380, 380, 7}: lower middle */
    /* the stalled streams' step began at 203, 204, 205 ms: queued 14 ms (their median) */
    assert_true(fabs(seen.queue_ns - 14 * MS) < 1);
    /* its first token with the step's end (583 .. 585 ms): that one step; the stream that
     * never stalled saw 56 steps end after the send, less the one then in flight */
    assert_int_equal(calib_target_stall_of(series, 4, 190 * MS, 584 * MS, 0, 7 * MS, 21 * MS, &seen), 0);
    assert_int_equal(seen.steps, 1);
    /* sent after the 380 ms step began (203 .. 205 ms), which cannot then carry it: with the
     * first token at 590 ms, the decode step ending there is the one step counted ... */
    assert_int_equal(calib_target_stall_of(series, 4, 206 * MS, 590 * MS, 0, 7 * MS, 21 * MS, &seen), 0);
    assert_int_equal(seen.steps, 1);
    /* ... and one that emitted the first token began before the send: no queueing */
    assert_int_equal(calib_target_stall_of(series, 4, 206 * MS, 584 * MS, 0, 7 * MS, 21 * MS, &seen), 0);
    assert_true(seen.queue_ns == 0);
    /* nothing overlaps a window past the streams */
    assert_int_equal(calib_target_stall_of(series, 4, 9000 * MS, 9100 * MS, 0, 7 * MS, 21 * MS, &seen), -1);
}

/* A chunked prefill's steps counted from the streams: chunks cost alike step to step, so a
 * decode step the server slowed just before the first chunk (over 1.25 x the steady gap,
 * under half a chunk step) is not counted as one; nor, before a one-step prefill, as a
 * second step; nor one that began before the send, however long. */
static void test_stall_steps(void **state)
{
    (void)state;
    synth s[3];
    calib_target_series series[3];
    for (int k = 0; k < 3; k++) {
        synth_fill(&s[k], &series[k], 60, k * MS, 7 * MS);
        /* the step that began just after the send (event 29) slowed from 7 to 10 ms (the
         * server reading the request), then four 30 ms chunk steps (events 30..33) and a
         * final 20 ms one (event 34, the first token) */
        const int64_t extra[6] = {3, 23, 23, 23, 23, 13};
        int64_t shift = 0;
        for (int i = 29; i < 60; i++) {
            shift += i - 29 < 6 ? extra[i - 29] * MS : 0;
            s[k].t[i] += shift;
        }
    }
    calib_target_seen seen;
    const int64_t send = s[0].t[28] - 1 * MS, first = s[0].t[34];
    assert_int_equal(calib_target_stall_of(series, 3, send, first, 0, 7 * MS, 21 * MS, &seen), 0);
    assert_int_equal(seen.steps, 5);
    /* the first token delivered 5 ms late, past half a steady gap: alone it takes the
     * streams' next step (event 35, 7 ms on) for the one that emitted it, and adds that
     * decode step and the slowed one before the chunks; the second token, received with
     * event 35, bounds that step by a steady gap before it */
    assert_int_equal(calib_target_stall_of(series, 3, send, first + 5 * MS, 0, 7 * MS, 21 * MS, &seen), 0);
    assert_int_equal(seen.steps, 7);
    assert_int_equal(calib_target_stall_of(series, 3, send, first + 5 * MS, s[0].t[35], 7 * MS,
                                           21 * MS, &seen), 0);
    assert_int_equal(seen.steps, 5);
    /* 9 ms late, past event 35: the second token comes after it on the same connection,
     * and a steady gap before that still bounds it (up to 1.5 steady gaps late) */
    assert_int_equal(calib_target_stall_of(series, 3, send, first + 9 * MS, first + 9 * MS + MS / 10,
                                           7 * MS, 21 * MS, &seen), 0);
    assert_int_equal(seen.steps, 5);
    /* one read took both, 9 ms late: its stamp bounds the second token's step */
    assert_int_equal(calib_target_stall_of(series, 3, send, first + 9 * MS, first + 9 * MS, 7 * MS,
                                           21 * MS, &seen), 0);
    assert_int_equal(seen.steps, 5);
    /* the second late instead, the first on time: the first bounds it */
    assert_int_equal(calib_target_stall_of(series, 3, send, first, s[0].t[35] + 9 * MS, 7 * MS,
                                           21 * MS, &seen), 0);
    assert_int_equal(seen.steps, 5);
    /* the chunk steps need not be equal: one slowed to 50 ms still counts */
    for (int k = 0; k < 3; k++)
        for (int i = 31; i < 60; i++)
            s[k].t[i] += 20 * MS;
    assert_int_equal(calib_target_stall_of(series, 3, send, s[0].t[34], 0, 7 * MS, 21 * MS, &seen), 0);
    assert_int_equal(seen.steps, 5);
    /* a slowed step as long as half a chunk step is one */
    for (int k = 0; k < 3; k++)
        for (int i = 29; i < 60; i++)
            s[k].t[i] += 6 * MS;
    assert_int_equal(calib_target_stall_of(series, 3, send, s[0].t[34], 0, 7 * MS, 21 * MS, &seen), 0);
    assert_int_equal(seen.steps, 6);
    /* but not when it began before the send (every stream's event 28 before it) */
    assert_int_equal(calib_target_stall_of(series, 3, s[0].t[28] + 3 * MS, s[0].t[34], 0, 7 * MS,
                                           21 * MS, &seen), 0);
    assert_int_equal(seen.steps, 5);

    /* one 380 ms prefill step after the slowed one: one step */
    for (int k = 0; k < 3; k++) {
        synth_fill(&s[k], &series[k], 60, k * MS, 7 * MS);
        for (int i = 29; i < 60; i++)
            s[k].t[i] += (i == 29 ? 3 : 3 + 373) * MS;
    }
    assert_int_equal(calib_target_stall_of(series, 3, send, s[0].t[30], 0, 7 * MS, 21 * MS, &seen), 0);
    assert_int_equal(seen.steps, 1);
}

/* A fitted model of tiny (the terms do not matter, only that the same model makes the
 * synthetic stalls and infers from them). */
static void fitted_cost(cost_params *p)
{
    cost_gpu g;
    cost_arch a;
    memset(&g, 0, sizeof g);
    char err[ERR_LEN];
    assert_int_equal(cost_arch_find("tiny", &a, err), 0);
    snprintf(g.name, sizeof g.name, "target");
    g.mem_bytes = 80e9;
    g.fit = (cost_step_fit){"tiny", 7e6, 0.01e6, 30, 0.04e6, 2, false};
    cost_params_init(p, &g, &a);
    assert_true(cost_fit_applies(p));
}

static const int LENGTHS[] = {256, 512, 1024, 2048, 4096, 8192};
#define N_LENGTHS 6

static void synth_stalls(const cost_params *p, int budget, calib_target_stall *st)
{
    for (int i = 0; i < N_LENGTHS; i++) {
        memset(&st[i], 0, sizeof st[i]);
        st[i].prompt_tokens = LENGTHS[i];
        st[i].streams = 32;
        st[i].mean_context = 150;
        st[i].gap_ns = (double)cost_decode_ns(p, 32, 150, NULL);
        st[i].stall_ns = (double)cost_injection_step_ns(p, LENGTHS[i], 32, 150, budget);
        /* its TTFT: a few ms of queueing, then its steps (one, or one per chunk) */
        const int chunk = budget > 0 ? budget - 32 : LENGTHS[i];
        const int steps = (LENGTHS[i] + chunk - 1) / chunk;
        st[i].queue_ns = 3e6;
        st[i].ttft_ns = st[i].queue_ns +
                        (double)cost_injection_prefill_ns(p, LENGTHS[i], 32, 150, budget, NULL);
        st[i].steps = steps;
    }
}

static void test_infer_policy(void **state)
{
    (void)state;
    cost_params p;
    fitted_cost(&p);
    calib_target_stall st[N_LENGTHS];
    calib_target_policy pol;

    /* one-step: every prompt's stall is its whole step */
    synth_stalls(&p, 0, st);
    calib_target_infer_policy(&p, st, N_LENGTHS, &pol);
    assert_string_equal(pol.policy, "mixed");
    assert_int_equal(pol.budget, 8192);
    assert_true(pol.budget_is_lower_bound);
    assert_int_equal(pol.n, N_LENGTHS);
    for (int i = 0; i < N_LENGTHS; i++)
        assert_true(fabs(pol.ratio[i] - 1) < 1e-9);

    /* chunked under budgets of 2048 and 512: the budget comes back within 2 % */
    static const int budgets[] = {2048, 512};
    for (int b = 0; b < 2; b++) {
        synth_stalls(&p, budgets[b], st);
        calib_target_infer_policy(&p, st, N_LENGTHS, &pol);
        assert_string_equal(pol.policy, "chunked");
        assert_false(pol.budget_is_lower_bound);
        if (!(fabs((double)(pol.budget - budgets[b])) <= 0.02 * budgets[b])) {
            print_error("budget %d inferred as %d\n", budgets[b], pol.budget);
            fail();
        }
    }

    /* a server that keeps state (llama.cpp's unified cache): the lone prefills the fit saw
     * were 5x slower than the prefill beside the streams, so every stall is a fifth of the
     * fitted one-step stall; each prompt's stall is still its whole prefill: one step */
    synth_stalls(&p, 0, st);
    cost_params slow = p;
    slow.gpu.fit.token_ns *= 5;
    slow.gpu.fit.pair_ns *= 5;
    calib_target_infer_policy(&slow, st, N_LENGTHS, &pol);
    assert_true(pol.ratio[N_LENGTHS - 1] < 0.7); /* what the fitted stall alone would call chunked */
    assert_string_equal(pol.policy, "mixed");
    assert_int_equal(pol.budget, 8192);

    /* chunked under 512 with that bent fit: the fitted step alone puts the budget elsewhere;
     * the steps each prefill took (1024 in 3, 2048 in 5, 4096 in 9, 8192 in 18 chunks of 480)
     * hold it within [455, 482) + 32 streams */
    synth_stalls(&p, 512, st);
    calib_target_infer_policy(&slow, st, N_LENGTHS, &pol);
    assert_string_equal(pol.policy, "chunked");
    assert_true(pol.budget_counted);
    if (!(pol.budget >= 487 && pol.budget < 514)) {
        print_error("budget 512 with a bent fit inferred as %d\n", pol.budget);
        fail();
    }
    {
        double lo, hi;
        bool chunked[N_LENGTHS] = {false, false, true, true, true, true};
        assert_true(calib_target_budget_bounds(st, chunked, N_LENGTHS, &lo, &hi));
        assert_true(fabs(lo - (4096.0 / 9 + 32)) < 1e-9 && fabs(hi - (8192.0 / 17 + 32)) < 1e-9);
        /* a step miscounted (8192 in 19: [431, 455), which meets no other): the others' */
        st[5].steps = 19;
        assert_true(calib_target_budget_bounds(st, chunked, N_LENGTHS, &lo, &hi));
        assert_true(fabs(lo - (4096.0 / 9 + 32)) < 1e-9 && fabs(hi - (2048.0 / 4 + 32)) < 1e-9);
        /* 4096 counted in 10 ([410, 455)) and 8192 in 18 again: two sets of three agree
         * ([410, 455) and [455, 482)); of equals the larger chunk, where a step added by
         * noise would have put the other */
        st[5].steps = 18;
        st[4].steps = 10;
        assert_true(calib_target_budget_bounds(st, chunked, N_LENGTHS, &lo, &hi));
        assert_true(fabs(lo - (8192.0 / 18 + 32)) < 1e-9 && fabs(hi - (8192.0 / 17 + 32)) < 1e-9);
        st[4].steps = 9;
        /* no chunked prompt counted in 2 steps or more: no bounds */
        bool none[N_LENGTHS] = {false};
        assert_false(calib_target_budget_bounds(st, none, N_LENGTHS, &lo, &hi));
    }

    /* short prompts within a decode step's noise (a prefill of under 4 steady gaps) say
     * nothing, whatever their ratio: a one-step server stays one-step */
    synth_stalls(&p, 0, st);
    for (int i = 0; i < 2; i++) {
        st[i].gap_ns = (st[i].ttft_ns - st[i].queue_ns) / 3.5; /* a stall, yet under 4 gaps */
        st[i].stall_ns = 0.59 * (st[i].ttft_ns - st[i].queue_ns);
    }
    calib_target_infer_policy(&p, st, N_LENGTHS, &pol);
    assert_false(pol.informative[0]);
    assert_false(pol.informative[1]);
    assert_int_equal(pol.n_informative, N_LENGTHS - 2);
    assert_string_equal(pol.policy, "mixed");
    /* only such prompts: unknown, not a guess */
    calib_target_infer_policy(&p, st, 2, &pol);
    assert_string_equal(pol.policy, "");

    /* a prompt the scheduler admitted late (it waited for room beside the streams) is judged
     * by its prefill, not its wait: queued 10 s, then one step */
    synth_stalls(&p, 0, st);
    st[N_LENGTHS - 1].queue_ns = 10e9;
    st[N_LENGTHS - 1].ttft_ns += 10e9;
    calib_target_infer_policy(&p, st, N_LENGTHS, &pol);
    assert_string_equal(pol.policy, "mixed");
    assert_int_equal(pol.budget, 8192);

    /* no stall: the streams never waited for a prompt */
    synth_stalls(&p, 0, st);
    for (int i = 0; i < N_LENGTHS; i++)
        st[i].stall_ns = 1.1 * st[i].gap_ns;
    calib_target_infer_policy(&p, st, N_LENGTHS, &pol);
    assert_string_equal(pol.policy, "none");

    /* nothing measured: nothing inferred */
    calib_target_infer_policy(&p, st, 0, &pol);
    assert_string_equal(pol.policy, "");
}

/* The profile against its own interference probes: a server that behaves as fitted is
 * predicted exactly; one whose stall beside the streams is 2x what its lone probes imply is
 * missed, and the probe named; short prompts and a policy the model cannot run are not
 * judged. */
static void test_check_probes(void **state)
{
    (void)state;
    cost_params p;
    fitted_cost(&p);
    calib_target_stall st[N_LENGTHS];
    calib_target_policy pol;
    calib_target_check ck;
    static const int budgets[] = {0, 2048};
    for (int b = 0; b < 2; b++) {
        synth_stalls(&p, budgets[b], st);
        calib_target_infer_policy(&p, st, N_LENGTHS, &pol);
        calib_target_check_probes(&p, &pol, st, N_LENGTHS, CALIB_TARGET_MAX_MISS, &ck);
        assert_true(ck.ok);
        assert_int_equal(ck.n, N_LENGTHS);
        assert_true(ck.n_judged >= 4);
        for (int i = 0; i < N_LENGTHS; i++)
            if (ck.judged[i] && (fabs(ck.stall_miss[i]) > 0.03 || fabs(ck.prefill_miss[i]) > 0.03)) {
                print_error("budget %d, prompt %d: stall miss %g, prefill miss %g\n", budgets[b],
                            LENGTHS[i], ck.stall_miss[i], ck.prefill_miss[i]);
                fail();
            }
    }

    /* one-step, but every stall and prefill beside the streams 2x the fitted one: refused,
     * the worst probe a judged one, its stall predicted at half */
    synth_stalls(&p, 0, st);
    for (int i = 0; i < N_LENGTHS; i++) {
        st[i].stall_ns *= 2;
        st[i].ttft_ns = st[i].queue_ns + 2 * (st[i].ttft_ns - st[i].queue_ns);
    }
    calib_target_infer_policy(&p, st, N_LENGTHS, &pol);
    assert_string_equal(pol.policy, "mixed");
    calib_target_check_probes(&p, &pol, st, N_LENGTHS, CALIB_TARGET_MAX_MISS, &ck);
    assert_false(ck.ok);
    assert_true(ck.worst >= 0 && ck.judged[ck.worst]);
    assert_true(fabs(ck.stall_miss[ck.worst] + 0.5) < 0.02);

    /* only the last prompt's stall 1.4x (predicted 29 % short): it is the one named; 1.2x passes */
    synth_stalls(&p, 0, st);
    st[N_LENGTHS - 1].stall_ns *= 1.4;
    calib_target_infer_policy(&p, st, N_LENGTHS, &pol);
    calib_target_check_probes(&p, &pol, st, N_LENGTHS, CALIB_TARGET_MAX_MISS, &ck);
    assert_false(ck.ok);
    assert_int_equal(ck.worst, N_LENGTHS - 1);
    assert_true(ck.worst_is_stall);
    st[N_LENGTHS - 1].stall_ns *= 1.2 / 1.4;
    calib_target_check_probes(&p, &pol, st, N_LENGTHS, CALIB_TARGET_MAX_MISS, &ck);
    assert_true(ck.ok);

    /* a short prompt off by 3x is not judged (too short to tell) */
    synth_stalls(&p, 0, st);
    st[0].gap_ns = (st[0].ttft_ns - st[0].queue_ns) / 3.5;
    st[0].stall_ns *= 3;
    calib_target_infer_policy(&p, st, N_LENGTHS, &pol);
    calib_target_check_probes(&p, &pol, st, N_LENGTHS, CALIB_TARGET_MAX_MISS, &ck);
    assert_false(ck.judged[0]);
    assert_true(ck.ok);

    /* no stall (prefill elsewhere): the model runs no such server, nothing judged */
    synth_stalls(&p, 0, st);
    for (int i = 0; i < N_LENGTHS; i++)
        st[i].stall_ns = 1.1 * st[i].gap_ns;
    calib_target_infer_policy(&p, st, N_LENGTHS, &pol);
    calib_target_check_probes(&p, &pol, st, N_LENGTHS, CALIB_TARGET_MAX_MISS, &ck);
    assert_int_equal(ck.n_judged, 0);
    assert_int_equal(ck.worst, -1);
    assert_true(ck.ok);
}

static void test_fit_ok(void **state)
{
    (void)state;
    fit_result fr;
    memset(&fr, 0, sizeof fr);
    fr.decode_rms = 0.02;
    fr.prefill_rms = 0.20;
    const double residual[] = {0.01, -0.03, 0.02, 0.1, -0.29, 0.12};
    int worst = -2;
    assert_false(calib_target_fit_ok(&fr, residual, 6, 0.15, &worst));
    assert_int_equal(worst, 4);
    assert_true(calib_target_fit_ok(&fr, residual, 6, 0.25, &worst));
    fr.prefill_rms = 0.01;
    fr.decode_rms = 0.151;
    assert_false(calib_target_fit_ok(&fr, residual, 6, 0.15, &worst));
    assert_true(calib_target_fit_ok(&fr, residual, 0, 0.2, &worst));
    assert_int_equal(worst, -1);
}

/* Weight-bound prefills are kept out of the fit; decode probes carry batch x mean context. */
static void test_fit_probes(void **state)
{
    (void)state;
    static calib_target_result r;
    memset(&r, 0, sizeof r);
    r.decode[0] = (calib_target_decode){1, 64, 141, 7 * MS, 100, -1};
    r.decode[1] = (calib_target_decode){32, 64, 140, 7.1 * MS, 100, -1};
    r.decode[2] = (calib_target_decode){32, 1024, 1100, 8 * MS, 100, -1};
    r.n_decode = 3;
    r.prefill[0] = (calib_target_prefill){.prompt_tokens = 256, .ttft_ns = 12.9 * MS, .fitted = true};
    r.prefill[1] = (calib_target_prefill){.prompt_tokens = 512, .ttft_ns = 22.4 * MS, .fitted = true};
    r.prefill[2] = (calib_target_prefill){.prompt_tokens = 1024, .ttft_ns = 44.2 * MS, .fitted = true};
    r.prefill[3] = (calib_target_prefill){.prompt_tokens = 2048, .ttft_ns = 89.4 * MS, .fitted = true};
    r.n_prefill = 4;
    calib_target_mark_weight_bound(&r, 7 * MS, 4);
    assert_false(r.prefill[0].fitted);
    assert_false(r.prefill[1].fitted);
    assert_true(r.prefill[2].fitted);
    fit_probe p[CALIB_TARGET_MAX_PROBES];
    assert_int_equal(calib_target_fit_probes(&r, false, p, CALIB_TARGET_MAX_PROBES), 5);
    assert_int_equal(p[2].batch, 32);
    assert_true(fabs(p[2].context_sum - 32 * 1100.0) < 1e-9);
    assert_int_equal(p[2].prompt_tokens, 0);
    assert_int_equal(p[3].prompt_tokens, 1024);
    assert_int_equal(p[3].batch, 1);
    assert_true(p[4].ns == 89.4 * MS);
    assert_int_equal(calib_target_fit_probes(&r, false, p, 2), 2);

    /* a unified cache: each sequence over every stream's cells; with no reset offered, over
     * what /metrics said where it said more, and a prefill over the cells left before it */
    r.decode[2].occupied_cells = 50000;
    r.prefill[3].metrics = (calib_target_metrics){0.5, -1, -1, 34000};
    r.prefill[3].cells_met = 30000;
    assert_true(calib_target_cells_said(&r));
    assert_true(calib_target_cells_seen(&r) == 50000);
    assert_int_equal(calib_target_fit_probes(&r, true, p, CALIB_TARGET_MAX_PROBES), 5);
    assert_true(fabs(p[1].context_sum - 32 * 32 * 140.0) < 1e-9); /* not said: the streams' */
    assert_true(fabs(p[2].context_sum - 32 * 50000.0) < 1e-9);
    assert_true(p[3].context_sum == 0 && p[4].context_sum == 30000);
    /* a reset offered: it cleared the cache, the cells are the probe's own */
    snprintf(r.kept.reset_path, sizeof r.kept.reset_path, "/slots/0?action=erase");
    assert_false(calib_target_cells_said(&r));
    assert_int_equal(calib_target_fit_probes(&r, true, p, CALIB_TARGET_MAX_PROBES), 5);
    assert_true(fabs(p[2].context_sum - 32 * 32 * 1100.0) < 1e-9);
    assert_true(p[4].context_sum == 0);
}

/* The decode grid (1 .. 16 streams at 64- and 1024-token prompts) made exactly by truth:
 * each sequence over its own context, or (cells) a unified cache's occupied cells, the
 * streams' plus 0 to 20,000 left by earlier probes, moving from probe to probe. */
static void synth_decodes(calib_target_result *r, const cost_params *truth, bool cells)
{
    static const int batches[] = {1, 2, 4, 8, 16};
    static const int contexts[] = {64, 1024};
    for (int c = 0; c < 2; c++)
        for (int b = 0; b < 5; b++) {
            calib_target_decode *d = &r->decode[r->n_decode];
            d->batch = batches[b];
            d->prompt_tokens = contexts[c];
            d->mean_context = contexts[c] + 20;
            const double own = d->batch * d->mean_context;
            d->occupied_cells = cells ? own + 5000.0 * ((r->n_decode * 7) % 5) : 0;
            const fit_probe p = {.batch = d->batch,
                                 .context_sum = cells ? d->batch * d->occupied_cells : own};
            d->gap_ns = fit_predict_ns(&truth->gpu.fit, &p);
            r->n_decode++;
        }
}

/* Every term of the fit back within 1e-6 of the one the probes were made with. */
static void assert_terms(const cost_step_fit *got, const cost_step_fit *made)
{
    const double terms[][2] = {{got->step_ns, made->step_ns},
                               {got->seq_ns, made->seq_ns},
                               {got->ctx_ns, made->ctx_ns},
                               {got->token_ns, made->token_ns},
                               {got->pair_ns, made->pair_ns}};
    for (int t = 0; t < 5; t++)
        if (!(fabs(terms[t][0] / terms[t][1] - 1) < 1e-6)) {
            print_error("term %d: fitted %g, made with %g\n", t, terms[t][0], terms[t][1]);
            fail();
        }
}

/* A llama.cpp-like server that offers no reset: a unified cache whose occupied cells move
 * from probe to probe (what earlier probes left in idle slots), said by /metrics. Probes made
 * exactly by a known step model charged over those cells: the layout is inferred unified
 * from the cells alone (no after-fill probe), the terms come back, the one-step stalls over
 * the cells each injection met are predicted. */
static void test_fit_model_cells_said(void **state)
{
    (void)state;
    cost_params truth;
    fitted_cost(&truth);
    calib_target_result *r = calloc(1, sizeof *r);
    assert_non_null(r);
    synth_decodes(r, &truth, true);
    static const double left[N_LENGTHS] = {30000, 0, 12000, 45000, 8000, 20000};
    for (int i = 0; i < N_LENGTHS; i++) {
        calib_target_prefill *f = &r->prefill[r->n_prefill++];
        f->prompt_tokens = LENGTHS[i];
        f->fitted = true;
        f->metrics = (calib_target_metrics){-1, -1, -1, left[i] + 4000};
        f->cells_met = left[i];
        const fit_probe p = {.batch = 1, .context_sum = left[i], .prompt_tokens = f->prompt_tokens};
        f->ttft_ns = fit_predict_ns(&truth.gpu.fit, &p);
    }
    for (int i = 0; i < N_LENGTHS; i++) {
        calib_target_stall *st = &r->stall[r->n_stall++];
        st->prompt_tokens = LENGTHS[i];
        st->streams = 32;
        st->mean_context = 150;
        st->cells_seen = 32 * 150 + 3000.0 * i;
        const fit_probe p = {.batch = 32, .context_sum = 32 * st->cells_seen};
        st->gap_ns = fit_predict_ns(&truth.gpu.fit, &p);
        int64_t longest = 0;
        st->queue_ns = 3e6;
        st->ttft_ns = st->queue_ns + (double)cost_injection_prefill_cells_ns(
                                         &truth, LENGTHS[i], 32, 150, 0,
                                         (int64_t)st->cells_seen, &longest);
        st->stall_ns = (double)longest;
        st->steps = 1;
    }
    snprintf(r->served_model, sizeof r->served_model, "tiny");

    cost_arch arch;
    char err[ERR_LEN] = "";
    assert_int_equal(cost_arch_find("tiny", &arch, err), 0);
    calib_target_fitted m;
    assert_int_equal(calib_target_fit_model(r, &arch, "target", 80e9, 0.15, &m, err), 0);
    assert_int_equal(m.kv_layout, SCHED_KV_UNIFIED);
    assert_true(m.unified_decode_rms < 1e-6 && m.paged_decode_rms > 0.05);
    assert_terms(&m.gpu.fit, &truth.gpu.fit);
    assert_string_equal(m.policy.policy, "mixed");
    assert_true(m.check.ok && m.check.n_judged > 0);
    for (int i = 0; i < N_LENGTHS; i++)
        assert_true(m.stall[i].occupied_cells == r->stall[i].cells_seen);
    assert_true(m.accepted);

    /* a server that says no cells but offers a reset (today's llama.cpp): the probes made
     * over the streams' own cells; the layout is tried only when a fresh prompt after the
     * streams was slowed 1.25x or more */
    snprintf(r->kept.reset_path, sizeof r->kept.reset_path, "/slots/0?action=erase");
    for (int i = 0; i < r->n_decode; i++) {
        calib_target_decode *d = &r->decode[i];
        d->occupied_cells = -1;
        const fit_probe p = {.batch = d->batch, .context_sum = d->batch * d->batch * d->mean_context};
        d->gap_ns = fit_predict_ns(&truth.gpu.fit, &p);
    }
    for (int i = 0; i < N_LENGTHS; i++) {
        r->prefill[i].metrics = CALIB_TARGET_METRICS_NONE;
        r->prefill[i].cells_met = -1;
        const fit_probe p = {.batch = 1, .prompt_tokens = LENGTHS[i]};
        r->prefill[i].ttft_ns = fit_predict_ns(&truth.gpu.fit, &p);
        r->stall[i].cells_seen = -1;
    }
    r->kept.prompt_tokens = 4096;
    r->kept.quiet_ns = 100e6;
    r->kept.after_fill_ns = 110e6; /* 1.1x: nothing retained seen */
    assert_int_equal(calib_target_fit_model(r, &arch, "target", 80e9, 0.15, &m, err), 0);
    assert_int_equal(m.kv_layout, SCHED_KV_PAGED);
    assert_true(m.unified_decode_rms == -1);
    r->kept.after_fill_ns = 140e6; /* 1.4x */
    assert_int_equal(calib_target_fit_model(r, &arch, "target", 80e9, 0.15, &m, err), 0);
    assert_int_equal(m.kv_layout, SCHED_KV_UNIFIED);
    assert_true(m.unified_decode_rms < 1e-6 && m.paged_decode_rms > 0.05);
    for (int i = 0; i < N_LENGTHS; i++)
        assert_true(m.stall[i].occupied_cells == 32 * 150);
    free(r);
}

static void test_arch(void **state)
{
    (void)state;
    cost_arch a;
    char err[ERR_LEN] = "";
    assert_int_equal(calib_target_arch("qwen2.5-7b", &a, err), 0);
    assert_string_equal(a.name, "qwen2.5-7b");
    assert_int_equal(calib_target_arch("Qwen/Qwen2.5-7B-Instruct", &a, err), 0);
    assert_string_equal(a.name, "qwen2.5-7b");
    assert_int_equal(calib_target_arch("meta-llama/Llama-3.1-8B-Instruct", &a, err), 0);
    assert_string_equal(a.name, "llama-3.1-8b");
    assert_int_equal(calib_target_arch("acme/secret-model", &a, err), -1);
    assert_non_null(strstr(err, "--model"));
    assert_non_null(strstr(err, "acme/secret-model"));
}

/* Issue 22, defect 1: a proxy that doubles usage.completion_tokens halved every step the
 * fit saw. Usage is now counted beside the events streamed, and must agree within 2 % (a
 * few merged events) and break no rule of the protocol. */
static void test_tokens_agree(void **state)
{
    (void)state;
    char why[ERR_LEN] = "";
    calib_target_tokens t = {0};
    assert_true(calib_target_tokens_agree(&t, why, sizeof why)); /* nothing streamed yet */
    t.streamed = 1000;
    t.usage = 1000;
    assert_true(calib_target_tokens_agree(&t, why, sizeof why));
    t.usage = 1020; /* 20 events of 2 tokens (vLLM's held-back tokens) */
    assert_true(calib_target_tokens_agree(&t, why, sizeof why));
    t.usage = 980;
    assert_true(calib_target_tokens_agree(&t, why, sizeof why));
    t.usage = 1021;
    assert_false(calib_target_tokens_agree(&t, why, sizeof why));
    t.usage = 2000;
    assert_false(calib_target_tokens_agree(&t, why, sizeof why));
    assert_string_equal(why, "usage counted 2000 tokens where 1000 streamed, 2.00 per event");
    t.usage = 1000;
    t.violations = 3;
    snprintf(t.first_violation, sizeof t.first_violation, "%s",
             chunk_violation_text(CHUNK_VIOLATION_ABOVE_STREAM));
    assert_false(calib_target_tokens_agree(&t, why, sizeof why));
    assert_string_equal(why, "3 protocol violations, the first: usage.completion_tokens above "
                             "the tokens streamed");
    t.usage = 0;
    t.violations = 1;
    assert_false(calib_target_tokens_agree(&t, why, sizeof why));
    assert_non_null(strstr(why, "usage counted 0 tokens where 1000 streamed, 0.00 per event; "
                                "1 protocol violation, the first: "));
}

/* A result whose probes a known step model made exactly (fitted_cost's), with chunked stalls
 * under a 2048-token budget: the fit gives the terms back, accepts itself, infers the budget,
 * and the profile says all of it. One decode probe made 30 % slow: refused at 1 %, and named. */
static void test_fit_model_profile(void **state)
{
    (void)state;
    cost_params truth;
    fitted_cost(&truth);
    calib_target_result *r = calloc(1, sizeof *r);
    assert_non_null(r);
    synth_decodes(r, &truth, false);
    for (int i = 0; i < N_LENGTHS; i++) {
        calib_target_prefill *f = &r->prefill[r->n_prefill++];
        f->prompt_tokens = LENGTHS[i];
        f->fitted = true;
        const fit_probe p = {.batch = 1, .prompt_tokens = f->prompt_tokens};
        f->ttft_ns = fit_predict_ns(&truth.gpu.fit, &p);
    }
    synth_stalls(&truth, 2048, r->stall);
    r->n_stall = N_LENGTHS;
    snprintf(r->served_model, sizeof r->served_model, "tiny");

    cost_arch arch;
    char err[ERR_LEN] = "";
    assert_int_equal(cost_arch_find("tiny", &arch, err), 0);
    calib_target_fitted m;
    assert_int_equal(calib_target_fit_model(r, &arch, "target", 80e9, 0.15, &m, err), 0);
    assert_int_equal(m.n, 10 + N_LENGTHS);
    assert_true(m.accepted);
    assert_string_equal(m.gpu.name, "target");
    assert_true(m.gpu.mem_bytes == 80e9);
    assert_terms(&m.gpu.fit, &truth.gpu.fit);
    assert_string_equal(m.policy.policy, "chunked");
    assert_true(fabs((double)(m.policy.budget - 2048)) <= 0.02 * 2048);

    json_t *root = calib_target_profile_json(r, &m, &arch, "http://***@host:8000");
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(root, "source")), "target");
    assert_string_equal(json_string_value(json_object_get(root, "target")), "http://***@host:8000");
    json_t *measured = json_object_get(root, "measured");
    assert_true(json_is_true(json_object_get(measured, "accepted")));
    assert_true(json_is_true(json_object_get(measured, "predicts_probes")));
    json_t *last = json_array_get(json_object_get(measured, "interference"), N_LENGTHS - 1);
    assert_true(json_is_true(json_object_get(last, "judged")));
    assert_true(fabs(json_real_value(json_object_get(last, "predicted_stall_ms")) /
                     json_real_value(json_object_get(last, "stall_ms")) - 1) < 0.02);
    assert_string_equal(json_string_value(json_object_get(measured, "fit_model")), "tiny");
    assert_true(json_real_value(json_object_get(measured, "max_rms")) == 0.15);
    assert_string_equal(json_string_value(json_object_get(measured, "policy_inferred")), "chunked");
    const char *when = json_string_value(json_object_get(measured, "when"));
    assert_non_null(when);
    assert_int_equal(strlen(when), 20); /* 2026-12-01T10:00:00Z */
    assert_true(when[10] == 'T' && when[19] == 'Z');
    assert_true(json_is_null(json_object_get(root, "prefix_caching"))); /* not measured */
    json_decref(root);
    /* the same prompt a second time in a fifth of the time: prefix caching, for sim to read */
    r->kept.prompt_tokens = 4096;
    r->kept.cache_first_ns = 100e6;
    r->kept.cache_second_ns = 20e6;
    root = calib_target_profile_json(r, &m, &arch, "http://host:8000");
    assert_true(json_is_true(json_object_get(root, "prefix_caching")));
    json_t *st = json_object_get(json_object_get(root, "measured"), "state");
    assert_true(json_is_true(json_object_get(st, "prefix_caching")));
    assert_true(json_is_null(json_object_get(st, "reset")));
    json_decref(root);
    r->kept.cache_second_ns = 60e6; /* 0.6 x: no cache */
    root = calib_target_profile_json(r, &m, &arch, "http://host:8000");
    assert_true(json_is_false(json_object_get(root, "prefix_caching")));
    json_decref(root);

    /* one probe off by 30 %: refused under 1 %, and it is the one named */
    r->decode[7].gap_ns *= 1.3;
    assert_int_equal(calib_target_fit_model(r, &arch, "target", 80e9, 0.01, &m, err), 0);
    assert_false(m.accepted);
    assert_int_equal(m.worst, 7);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_prompts),
        cmocka_unit_test(test_steady_gap),
        cmocka_unit_test(test_stall_of),
        cmocka_unit_test(test_stall_steps),
        cmocka_unit_test(test_infer_policy),
        cmocka_unit_test(test_check_probes),
        cmocka_unit_test(test_fit_ok),
        cmocka_unit_test(test_fit_probes),
        cmocka_unit_test(test_arch),
        cmocka_unit_test(test_tokens_agree),
        cmocka_unit_test(test_fit_model_profile),
        cmocka_unit_test(test_fit_model_cells_said),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
