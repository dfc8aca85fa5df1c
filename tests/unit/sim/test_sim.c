/* test_sim — the discrete-event simulator (sim.h): what it refuses, and runs small enough
 * to follow by hand, step by step, on a made-up model whose every step is worked out in a
 * comment; then the properties a run must keep whatever its size: the same config gives
 * the same log, every answer has the length the workload drew, the statistics agree with
 * the log, and preemption (recompute) neither loses nor repeats a token.
 *
 * The made-up model and device ("toy" on "toy-gpu", the same as test_cost.c's):
 *   2 layers, hidden 4, 2 query heads + 1 KV head of head_dim 2, FFN 8, vocab 16, untied:
 *   per layer 16 (wq) + 16 (wk, wv) + 16 (wo) + 96 (MLP 3 x 4 x 8) = 144 -> 288 linear
 *   params; LM head 4 x 16 = 64. So a step costs
 *     FLOPs = 576 x tokens + 128 x sampling rows + 32 x causal (query, key) pairs
 *     bytes = 704 (weights, once) + 16 x (KV tokens read + KV tokens written)
 *   at 2e9 FLOP/s (0.5 ns a FLOP) and 1e9 B/s (1 ns a byte), the larger of the two.
 * A decode with c tokens of context: 1 token, 1 row, c + 1 pairs, KV read c + 1, write 1:
 *     compute (704 + 32 (c + 1)) / 2 = 368 + 16 c ns;  memory 704 + 16 (c + 2) = 736 + 16 c ns
 *   -> memory-bound, 736 + 16 c ns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/tokenlog.h"
#include "engine/cost.h"
#include "engine/sched.h"
#include "sim/sim.h"
#include "workload/workload.h"

#include "scratch_file.h"
#include "toy_cost.h"

/* One user, prompts of 8 tokens, answers of 20, no injection (it is switched on where a
 * test needs it: 32 tokens, a 1-token answer), 50 us of virtual time; mixed, budget 64. */
static sim_config small_config(void)
{
    sim_config c = toy_config();
    c.wl.users = 1;
    c.wl.duration_ns = 50000;
    c.wl.inject = false;
    c.wl.inject_at_ns = 10000;
    c.wl.inject_every_ns = c.wl.duration_ns; /* one injection */
    c.wl.prompt_tokens = 32;
    c.wl.inject_max_tokens = 1;
    c.wl.prompt_len.a = c.wl.prompt_len.b = 8;
    c.wl.answer_len.a = c.wl.answer_len.b = 20;
    c.wl.seed = 1;
    return c;
}

/* The end of decode k of a request (k = 1, 2, ...), counted from the request's start: the
 * prefill of its 8-token prompt, then decode steps with context 8, 9, ... See the tests. */
static int64_t toy_token_end(int k)
{
    /* prefill 2,944 ns; decode j (context 7 + j) 736 + 16 (7 + j) = 848 + 16 j ns;
     * sum over j = 1..k-1 of (848 + 16 j) = 848 (k - 1) + 8 (k - 1) k */
    return 2944 + 848 * (int64_t)(k - 1) + 8 * (int64_t)(k - 1) * k;
}

/* ---- sim_check ----------------------------------------------------------------------- */

static void expect_refused(const sim_config *cfg, const char *want1, const char *want2)
{
    char err[ERR_LEN] = "";
    assert_int_equal(sim_check(cfg, err), -1);
    if (!strstr(err, want1) || (want2 && !strstr(err, want2)))
        fail_msg("sim_check said \"%s\", expected \"%s\"%s%s", err, want1,
                 want2 ? " and " : "", want2 ? want2 : "");
}

