/* workload: the lesson preset, the injector's absolute schedule, seeded draws, shards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "workload/workload.h"

static void test_lesson_preset(void **state)
{
    (void)state;
    char err[ERR_LEN];
    workload_config cfg;
    workload_default(&cfg);
    assert_int_equal(workload_preset(&cfg, "lesson", err), 0);
    assert_int_equal(cfg.users, 32);
    assert_int_equal(cfg.prompt_tokens, 8000);
    assert_int_equal(cfg.duration_ns, 40 * CLOCK_NS_PER_S);
    int64_t t[16];
    int n = workload_injection_times(&cfg, t, 16);
    assert_int_equal(n, 4);
    assert_int_equal(t[0], 5 * CLOCK_NS_PER_S);
    assert_int_equal(t[1], 15 * CLOCK_NS_PER_S);
    assert_int_equal(t[2], 25 * CLOCK_NS_PER_S);
    assert_int_equal(t[3], 35 * CLOCK_NS_PER_S);
    assert_int_equal(workload_check(&cfg, err), 0);
}

static void test_one_second_preset(void **state)
{
    (void)state;
    char err[ERR_LEN];
    workload_config cfg;
    workload_default(&cfg);
    assert_int_equal(workload_preset(&cfg, "lesson-1s", err), 0);
    int64_t t[64];
    int n = workload_injection_times(&cfg, t, 64);
    assert_int_equal(n, 40); /* 0.5, 1.5, ..., 39.5 s */
    assert_int_equal(t[0], 500 * CLOCK_NS_PER_MS);
    assert_int_equal(t[39], 39500 * CLOCK_NS_PER_MS);
}

static void test_unknown_preset(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    workload_config cfg;
    workload_default(&cfg);
    assert_int_equal(workload_preset(&cfg, "lessen", err), -1);
    assert_non_null(strstr(err, "lessen"));
    assert_non_null(strstr(err, "lesson"));
}

static void test_baseline_has_no_injections(void **state)
{
    (void)state;
    workload_config cfg;
    workload_default(&cfg);
    cfg.inject = false;
    int64_t t[4];
    assert_int_equal(workload_injection_times(&cfg, t, 4), 0);
}

static void test_check_rejects(void **state)
{
    (void)state;
    char err[ERR_LEN];
    workload_config cfg;
    workload_default(&cfg);
    cfg.duration_ns = 0;
    assert_int_equal(workload_check(&cfg, err), -1);
    workload_default(&cfg);
    cfg.inject_every_ns = -1;
    assert_int_equal(workload_check(&cfg, err), -1);
    workload_default(&cfg);
    cfg.answer_len.a = 10, cfg.answer_len.b = 5;
    assert_int_equal(workload_check(&cfg, err), -1);
    workload_default(&cfg);
    cfg.prompt_tokens = 0;
    assert_int_equal(workload_check(&cfg, err), -1);
}

static void test_bg_draws_are_seeded_and_spread(void **state)
{
    (void)state;
    workload_config a, b;
    workload_default(&a);
    workload_default(&b);
    /* Same (seed, user, k): same draw, whatever the order of calls. */
    workload_bg_request x = workload_bg(&a, 3, 7);
    (void)workload_bg(&a, 1, 1);
    workload_bg_request y = workload_bg(&b, 3, 7);
    assert_int_equal(x.prompt_tokens, y.prompt_tokens);
    assert_int_equal(x.max_tokens, y.max_tokens);
    /* In range, and not all equal across users (restarts do not synchronise). */
    int distinct = 0, first = workload_bg(&a, 0, 0).max_tokens;
    for (int u = 0; u < 32; u++) {
        workload_bg_request r = workload_bg(&a, u, 0);
        assert_in_range(r.prompt_tokens, a.prompt_len.a, a.prompt_len.b);
        assert_in_range(r.max_tokens, a.answer_len.a, a.answer_len.b);
        distinct += r.max_tokens != first;
    }
    assert_true(distinct > 16);
    b.seed = 2;
    int differ = 0;
    for (int u = 0; u < 32; u++)
        differ += workload_bg(&a, u, 0).max_tokens != workload_bg(&b, u, 0).max_tokens;
    assert_true(differ > 16);
}

