/* engine: the loop on its thread with a scripted executor: finish reasons, stop strings
 * across tokens, min_tokens, cancel, refusal, shutdown, the step log. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "engine/engine.h"

#include "engine_harness.h"

/* ---- tests ------------------------------------------------------------------------------ */

static void test_finish_reasons(void **state)
{
    (void)state;
    harness h;
    harness_start(&h, fake_exec(), small_sched(), NULL);
    engine_req *length = new_req(1, 10, 7);
    engine_req *eos = new_req(2, 10, 50);
    eos->seq.seed = 4; /* EOS at position 3: "abcdef" + EOS */
    engine_req *ignored = new_req(3, 10, 6);
    ignored->seq.seed = 2;
    ignored->seq.ignore_eos = true; /* the EOS token is just a token without text */
    engine_req *late = new_req(4, 10, 50);
    late->seq.seed = 3;
    late->seq.min_tokens = 5; /* EOS at 2 < min_tokens: not an end */
    engine_req *reqs[] = {length, eos, ignored, late};
    got g[4];
    memset(g, 0, sizeof g);
    for (int i = 0; i < 4; i++)
        engine_submit(h.e, reqs[i]);
    drain(&h, reqs, g, 4);
    assert_int_equal(g[0].finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(g[0].n_tokens, 7);
    assert_string_equal(g[0].text, "abcdefghijabcd");
    assert_int_equal(g[1].finish, ENGINE_FINISH_STOP);
    assert_int_equal(g[1].n_tokens, 4); /* EOS counts as a completion token */
    assert_string_equal(g[1].text, "abcdef");
    assert_int_equal(g[1].stop_index, -1);
    assert_int_equal(g[2].finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(g[2].n_tokens, 6);
    assert_string_equal(g[2].text, "abefghijab"); /* position 1 was EOS: no text */
    assert_int_equal(g[3].finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(g[3].n_tokens, 50);
    assert_true(h.steps > 0);
    harness_stop(&h);
    for (int i = 0; i < 4; i++)
        free(reqs[i]);
}

static void test_stop_strings(void **state)
{
    (void)state;
    harness h;
    harness_start(&h, fake_exec(), small_sched(), NULL);
    /* Text "ab" "cd" "ef" "gh" ...; stops inside a token, across tokens, and unmatched. */
    static const char *inside[] = {"zz", "d"};
    static const char *across[] = {"bcde"};
    static const char *before_min[] = {"cd"};
    engine_req *a = new_req(1, 4, 40);
    a->stop = inside;
    a->n_stop = 2;
    engine_req *b = new_req(2, 4, 40);
    b->stop = across;
    b->n_stop = 1;
    engine_req *c = new_req(3, 4, 40);
    c->stop = before_min; /* "cd" at tokens 2 and 7; min_tokens 4 skips the first */
    c->n_stop = 1;
    c->seq.min_tokens = 4;
    engine_req *reqs[] = {a, b, c};
    got g[3];
    memset(g, 0, sizeof g);
    for (int i = 0; i < 3; i++)
        engine_submit(h.e, reqs[i]);
    drain(&h, reqs, g, 3);
    assert_int_equal(g[0].finish, ENGINE_FINISH_STOP);
    assert_int_equal(g[0].stop_index, 1);
    assert_int_equal(g[0].n_tokens, 2);
    assert_string_equal(g[0].text, "abc"); /* cut before "d" */
    assert_int_equal(g[1].finish, ENGINE_FINISH_STOP);
    assert_int_equal(g[1].n_tokens, 3); /* "bcde" completes with "ef" */
    assert_string_equal(g[1].text, "abcd"); /* streamed text is never taken back */
    assert_int_equal(g[2].finish, ENGINE_FINISH_STOP);
    assert_int_equal(g[2].n_tokens, 7);
    assert_string_equal(g[2].text, "abcdefghijab");
    harness_stop(&h);
    for (int i = 0; i < 3; i++)
        free(reqs[i]);
}

static void test_cancel_refuse_shutdown(void **state)
{
    (void)state;
    harness h;
    harness_start(&h, fake_exec(), small_sched(), NULL);
    engine_req *refused = new_req(1, 600, 4); /* prompt > max_model_len 512 */
    engine_req *cancelled = new_req(2, 8, 400);
    engine_req *reqs[] = {refused, cancelled};
    got g[2];
    memset(g, 0, sizeof g);
    engine_submit(h.e, refused);
    engine_submit(h.e, cancelled);
    engine_cancel(h.e, cancelled);
    drain(&h, reqs, g, 2);
    assert_int_equal(g[0].finish, ENGINE_FINISH_ERROR);
    assert_non_null(strstr(refused->error, "max_model_len"));
    assert_int_equal(g[1].finish, ENGINE_FINISH_ABORT);
    assert_true(g[1].n_tokens < 400);
    /* Gauges come back to 0 once idle. */
    assert_int_equal(h.last_running, 0);
    assert_int_equal(h.last_kv_used, 0);

    /* Shutdown aborts what runs, and answers what comes after. Steps of 1 ms: 500 tokens
     * take half a second, so the request is still running when shutdown comes (with steps
     * that take no time it could finish first on a busy machine: 2 runs in 100 did). */
    atomic_store(&fake_step_ns, 1000000);
    engine_req *running = new_req(3, 8, 1 << 20);
    running->max_tokens = 500;
    engine_req *after = new_req(4, 8, 5);
    engine_req *reqs2[] = {running, after};
    got g2[2];
    memset(g2, 0, sizeof g2);
    engine_submit(h.e, running);
    engine_shutdown(h.e);
    engine_submit(h.e, after);
    drain(&h, reqs2, g2, 2);
    assert_int_equal(g2[0].finish, ENGINE_FINISH_ABORT);
    assert_int_equal(g2[1].finish, ENGINE_FINISH_ABORT);
    assert_int_equal(g2[1].n_tokens, 0);
    atomic_store(&fake_step_ns, 0);
    harness_stop(&h);
    free(refused);
    free(cancelled);
    free(running);
    free(after);
}

/* engine_reset_prefix_cache from another thread: applied by the engine thread, idle or
 * between steps, once per ask (bounded: 2 s). */
static void test_reset_prefix_cache(void **state)
{
    (void)state;
    harness h;
    harness_start(&h, fake_exec(), small_sched(), NULL);
    assert_int_equal(engine_prefix_cache_resets(h.e), 0);
    engine_reset_prefix_cache(h.e); /* idle: the engine wakes for it */
    for (int i = 0; i < 200 && engine_prefix_cache_resets(h.e) < 1; i++)
        usleep(10000);
    assert_int_equal(engine_prefix_cache_resets(h.e), 1);
    engine_req *r = new_req(1, 8, 50);
    engine_req *reqs[] = {r};
    got g[1];
    memset(g, 0, sizeof g);
    engine_submit(h.e, r);
    engine_reset_prefix_cache(h.e); /* busy: at a step boundary; the request runs on */
    drain(&h, reqs, g, 1);
    for (int i = 0; i < 200 && engine_prefix_cache_resets(h.e) < 2; i++)
        usleep(10000);
    assert_int_equal(engine_prefix_cache_resets(h.e), 2);
    assert_int_equal(g[0].finish, ENGINE_FINISH_LENGTH);
    harness_stop(&h);
    free(r);
}

static void test_many_and_step_log(void **state)
{
    (void)state;
    FILE *log = tmpfile();
    harness h;
    sched_config sc = small_sched();
    sc.max_num_seqs = 8; /* most wait their turn */
    harness_start(&h, fake_exec(), sc, log);
    enum { N = 100 };
    engine_req *reqs[N];
    got g[N];
    memset(g, 0, sizeof g);
    for (int i = 0; i < N; i++) {
        reqs[i] = new_req(i, 1 + i % 40, 1 + i % 23);
        engine_submit(h.e, reqs[i]);
    }
    drain(&h, reqs, g, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(g[i].finish, ENGINE_FINISH_LENGTH);
        assert_int_equal(g[i].n_tokens, 1 + i % 23);
    }
    int64_t steps = h.steps;
    harness_stop(&h); /* flushes the log */
    rewind(log);
    char line[256];
    assert_non_null(fgets(line, sizeof line, log));
    assert_string_equal(line,
                        "step,t_start_ns,t_end_ns,decode_tokens,prefill_tokens,n_requests,"
                        "modeled_ns,late_ns\n");
    int64_t rows = 0, last_end = 0;
    while (fgets(line, sizeof line, log)) {
        long long step, t0, t1, modeled, late;
        int dec, pre, n;
        assert_int_equal(sscanf(line, "%lld,%lld,%lld,%d,%d,%d,%lld,%lld", &step, &t0, &t1,
                                &dec, &pre, &n, &modeled, &late),
                         8);
        assert_int_equal(late, 0); /* this test's executor is not paced */
        assert_int_equal(step, rows);
        assert_true(t1 >= t0 && t0 >= last_end - 1000000);
        assert_true(dec + pre <= 64 && n <= 8);
        assert_int_equal(modeled, 1000);
        last_end = t1;
        rows++;
    }
    assert_int_equal(rows, steps);
    fclose(log);
    for (int i = 0; i < N; i++)
        free(reqs[i]);
}

/* A cache too small for its requests (8 blocks of 16 tokens; each needs up to 4): the engine
 * preempts, and its sched log (serve --sched-events) has a row for each preemption and each
 * re-admission, after the header, naming the request by its log_id; every request still gets
 * all its tokens. */
static void test_sched_log(void **state)
{
    (void)state;
    FILE *log = tmpfile();
    harness h;
    sched_config sc = small_sched();
    sc.kv_blocks = 8;
    harness_start_logs(&h, fake_exec(), sc, NULL, log);
    enum { N = 6 };
    engine_req *reqs[N];
    got g[N];
    memset(g, 0, sizeof g);
    for (int i = 0; i < N; i++) {
        reqs[i] = new_req(i, 16, 40);
        reqs[i]->log_id = 1000 + i;
        engine_submit(h.e, reqs[i]);
    }
    drain(&h, reqs, g, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(g[i].n_tokens, 40);
    harness_stop(&h); /* flushes the log */
    rewind(log);
    char line[256];
    assert_non_null(fgets(line, sizeof line, log));
    assert_string_equal(line, "step,t_ns,request,event\n");
    int preempted = 0, resumed = 0;
    long long last_step = -1;
    while (fgets(line, sizeof line, log)) {
        long long step, t, request;
        char event[32];
        assert_int_equal(sscanf(line, "%lld,%lld,%lld,%31[a-z_]", &step, &t, &request, event), 4);
        assert_true(request >= 1000 && request < 1000 + N);
        assert_true(step >= last_step && t > 0);
        last_step = step;
        preempted += strcmp(event, "preempted") == 0;
        resumed += strcmp(event, "resumed") == 0;
    }
    assert_true(preempted > 0);
    assert_int_equal(resumed, preempted); /* every victim came back and finished */
    fclose(log);
    for (int i = 0; i < N; i++)
        free(reqs[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sched_log),
        cmocka_unit_test(test_finish_reasons),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_cancel_refuse_shutdown),
        cmocka_unit_test(test_reset_prefix_cache),
        cmocka_unit_test(test_many_and_step_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