static void test_check_refuses_what_cannot_run(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    sim_config c = small_config();
    c.wl.inject = true;

    /* an injection longer than the budget: refused under mixed and prefill-first, with the
     * scheduler's own reason; fine under chunked, which splits it */
    c.wl.prompt_tokens = 100;
    expect_refused(&c, "the injected prompt cannot run", "exceeds the token budget");
    c.sched.policy = SCHED_PREFILL_FIRST;
    expect_refused(&c, "the injected prompt cannot run", "max_num_batched_tokens=64");
    c.sched.policy = SCHED_CHUNKED;
    assert_int_equal(sim_check(&c, err), 0);

    /* the boundary under mixed: 64 = the budget fits, 65 does not */
    c.sched.policy = SCHED_MIXED;
    c.wl.prompt_tokens = 64;
    assert_int_equal(sim_check(&c, err), 0);
    c.wl.prompt_tokens = 65;
    expect_refused(&c, "exceeds the token budget", NULL);

    /* longer than the context: refused whatever the policy */
    c.sched.policy = SCHED_CHUNKED;
    c.wl.prompt_tokens = 2000;
    expect_refused(&c, "the injected prompt cannot run", "max_model_len=1024");

    /* no injection (the baseline): its prompt is not checked */
    c.wl.inject = false;
    assert_int_equal(sim_check(&c, err), 0);

    /* a background prompt over the budget under mixed */
    c = small_config();
    c.wl.prompt_len.b = 80;
    expect_refused(&c, "a background request cannot run", "exceeds the token budget");
    /* and a workload that is wrong in itself */
    c = small_config();
    c.wl.duration_ns = 0;
    expect_refused(&c, "duration", NULL);

    /* sim_run refuses the same, before simulating anything */
    c = small_config();
    c.wl.inject = true;
    c.wl.prompt_tokens = 100;
    tokenlog log;
    tokenlog_init(&log);
    sim_stats stats;
    assert_int_equal(sim_run(&c, &log, &stats, err), -1);
    assert_non_null(strstr(err, "exceeds the token budget"));
    assert_int_equal(log.n_events + log.n_requests + log.n_steps, 0);
    assert_int_equal(stats.steps, 0);
    tokenlog_free(&log);
}

/* ---- runs followed by hand ----------------------------------------------------------- */

/* One user, no injection: every gap is the toy's decode step.
 *   prefill of 8 tokens: 8 tokens, 1 row, 8 x 9 / 2 = 36 pairs, KV 8 read + 8 written:
 *     compute (576 x 8 + 128 + 32 x 36) / 2 = (4,608 + 128 + 1,152) / 2 = 2,944 ns
 *     memory  704 + 16 x 16 = 960 ns                                   -> 2,944 ns
 *   decode k of the answer (k = 1..19) holds 8 + k - 1 tokens: 736 + 16 (7 + k) = 848 + 16 k
 *   a 20-token answer: 2,944 + sum_{k=1..19} (848 + 16 k) = 2,944 + 16,112 + 3,040 = 22,096
 * Requests start at 0, 22,096 and 44,192 (closed loop: the next one at once). The third
 * gets its prefill (ends 47,136) and decodes of 864, 880, 896 and 912 ns (ends 48,000,
 * 48,880, 49,776, 50,688); the last one started before 50,000 and the run ends with it:
 * 20 + 20 + 5 = 45 steps and tokens, virtual end 50,688 ns. */