static void test_poisson_schedule(void **state)
{
    (void)state;
    workload_config cfg;
    workload_default(&cfg);
    cfg.inject_poisson = true;
    cfg.inject_at_ns = 0;
    cfg.inject_every_ns = CLOCK_NS_PER_S;
    cfg.duration_ns = 2000 * CLOCK_NS_PER_S;
    static int64_t t[WORKLOAD_MAX_INJECTIONS];
    int n = workload_injection_times(&cfg, t, WORKLOAD_MAX_INJECTIONS);
    /* Mean gap 1 s over 2000 s: about 2000 arrivals (sd ~45). */
    assert_in_range(n, 1800, 2200);
    for (int i = 1; i < n; i++)
        assert_true(t[i] >= t[i - 1]);
    assert_true(t[n - 1] < cfg.duration_ns);
}

static void test_prompt_ids_unique_per_injection(void **state)
{
    (void)state;
    workload_config cfg;
    workload_default(&cfg);
    int32_t a[64], b[64];
    workload_prompt_ids(&cfg, 1, 0, a, 64, 128256);
    workload_prompt_ids(&cfg, 1, 1, b, 64, 128256);
    assert_true(memcmp(a, b, sizeof a) != 0);
    for (int i = 0; i < 64; i++)
        assert_in_range(a[i], 100, 128255);
    int32_t c[64];
    workload_prompt_ids(&cfg, 1, 0, c, 64, 128256);
    assert_memory_equal(a, c, sizeof a);
}

/* Shards split the users round-robin: each user runs in exactly one shard (u mod N), the
 * counts add up to the whole, the injector runs in shard 0 only; unsharded runs all. */
static void test_shard_rule(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    workload_config cfg;
    workload_default(&cfg);
    cfg.users = 10;
    for (int u = 0; u < cfg.users; u++)
        assert_true(workload_shard_has_user(&cfg, u));
    assert_true(workload_shard_has_injector(&cfg));
    assert_int_equal(workload_shard_users(&cfg, 0), 10);
    const int expect_users[4] = {3, 3, 2, 2};
    int runs_in[10] = {0}, total = 0;
    cfg.shard.count = 4;
    for (int i = 0; i < 4; i++) {
        cfg.shard.index = i;
        assert_int_equal(workload_check(&cfg, err), 0);
        int mine = 0;
        for (int u = 0; u < cfg.users; u++)
            if (workload_shard_has_user(&cfg, u)) {
                assert_int_equal(u % 4, i);
                runs_in[u]++;
                mine++;
            }
        assert_int_equal(mine, expect_users[i]);
        assert_int_equal(workload_shard_users(&cfg, i), mine);
        assert_int_equal(workload_shard_has_injector(&cfg), i == 0);
        total += mine;
    }
    assert_int_equal(total, cfg.users);
    for (int u = 0; u < cfg.users; u++)
        assert_int_equal(runs_in[u], 1);
    assert_int_equal(workload_shard_users(&cfg, 4), 0); /* no such shard */

    cfg.shard.index = 4; /* index out of range */
    assert_int_equal(workload_check(&cfg, err), -1);
    assert_non_null(strstr(err, "between 0 and 3"));
    cfg.shard.index = 0;
    cfg.shard.count = 11; /* more shards than users: some would run nothing */
    assert_int_equal(workload_check(&cfg, err), -1);
    assert_non_null(strstr(err, "11 shards for 10 users"));
    cfg.shard.count = -1;
    assert_int_equal(workload_check(&cfg, err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lesson_preset),
        cmocka_unit_test(test_one_second_preset),
        cmocka_unit_test(test_unknown_preset),
        cmocka_unit_test(test_baseline_has_no_injections),
        cmocka_unit_test(test_check_rejects),
        cmocka_unit_test(test_bg_draws_are_seeded_and_spread),
        cmocka_unit_test(test_poisson_schedule),
        cmocka_unit_test(test_prompt_ids_unique_per_injection),
        cmocka_unit_test(test_shard_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
