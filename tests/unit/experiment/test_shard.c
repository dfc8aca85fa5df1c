/* experiment/shard: --start-at, --shard through the option table and what the check
 * refuses, the pair's schedule, the clocks' uncertainty, and the wait for t = 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/opts.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/options.h"
#include "experiment/runner.h"
#include "experiment/shard.h"

/* --start-at: ISO-8601 UTC or now+DUR, never in the past, never a typo a week ahead; and
 * the text written back is the same instant. */
static void test_start_at(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", text[48];
    const int64_t now = 1796119200000000000LL; /* 2026-12-01T10:00:00Z */
    int64_t at = 0;
    assert_int_equal(experiment_parse_start_at("2026-12-01T10:00:30Z", now, &at, err), 0);
    assert_int_equal(at, now + 30 * CLOCK_NS_PER_S);
    assert_int_equal(experiment_parse_start_at("2026-12-01t10:00:00.25+00:00", now, &at, err), 0);
    assert_int_equal(at, now + 250 * CLOCK_NS_PER_MS);
    experiment_format_utc(at, text, sizeof text);
    assert_string_equal(text, "2026-12-01T10:00:00.25Z");
    assert_int_equal(experiment_parse_start_at("now+5s", now, &at, err), 0);
    assert_int_equal(at, now + 5 * CLOCK_NS_PER_S);
    experiment_format_utc(at, text, sizeof text);
    assert_string_equal(text, "2026-12-01T10:00:05Z");
    experiment_format_utc(now + 1, text, sizeof text);
    assert_string_equal(text, "2026-12-01T10:00:00.000000001Z");
    int64_t back = 0;
    assert_int_equal(experiment_parse_start_at(text, now - 1, &back, err), 0);
    assert_int_equal(back, now + 1);
    struct {
        const char *text, *want;
    } bad[] = {
        {"2026-12-01T09:59:59Z", "in the past (now: 2026-12-01T10:00:00Z)"},
        {"2026-12-01T10:00:00Z", "in the past"},
        {"2026-12-09T10:00:00Z", "more than 7 days ahead"},
        {"now+8d", "not"},           /* no such unit */
        {"now+0s", "not ahead of now"},
        {"now+-5s", "now+-5s"},
        {"2026-02-30T10:00:00Z", "not a UTC time"},
        {"2026-12-01T10:00:00", "not a UTC time"}, /* local time: no zone */
        {"2026-12-01T10:00:00+01:00", "not a UTC time"},
        {"2026-12-01 10:00:00Z", "not a UTC time"},
        {"2026-12-01T10:00:00.1234567891Z", "not a UTC time"},
        {"tomorrow", "not a UTC time"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (experiment_parse_start_at(bad[i].text, now, &at, err) != -1)
            fail_msg("'%s' was accepted", bad[i].text);
        if (!strstr(err, bad[i].want))
            fail_msg("'%s': error '%s' lacks '%s'", bad[i].text, err, bad[i].want);
    }
}

/* --shard I/N and --start-at through the option table, and what experiment_check refuses. */
static void test_shard_options(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_REMOTE);
    opts_group groups[] = {experiment_workload_group(&c), experiment_client_group(&c),
                           experiment_shard_group(&c)};
    if (opts_check(groups, OPTS_COUNT(groups), err) != 0)
        fail_msg("%s", err);
    char *argv[] = {"--users", "8", "--target", "http://127.0.0.1:9", "--shard", "3/4",
                    "--start-at", "now+30s"};
    assert_int_equal(opts_parse(8, argv, groups, OPTS_COUNT(groups), NULL, 0, NULL, err), 0);
    assert_int_equal(c.wl.shard.index, 3);
    assert_int_equal(c.wl.shard.count, 4);
    assert_true(c.shard.start_at_ns > 0);
    assert_int_equal(c.shard.start_at[strlen(c.shard.start_at) - 1], 'Z');
    assert_int_equal(experiment_check(&c, err), 0);
    const char *bad_shards[] = {"4/4", "1/0", "x/4", "1/4x", "-1/4", "1", "1/", "/4", "0/5000"};
    for (size_t i = 0; i < sizeof bad_shards / sizeof bad_shards[0]; i++) {
        char *a[] = {"--shard", (char *)bad_shards[i]};
        if (opts_parse(2, a, groups, OPTS_COUNT(groups), NULL, 0, NULL, err) != -1)
            fail_msg("--shard %s was accepted", bad_shards[i]);
    }
    char *past[] = {"--start-at", "2020-01-01T00:00:00Z"};
    assert_int_equal(opts_parse(2, past, groups, OPTS_COUNT(groups), NULL, 0, NULL, err), -1);
    assert_non_null(strstr(err, "in the past"));

    experiment_config x = c;
    x.engine = EXPERIMENT_EMULATE; /* an embedded server per shard: refused */
    assert_int_equal(experiment_check(&x, err), -1);
    assert_non_null(strstr(err, "--shard needs --target"));
    x = c;
    x.shard.start_at_ns = 0;
    assert_int_equal(experiment_check(&x, err), -1);
    assert_non_null(strstr(err, "--shard needs --start-at"));
    x = c;
    x.wl.shard.count = 0;
    assert_int_equal(experiment_check(&x, err), -1);
    assert_non_null(strstr(err, "--start-at needs --shard"));
    x = c;
    x.wl.users = 3; /* 4 shards, 3 users */
    assert_int_equal(experiment_check(&x, err), -1);
    assert_non_null(strstr(err, "4 shards for 3 users"));
}