static void test_one_user_gaps_are_the_decode_step(void **state)
{
    (void)state;
    const sim_config c = small_config();
    tokenlog log;
    sim_stats st;
    run_or_fail(&c, &log, &st);

    assert_int_equal(st.steps, 45);
    assert_int_equal(st.token_events, 45);
    assert_int_equal(st.requests, 3);
    assert_int_equal(st.preemptions, 0);
    assert_int_equal(st.virtual_ns, 50688);
    assert_int_equal(log.n_events, 45);
    assert_int_equal(log.n_requests, 3);
    assert_int_equal(log.n_steps, 45);

    static const int64_t start[3] = {0, 22096, 44192};
    static const int tokens[3] = {20, 20, 5};
    int64_t e = 0;
    for (int r = 0; r < 3; r++) {
        for (int k = 1; k <= tokens[r]; k++, e++) {
            const tokenlog_event *ev = &log.events[e];
            assert_int_equal(ev->request, log.requests[r].request);
            assert_int_equal(ev->user, 0);
            assert_int_equal(ev->kind, TOKENLOG_BG);
            assert_int_equal(ev->n_tokens, 1);
            assert_int_equal(ev->t_ns, start[r] + toy_token_end(k));
            if (k > 1) {
                /* the gap is the decode step, by hand and by the cost model */
                const int64_t gap = ev->t_ns - log.events[e - 1].t_ns;
                assert_int_equal(gap, 848 + 16 * (k - 1));
                assert_int_equal(gap, cost_decode_ns(&c.cost, 1, 8 + k - 2, NULL));
            }
        }
        const tokenlog_request *row = &log.requests[r];
        assert_int_equal(row->t_send_ns, start[r]);
        assert_int_equal(row->t_first_ns, start[r] + 2944);
        assert_int_equal(row->prompt_tokens, 8);
        assert_int_equal(row->completion_tokens, tokens[r]);
        assert_int_equal(row->t_end_ns, r < 2 ? start[r] + 22096 : -1);
        assert_string_equal(row->finish_reason, r < 2 ? "length" : "");
    }
    /* the step log: back to back, each as long as the model says, prefill then decodes */
    for (int64_t i = 0; i < log.n_steps; i++) {
        const tokenlog_step *s = &log.steps[i];
        const bool prefill = i == 0 || i == 20 || i == 40;
        assert_int_equal(s->t_start_ns, i == 0 ? 0 : log.steps[i - 1].t_end_ns);
        assert_int_equal(s->t_end_ns - s->t_start_ns, s->modeled_ns);
        assert_int_equal(s->prefill_tokens, prefill ? 8 : 0);
        assert_int_equal(s->decode_tokens, prefill ? 0 : 1);
        assert_int_equal(s->n_requests, 1);
    }
    tokenlog_free(&log);
}

/* The same user, and one 32-token prompt sent at 10,000 ns (mixed, one step).
 * The user's decode k ends at 2,944 + 848 k + 8 k (k + 1): decode 8 runs 9,328 -> 10,304, so
 * the injection joins the next step, at 10,304: the user's decode 9 (context 16) and the
 * whole prompt.
 *   tokens 33, rows 2, pairs 32 x 33 / 2 + 17 = 545
 *   compute (576 x 33 + 128 x 2 + 32 x 545) / 2 = (19,008 + 256 + 17,440) / 2 = 18,352 ns
 *   memory  704 + 16 x ((32 + 17) + (32 + 1)) = 704 + 1,312 = 2,016 ns
 *   -> 18,352 ns, 10,304 -> 28,656: the user waits 18,352 ns for a token that alone would
 *   have taken 736 + 16 x 16 = 992 ns (x18.5). The injection's answer is its first token
 *   (TTFT 28,656 - 10,000 = 18,656 ns). */
static void test_injection_step_is_the_model_spike(void **state)
{
    (void)state;
    sim_config c = small_config();
    c.wl.inject = true;
    tokenlog log;
    sim_stats st;
    run_or_fail(&c, &log, &st);

    int64_t spike = -1;
    for (int64_t i = 0; i < log.n_steps; i++) {
        if (log.steps[i].prefill_tokens == 32) {
            assert_int_equal(spike, -1); /* exactly one step carries it */
            spike = i;
        }
    }
    assert_true(spike >= 0);
    const tokenlog_step *s = &log.steps[spike];
    assert_int_equal(s->t_start_ns, 10304);
    assert_int_equal(s->t_end_ns, 28656);
    assert_int_equal(s->modeled_ns, 18352);
    assert_int_equal(s->decode_tokens, 1);
    assert_int_equal(s->n_requests, 2);
    assert_int_equal(cost_injection_step_ns(&c.cost, 32, 1, 16, 0), 18352);

    const tokenlog_request *inj = NULL;
    for (int64_t r = 0; r < log.n_requests; r++)
        if (log.requests[r].kind == TOKENLOG_INJECT)
            inj = &log.requests[r];
    assert_non_null(inj);
    assert_int_equal(inj->user, -1);
    assert_int_equal(inj->t_send_ns, 10000);
    assert_int_equal(inj->t_first_ns, 28656);
    assert_int_equal(inj->t_end_ns, 28656);
    assert_int_equal(inj->completion_tokens, 1);

    /* the user's gap across it is the whole step */
    int64_t before = -1, after = -1;
    for (int64_t e = 0; e < log.n_events; e++) {
        const tokenlog_event *ev = &log.events[e];
        if (ev->user != 0)
            continue;
        if (ev->t_ns <= 10304)
            before = ev->t_ns;
        else if (after < 0)
            after = ev->t_ns;
    }
    assert_int_equal(before, 10304);
    assert_int_equal(after, 28656);
    tokenlog_free(&log);
}

