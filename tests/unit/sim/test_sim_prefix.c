/* test_sim_prefix — shared prefixes in the simulator: a multi-turn workload with a system
 * prompt reuses cached blocks under prefix caching (hits > 0, fewer prefill tokens than the
 * same run without it, the same requests and answers), nothing is hit without caching, and
 * a closed user thinks --think-time between an answer and its next request. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/tokenlog.h"
#include "sim/sim.h"
#include "workload/workload.h"

#include "toy_cost.h"

/* Two users, conversations of 4 turns after a 64-token system prompt, messages of 20 and
 * answers of 10 tokens (turn 4: 64 + 3 x 30 + 20 = 174 tokens), 3 ms of virtual time. */
static sim_config chat_config(bool prefix_caching)
{
    sim_config c = toy_config();
    c.wl.users = 2;
    c.wl.inject = false;
    c.wl.duration_ns = 3000000;
    c.wl.turns = 4;
    c.wl.system_prompt_tokens = 64;
    c.sched.max_num_batched_tokens = 256; /* the longest turn in one step (mixed) */
    c.wl.max_context = c.sched.max_model_len;
    c.wl.max_prompt = c.sched.max_num_batched_tokens;
    c.wl.prompt_len = (workload_dist){.kind = WORKLOAD_DIST_FIXED, .a = 20, .b = 20};
    c.wl.answer_len = (workload_dist){.kind = WORKLOAD_DIST_FIXED, .a = 10, .b = 10};
    c.sched.prefix_caching = prefix_caching;
    return c;
}

typedef struct totals {
    int64_t prefill, queries, hits, requests, prompt_tokens;
} totals;

static totals run(const sim_config *c)
{
    char err[ERR_LEN];
    tokenlog log;
    tokenlog_init(&log);
    if (sim_run(c, &log, NULL, err) != 0)
        fail_msg("%s", err);
    totals t = {0};
    for (int64_t i = 0; i < log.n_steps; i++) {
        t.prefill += log.steps[i].prefill_tokens;
        t.queries += log.steps[i].prefix_queries;
        t.hits += log.steps[i].prefix_hits;
    }
    /* the first 8 requests: two users' first two conversations, lengths fixed by the turns */
    for (int64_t i = 0; i < log.n_requests && i < 8; i++)
        t.prompt_tokens += log.requests[i].prompt_tokens;
    t.requests = log.n_requests;
    tokenlog_free(&log);
    return t;
}

static void test_turns_hit_the_prefix_cache(void **state)
{
    (void)state;
    const sim_config on = chat_config(true), off = chat_config(false);
    const totals with = run(&on), without = run(&off);
    assert_true(without.requests >= 8);
    assert_int_equal(without.hits, 0);
    assert_true(with.hits > 0);
    assert_true(with.queries > 0);
    /* Turn 2's 114-token prompt holds turn 1's 84 (5 full blocks = 80 tokens cached). */
    assert_true(with.hits * 4 > with.queries); /* most of a later turn is history */
    /* per request, less prefill with the cache (runs differ in length: compare rates) */
    assert_true((double)with.prefill / (double)with.requests <
                0.7 * (double)without.prefill / (double)without.requests);
    /* the same requests: turn lengths 84, 114, 144, 174 per user, both ways */
    assert_int_equal(with.prompt_tokens, without.prompt_tokens);
}

/* Think time: a user's next request leaves think_time after its previous answer ended. */
static void test_think_time(void **state)
{
    (void)state;
    char err[ERR_LEN];
    sim_config c = chat_config(false);
    c.wl.users = 1;
    c.wl.think_time_ns = 100000;
    tokenlog log;
    tokenlog_init(&log);
    if (sim_run(&c, &log, NULL, err) != 0)
        fail_msg("%s", err);
    assert_true(log.n_requests >= 3);
    for (int64_t i = 1; i < log.n_requests; i++)
        assert_int_equal(log.requests[i].t_send_ns,
                         log.requests[i - 1].t_end_ns + c.wl.think_time_ns);
    tokenlog_free(&log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_turns_hit_the_prefix_cache),
        cmocka_unit_test(test_think_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