/* The pair's schedule, and the clock uncertainty between two shards' readings. */
static void test_shard_schedule_and_clocks(void **state)
{
    (void)state;
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_REMOTE);
    c.shard.start_at_ns = 1796119200000000000LL;
    c.wl.duration_ns = 40 * CLOCK_NS_PER_S;
    c.client.warmup_ns = 2 * CLOCK_NS_PER_S;
    assert_int_equal(experiment_shard_phase_start(&c, false), c.shard.start_at_ns);
    /* 40 s run + (2 s + 5 % of 40 s) settling + 2 s warm-up */
    assert_int_equal(experiment_shard_phase_start(&c, true), c.shard.start_at_ns + 46 * CLOCK_NS_PER_S);

    experiment_clock a, b;
    memset(&a, 0, sizeof a);
    a.maxerror_us = 1500;
    a.esterror_us = 100;
    a.pair_error_ns = 40;
    snprintf(a.boot_id, sizeof a.boot_id, "boot-a");
    b = a;
    b.pair_error_ns = 60;
    b.step_ns = -5;
    /* One kernel: placed by its one monotonic clock, exactly. */
    assert_int_equal(experiment_clock_uncertainty_ns(&a, &b, false), 0);
    assert_int_equal(experiment_clock_uncertainty_ns(&a, &b, true), 0);
    snprintf(b.boot_id, sizeof b.boot_id, "boot-b");
    b.maxerror_us = 2500;
    b.esterror_us = 300;
    assert_int_equal(experiment_clock_uncertainty_ns(&a, &b, false), 105 + 4000000);
    assert_int_equal(experiment_clock_uncertainty_ns(&a, &b, true), 105 + 400000);
    b.maxerror_us = -1; /* unreadable: the kernel's 16 s ceiling */
    assert_int_equal(experiment_clock_uncertainty_ns(&a, &b, false), 105 + 1500000 + 16000000000LL);
    a.boot_id[0] = '\0'; /* no boot id: never taken for one host */
    b = a;
    assert_int_equal(experiment_clock_uncertainty_ns(&a, &b, false), 80 + 3000000);

    experiment_clock here;
    experiment_clock_read(&here);
    assert_true(here.boot_id[0] != '\0'); /* Linux always has one */
    assert_true(here.state >= -1 && here.state <= 5);
    if (here.state >= 0)
        assert_true(here.maxerror_us >= 0);
}

/* A shard waits for the planned t = 0 and records where it fell; a start that has passed
 * fails with the reason. */
static void test_shard_wait(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_REMOTE);
    c.wl.shard = (workload_shard){1, 2};
    c.client.warmup_ns = 100 * CLOCK_NS_PER_MS;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now_real = (int64_t)ts.tv_sec * CLOCK_NS_PER_S + ts.tv_nsec;
    c.shard.start_at_ns = now_real + 300 * CLOCK_NS_PER_MS;
    workload_config wl = c.wl;
    wl.inject = false;
    c.no_baseline = false;
    experiment_phase ph = {.cfg = &c, .wl = &wl, .label = "baseline"};
    experiment_shard_start st;
    int64_t warmup = -1;
    int64_t before = clock_now_ns();
    assert_int_equal(experiment_shard_wait(&ph, &st, &warmup, err), 0);
    int64_t waited = clock_now_ns() - before;
    assert_true(st.sharded);
    assert_int_equal(st.planned_ns, c.shard.start_at_ns);
    /* It slept until the warm-up's start (~200 ms), and the rest is warm-up. */
    assert_true(waited >= 150 * CLOCK_NS_PER_MS);
    assert_true(warmup > 0 && warmup <= 100 * CLOCK_NS_PER_MS);
    int64_t t0_mono = clock_now_ns() + warmup;
    experiment_meta meta;
    memset(&meta, 0, sizeof meta);
    experiment_shard_record(&st, t0_mono, &meta);
    /* t = 0 on the wall clock lands on the plan, within this process's own delay. */
    assert_true(llabs(meta.t0_realtime_ns - c.shard.start_at_ns) < 50 * CLOCK_NS_PER_MS);
    assert_int_equal(meta.start_late_ns, meta.t0_realtime_ns - c.shard.start_at_ns);
    assert_true(meta.clock.pair_error_ns >= 0 && meta.clock.pair_error_ns < CLOCK_NS_PER_MS);
    assert_true(llabs(meta.clock.step_ns) < CLOCK_NS_PER_MS);
    assert_string_equal(meta.clock.boot_id, st.clock.boot_id);

    /* The second run of the pair starts later; the first one's start has passed now. */
    c.shard.start_at_ns = now_real - CLOCK_NS_PER_S;
    assert_int_equal(experiment_shard_wait(&ph, &st, &warmup, err), -1);
    assert_non_null(strstr(err, "shard 1/2: the baseline run was to start at"));
    assert_non_null(strstr(err, "not ready in time"));
    /* Unsharded: nothing to wait for. */
    c.wl.shard.count = 0;
    assert_int_equal(experiment_shard_wait(&ph, &st, &warmup, err), 0);
    assert_false(st.sharded);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_at),
        cmocka_unit_test(test_shard_options),
        cmocka_unit_test(test_shard_schedule_and_clocks),
        cmocka_unit_test(test_shard_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