/* Chunked prefill, budget 16, no users: a 40-token prompt at 1,000 ns goes as 16 + 16 + 8.
 *   chunk 1 (past 0, no sample): pairs 16 x 17 / 2 = 136
 *     compute (576 x 16 + 32 x 136) / 2 = (9,216 + 4,352) / 2 = 6,784; memory 704 + 16 x 32
 *     = 1,216                                                                -> 6,784 ns
 *   chunk 2 (past 16): pairs 16 x 16 + 136 = 392
 *     compute (9,216 + 12,544) / 2 = 10,880; memory 704 + 16 x (32 + 16) = 1,472 -> 10,880
 *   chunk 3 (past 32, samples): pairs 8 x 32 + 8 x 9 / 2 = 292
 *     compute (4,608 + 128 + 9,344) / 2 = 7,040; memory 704 + 16 x (40 + 8) = 1,472 -> 7,040
 * Idle until 1,000, then 1,000 -> 7,784 -> 18,664 -> 25,704; nothing left: the run ends.
 * The longest step is the middle chunk, as cost_injection_step_ns says. */
static void test_chunked_injection_by_hand(void **state)
{
    (void)state;
    sim_config c = small_config();
    c.wl.users = 0;
    c.wl.inject = true;
    c.wl.inject_at_ns = 1000;
    c.wl.prompt_tokens = 40;
    c.sched.policy = SCHED_CHUNKED;
    c.sched.max_num_batched_tokens = 16;
    tokenlog log;
    sim_stats st;
    run_or_fail(&c, &log, &st);

    static const int64_t bounds[4] = {1000, 7784, 18664, 25704};
    static const int chunks[3] = {16, 16, 8};
    assert_int_equal(log.n_steps, 3);
    assert_int_equal(st.steps, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(log.steps[i].t_start_ns, bounds[i]);
        assert_int_equal(log.steps[i].t_end_ns, bounds[i + 1]);
        assert_int_equal(log.steps[i].prefill_tokens, chunks[i]);
        assert_int_equal(log.steps[i].decode_tokens, 0);
    }
    assert_int_equal(cost_injection_step_ns(&c.cost, 40, 0, 0, 16), 10880);
    assert_int_equal(log.n_events, 1);
    assert_int_equal(log.events[0].t_ns, 25704);
    assert_int_equal(log.requests[0].t_first_ns, 25704);
    assert_int_equal(st.virtual_ns, 25704);
    assert_int_equal(st.token_events, 1);
    assert_int_equal(st.requests, 1);
    tokenlog_free(&log);
}

/* ---- properties of bigger runs (toy_busy_config) ------------------------------------------ */

static void test_deterministic(void **state)
{
    (void)state;
    const sim_config c = toy_busy_config();
    tokenlog a, b, other;
    sim_stats sa, sb, so;
    run_or_fail(&c, &a, &sa);
    run_or_fail(&c, &b, &sb);
    assert_true(a.n_events > 100 && a.n_steps > 100);
    assert_true(toy_logs_equal(&a, &b));
    assert_memory_equal(&sa, &sb, sizeof sa);
    /* the comparison can tell runs apart: another seed draws other lengths */
    sim_config d = c;
    d.wl.seed = 2;
    run_or_fail(&d, &other, &so);
    assert_false(toy_logs_equal(&a, &other));
    tokenlog_free(&a);
    tokenlog_free(&b);
    tokenlog_free(&other);
}

/* Every request's prompt and answer have the lengths the workload drew for it
 * (workload_bg(user, k) for the user's k-th request; the injector's settings for an
 * injection), and the token log holds exactly its answer's tokens. */
static void test_token_counts_match_the_workload(void **state)
{
    (void)state;
    const sim_config c = toy_busy_config();
    tokenlog log;
    sim_stats st;
    run_or_fail(&c, &log, &st);

    int64_t next_k[4] = {0, 0, 0, 0};
    int finished_bg = 0, finished_inject = 0;
    bool answer_seen[13] = {false};
    for (int64_t r = 0; r < log.n_requests; r++) {
        const tokenlog_request *row = &log.requests[r];
        int64_t events = 0;
        for (int64_t e = 0; e < log.n_events; e++)
            if (log.events[e].request == row->request) {
                assert_int_equal(log.events[e].user, row->user);
                assert_int_equal(log.events[e].kind, row->kind);
                events += log.events[e].n_tokens;
            }
        assert_int_equal(events, row->completion_tokens);
        int want_prompt, want_answer;
        if (row->kind == TOKENLOG_BG) {
            assert_true(row->user >= 0 && row->user < 4);
            const workload_bg_request w = workload_bg(&c.wl, row->user, next_k[row->user]++);
            want_prompt = w.prompt_tokens;
            want_answer = w.max_tokens;
        } else {
            assert_int_equal(row->user, -1);
            want_prompt = c.wl.prompt_tokens;
            want_answer = c.wl.inject_max_tokens;
        }
        assert_int_equal(row->prompt_tokens, want_prompt);
        if (row->t_end_ns >= 0) {
            assert_int_equal(row->completion_tokens, want_answer);
            assert_string_equal(row->finish_reason, "length");
            if (row->kind == TOKENLOG_BG) {
                finished_bg++;
                answer_seen[want_answer] = true;
            } else {
                finished_inject++;
            }
        } else {
            assert_true(row->completion_tokens < want_answer);
        }
    }
    /* the injector's plan: 50 + 200 i us < 2,000 us, i = 0..9 */
    int injections = 0;
    for (int64_t r = 0; r < log.n_requests; r++)
        injections += log.requests[r].kind == TOKENLOG_INJECT;
    assert_int_equal(injections, 10);
    /* guards, not results: enough finished answers, of several lengths, for the checks
     * above to mean something (this run finishes all 10 injections and ~170 answers) */
    int lengths = 0;
    for (int n = 0; n <= 12; n++)
        lengths += answer_seen[n];
    assert_true(finished_inject >= 5);
    assert_true(finished_bg >= 50);
    assert_true(lengths >= 5);
    tokenlog_free(&log);
}

/* Sums over the step log against the requests, for a run with no preemption (mixed, a
 * cache large enough): every token fed is a prompt token or the previous answer token of a
 * request, so sum(decode + prefill) = sum over started requests of
 * (prompt + completion - 1); every item of a step samples, so each step stamps exactly
 * n_requests tokens at its end; the statistics are the log's counts. */
static void check_stats_match_log(const sim_config *c, const tokenlog *log, const sim_stats *st)
{
    assert_int_equal(st->steps, log->n_steps);
    assert_int_equal(st->token_events, log->n_events);
    assert_int_equal(st->requests, log->n_requests);
    assert_true(log->n_steps > 0);
    assert_int_equal(st->virtual_ns, log->steps[log->n_steps - 1].t_end_ns);
    int64_t e = 0;
    for (int64_t i = 0; i < log->n_steps; i++) {
        const tokenlog_step *s = &log->steps[i];
        assert_int_equal(s->step, i);
        assert_true(s->modeled_ns >= 1 && s->t_end_ns - s->t_start_ns == s->modeled_ns);
        assert_true(i == 0 || s->t_start_ns >= log->steps[i - 1].t_end_ns);
        assert_true(s->decode_tokens + s->prefill_tokens <= c->sched.max_num_batched_tokens);
        assert_true(s->n_requests <= c->sched.max_num_seqs);
        /* the log's events are in step order: those stamped at this step's end */
        int64_t stamped = 0;
        while (e < log->n_events && log->events[e].t_ns == s->t_end_ns) {
            stamped++;
            e++;
        }
        if (c->sched.policy == SCHED_MIXED && st->preemptions == 0)
            assert_int_equal(stamped, s->n_requests);
        else
            assert_true(stamped <= s->n_requests);
    }
    assert_int_equal(e, log->n_events); /* no event outside a step's end */
}

static int64_t tokens_fed(const tokenlog *log)
{
    int64_t fed = 0;
    for (int64_t i = 0; i < log->n_steps; i++)
        fed += log->steps[i].decode_tokens + log->steps[i].prefill_tokens;
    return fed;
}

/* Tokens in the KV cache of requests that have sampled: prompt + completion - 1 each (the
 * last sampled token is not fed back). */
static int64_t tokens_kept(const tokenlog *log)
{
    int64_t kept = 0;
    for (int64_t r = 0; r < log->n_requests; r++)
        if (log->requests[r].completion_tokens > 0)
            kept += log->requests[r].prompt_tokens + log->requests[r].completion_tokens - 1;
    return kept;
}

/* Prompt tokens of requests that have not sampled yet: under chunked prefill the run can
 * end with some of them mid-prompt, their chunks fed but nothing sampled. */
static int64_t tokens_unsampled(const tokenlog *log)
{
    int64_t n = 0;
    for (int64_t r = 0; r < log->n_requests; r++)
        if (log->requests[r].completion_tokens == 0)
            n += log->requests[r].prompt_tokens;
    return n;
}

static void test_stats_consistent_with_log(void **state)
{
    (void)state;
    sim_config c = toy_busy_config();
    c.sched.policy = SCHED_MIXED;
    c.sched.max_num_batched_tokens = 64;
    tokenlog log;
    sim_stats st;
    run_or_fail(&c, &log, &st);
    assert_int_equal(st.preemptions, 0);
    check_stats_match_log(&c, &log, &st);
    assert_int_equal(tokens_fed(&log), tokens_kept(&log));
    tokenlog_free(&log);

    /* the chunked run: the same counts, except that a chunk that does not end its prompt
     * stamps nothing, and the run may end with prompts partly fed */
    c = toy_busy_config();
    run_or_fail(&c, &log, &st);
    assert_int_equal(st.preemptions, 0);
    check_stats_match_log(&c, &log, &st);
    const int64_t fed = tokens_fed(&log), kept = tokens_kept(&log);
    assert_true(fed >= kept && fed - kept <= tokens_unsampled(&log));
    tokenlog_free(&log);
}

/* A cache too small for six users (12 blocks of 16 tokens; each answer needs up to 7):
 * the newest running request is preempted and recomputed, over and over. No token is lost
 * or repeated (each finished answer has exactly its drawn length, the log exactly its
 * tokens), and the recompute shows in the step log: each preemption throws away at least
 * the victim's prompt (>= 16 tokens) that is fed again later. A request preempted and still
 * waiting at the end has not been fed again yet: at most one per user, so
 *   fed - kept >= (preemptions - users) x 16. */
static void test_preemption_recomputes_without_losing_tokens(void **state)
{
    (void)state;
    sim_config c = small_config();
    c.wl.users = 6;
    c.wl.duration_ns = 2000000;
    c.wl.prompt_len.a = 16;
    c.wl.prompt_len.b = 32;
    c.wl.answer_len.a = 40;
    c.wl.answer_len.b = 80;
    c.sched.max_num_batched_tokens = 256;
    c.sched.kv_blocks = 12;
    tokenlog log;
    sim_stats st;
    run_or_fail(&c, &log, &st);
    assert_true(st.preemptions > 2 * c.wl.users);
    check_stats_match_log(&c, &log, &st);
    const int64_t extra = tokens_fed(&log) - tokens_kept(&log);
    assert_true(extra >= (st.preemptions - c.wl.users) * c.wl.prompt_len.a);

    int64_t next_k[6] = {0};
    int finished = 0;
    for (int64_t r = 0; r < log.n_requests; r++) {
        const tokenlog_request *row = &log.requests[r];
        const workload_bg_request w = workload_bg(&c.wl, row->user, next_k[row->user]++);
        int64_t events = 0;
        for (int64_t e = 0; e < log.n_events; e++)
            events += log.events[e].request == row->request ? log.events[e].n_tokens : 0;
        assert_int_equal(events, row->completion_tokens);
        if (row->t_end_ns >= 0) {
            assert_int_equal(row->completion_tokens, w.max_tokens);
            finished++;
        }
    }
    assert_true(finished >= 10);

    /* sched_events.csv's rows: every preemption at the start of a step of the log, each
     * victim out until resumed at a later step (all but at most one per user, still waiting
     * at the end), and no token for it in between. */
    int64_t preempted = 0, resumed = 0;
    for (int64_t i = 0; i < log.n_sched_events; i++) {
        const tokenlog_sched_event *e = &log.sched_events[i];
        assert_true(e->step >= 0 && e->step < log.n_steps);
        assert_int_equal(e->t_ns, log.steps[e->step].t_start_ns);
        if (e->event != TOKENLOG_PREEMPTED)
            continue;
        preempted++;
        int64_t back = -1;
        for (int64_t j = i + 1; j < log.n_sched_events && back < 0; j++)
            if (log.sched_events[j].request == e->request) {
                assert_int_equal(log.sched_events[j].event, TOKENLOG_RESUMED);
                back = log.sched_events[j].t_ns;
            }
        resumed += back >= 0;
        for (int64_t k = 0; k < log.n_events; k++)
            if (log.events[k].request == e->request)
                assert_false(log.events[k].t_ns > e->t_ns &&
                             (back < 0 || log.events[k].t_ns <= back));
    }
    assert_int_equal(preempted, st.preemptions);
    assert_true(resumed >= preempted - c.wl.users);
    tokenlog_free(&log);
}

/* Without a log (benchmarks) the run and its statistics are the same. */
static void test_statistics_without_a_log(void **state)
{
    (void)state;
    const sim_config c = toy_busy_config();
    tokenlog log;
    sim_stats with_log, without;
    run_or_fail(&c, &log, &with_log);
    char err[ERR_LEN] = "";
    assert_int_equal(sim_run(&c, NULL, &without, err), 0);
    assert_memory_equal(&with_log, &without, sizeof without);
    tokenlog_free(&log);
}


/* Open loop at a rate: each arrival is a stream of its own, sent at its planned time; under
 * --max-concurrency never more than the limit in flight, an arrival that finds every slot
 * taken waits (first come, first served) and its row says for how long. */
static void test_open_loop_max_concurrency(void **state)
{
    (void)state;
    for (int limit = 0; limit <= 3; limit += 3) {
        sim_config c = small_config();
        c.wl.users = 0;
        c.wl.request_rate = 1e6; /* one per us of virtual time on average: the toy is fast */
        c.wl.max_concurrency = limit;
        tokenlog log;
        sim_stats st;
        run_or_fail(&c, &log, &st);
        print_message("limit %d: %lld requests\n", limit, (long long)log.n_requests);
        assert_true(log.n_requests > 4);
        int64_t waited = 0, max_in_flight = 0;
        for (int64_t i = 0; i < log.n_requests; i++) {
            const tokenlog_request *r = &log.requests[i];
            assert_int_equal(r->user, (int32_t)i); /* a stream of its own, users + index */
            assert_true(r->t_send_ns >= r->t_plan_ns);
            waited += r->t_send_ns > r->t_plan_ns;
            if (i > 0) /* first come, first served */
                assert_true(r->t_send_ns >= log.requests[i - 1].t_send_ns);
            int64_t in_flight = 0;
            for (int64_t j = 0; j <= i; j++) {
                const tokenlog_request *q = &log.requests[j];
                in_flight += q->t_send_ns <= r->t_send_ns &&
                             (q->t_end_ns < 0 || q->t_end_ns > r->t_send_ns);
            }
            if (in_flight > max_in_flight)
                max_in_flight = in_flight;
        }
        assert_int_equal(st.open_requests, log.n_requests);
        assert_int_equal(st.open_waited, waited);
        if (limit == 0) {
            assert_int_equal(waited, 0);
            assert_true(max_in_flight > 3); /* the limit below has something to do */
        } else {
            assert_true(max_in_flight <= limit);
            assert_true(waited > 0);
            assert_true(st.open_wait_max_ns > 0);
        }
        tokenlog_free(&log);
    }
}

/* Closed users, open arrivals and the injector together: each kind as it would be alone. */
static void test_open_loop_composes(void **state)
{
    (void)state;
    sim_config c = small_config();
    c.wl.users = 2;
    c.wl.request_rate = 2e5; /* one per 5 us of virtual time on average */
    c.wl.inject = true;
    tokenlog log;
    sim_stats st;
    run_or_fail(&c, &log, &st);
    int64_t closed = 0, open = 0, inject = 0;
    for (int64_t i = 0; i < log.n_requests; i++) {
        const tokenlog_request *r = &log.requests[i];
        if (r->kind == TOKENLOG_INJECT) {
            assert_int_equal(r->user, -1);
            inject++;
        } else if (r->user < 2) {
            closed++;
        } else {
            assert_int_equal(r->t_send_ns, r->t_plan_ns); /* no limit: on time */
            open++;
        }
    }
    assert_int_equal(inject, 1);
    assert_true(closed >= 2);
    assert_int_equal(open, st.open_requests);
    assert_true(open > 2);
    tokenlog_free(&log);
}

/* Issue 22, defect 10: with until_trace_end the run ends when the trace's last request has
 * finished, whatever the cap and the closed user still running; disaggregated too. */
static void test_trace_ends_the_run(void **state)
{
    (void)state;
    char path[128];
    scratch_file(path, sizeof path, "test_sim", "end.jsonl",
                 "{\"t\": 0.000005, \"prompt_tokens\": 8, \"max_tokens\": 5}\n"
                 "{\"t\": 0.00001, \"prompt_tokens\": 8, \"max_tokens\": 5}\n");
    for (int disagg = 0; disagg < 2; disagg++) {
        sim_config c = small_config();
        snprintf(c.wl.trace, sizeof c.wl.trace, "%s", path);
        c.wl.duration_ns = CLOCK_NS_PER_S; /* the cap: 20,000 x the trace */
        c.wl.until_trace_end = true;
        char err[ERR_LEN] = "";
        if (disagg) {
            c.disagg.prefill = c.disagg.decode = 1;
            assert_int_equal(sim_kv_link_parse("nvlink", &c.disagg, err), 0);
        }
        tokenlog log;
        sim_stats st;
        run_or_fail(&c, &log, &st);
        int64_t last_end = 0;
        int open = 0;
        for (int64_t i = 0; i < log.n_requests; i++) {
            const tokenlog_request *r = &log.requests[i];
            if (r->user < c.wl.users)
                continue;
            open++;
            assert_true(r->t_end_ns > 0); /* finished */
            if (r->t_end_ns > last_end)
                last_end = r->t_end_ns;
        }
        assert_int_equal(open, 2);
        print_message("disagg %d: the last trace request ended at %lld ns, the run at %lld\n",
                      disagg, (long long)last_end, (long long)st.virtual_ns);
        assert_true(st.virtual_ns >= last_end);
        assert_true(st.virtual_ns < last_end + 50000); /* a step under way, no more */
        tokenlog_free(&log);
    }
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_refuses_what_cannot_run),
        cmocka_unit_test(test_one_user_gaps_are_the_decode_step),
        cmocka_unit_test(test_injection_step_is_the_model_spike),
        cmocka_unit_test(test_chunked_injection_by_hand),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_token_counts_match_the_workload),
        cmocka_unit_test(test_stats_consistent_with_log),
        cmocka_unit_test(test_preemption_recomputes_without_losing_tokens),
        cmocka_unit_test(test_statistics_without_a_log),
        cmocka_unit_test(test_open_loop_max_concurrency),
        cmocka_unit_test(test_open_loop_composes),
        cmocka_unit_test(test_trace_ends_the_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
