/* experiment/options: the option tables (every group parsed into the configuration), the
 * connection flags calibrate --target shares with run, and --trace without --duration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/opts.h"
#include "experiment/config.h"
#include "experiment/options.h"

#include "scratch_file.h"

/* calibrate --target's connection flags are run's: the client group's first specs, the same
 * tables (so the same names, help and parsing), into cfg->client. */
static void test_connection_group(void **state)
{
    (void)state;
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_REMOTE);
    const opts_group conn = experiment_connection_group(&c);
    const opts_group client = experiment_client_group(&c);
    static const char *const names[] = {"target", "model-name", "insecure", "transport"};
    assert_int_equal(conn.n_specs, 4);
    assert_true(conn.specs == client.specs); /* a prefix of the one table, not a copy */
    assert_string_equal(conn.title, client.title);
    for (int i = 0; i < 4; i++)
        assert_string_equal(conn.specs[i].name, names[i]);
    char err[ERR_LEN] = "";
    char *argv[] = {"--target", "127.0.0.1:8000", "--model-name", "m", "--insecure",
                    "--transport", "curl"};
    assert_int_equal(opts_parse(7, argv, &conn, 1, NULL, 0, NULL, err), 0);
    assert_string_equal(c.client.target, "http://127.0.0.1:8000");
    assert_string_equal(c.client.model_name, "m");
    assert_true(c.client.insecure);
    assert_int_equal(c.client.transport, TRANSPORT_CURL);
    /* the load's flags are not the connection's */
    char *load[] = {"--client-threads", "2"};
    assert_int_equal(opts_parse(2, load, &conn, 1, NULL, 0, NULL, err), -1);
    char *bad[] = {"--target", "ftp://host"};
    assert_int_equal(opts_parse(2, bad, &conn, 1, NULL, 0, NULL, err), -1);
}

static void test_option_tables(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_config c;
    experiment_secrets sec = {0};
    experiment_defaults(&c, EXPERIMENT_SIM);
    opts_group groups[] = {experiment_workload_group(&c), experiment_device_group(&c),
                           experiment_sched_group(&c),    experiment_client_group(&c),
                           experiment_analysis_group(&c), experiment_secrets_group(&sec)};
    if (opts_check(groups, OPTS_COUNT(groups), err) != 0)
        fail_msg("%s", err);
    char *argv[] = {"--users", "8", "--duration", "3s", "--prompt-tokens", "16k",
                    "--bg-answer-tokens", "10..20", "--policy", "chunked",
                    "--max-num-batched-tokens", "512", "--step-overhead", "5ms",
                    "--lesson-flops", "--stall-threshold", "50ms", "--api-key", "k",
                    "--prompt-len", "lognormal:1k,3k,8k", "--request-rate", "2.5",
                    "--burstiness", "0.5", "--ramp-up", "2s", "--max-concurrency", "6",
                    "--trace-format", "burstgpt", "--speedup", "4", "--from", "1m", "--to",
                    "2m", "--loop", "--skip-bad-rows", "--max-requests", "50", "--no-inject",
                    "--trace", "t.csv"};
    assert_int_equal(opts_parse((int)(sizeof argv / sizeof argv[0]), argv, groups, OPTS_COUNT(groups), NULL, 0, NULL, err), 0);
    assert_int_equal(c.wl.users, 8);
    assert_int_equal(c.wl.duration_ns, 3000000000LL);
    assert_int_equal(c.wl.prompt_tokens, 16000);
    assert_int_equal(c.wl.answer_len.kind, WORKLOAD_DIST_UNIFORM);
    assert_int_equal(c.wl.answer_len.a, 10);
    assert_int_equal(c.wl.answer_len.b, 20);
    assert_int_equal(c.wl.prompt_len.kind, WORKLOAD_DIST_LOGNORMAL);
    assert_int_equal(c.wl.prompt_len.a, 1000);
    assert_int_equal(c.wl.prompt_len.b, 3000);
    assert_int_equal(c.wl.prompt_len.max, 8000);
    assert_float_equal(c.wl.request_rate, 2.5, 0);
    assert_float_equal(c.wl.burstiness, 0.5, 0);
    assert_int_equal(c.wl.ramp_up_ns, 2000000000LL);
    assert_int_equal(c.wl.max_concurrency, 6);
    assert_int_equal(c.wl.trace_format, TRACE_BURSTGPT);
    assert_float_equal(c.wl.speedup, 4, 0);
    assert_int_equal(c.wl.trace_from_ns, 60000000000LL);
    assert_int_equal(c.wl.trace_to_ns, 120000000000LL);
    assert_true(c.wl.trace_loop);
    assert_true(c.wl.skip_bad_rows);
    assert_int_equal(c.wl.max_requests, 50);
    assert_true(c.wl.no_inject);
    assert_string_equal(c.wl.trace, "t.csv");
    assert_int_equal(c.sched.policy, SCHED_CHUNKED);
    assert_int_equal(c.sched.max_num_batched_tokens, 512);
    assert_int_equal(c.device.step_overhead_ns, 5000000);
    assert_float_equal(c.device.params_override, 8e9, 0);
    assert_int_equal(c.stall_threshold_ns, 50000000);
    assert_string_equal(sec.api_key, "k");
    /* One rule for durations everywhere: a bare number is refused. */
    char *bare[] = {"--stall-threshold", "50"};
    assert_int_equal(opts_parse(2, bare, groups, OPTS_COUNT(groups), NULL, 0, NULL, err), -1);
    assert_non_null(strstr(err, "needs a unit"));

    /* A target without a scheme is http://; other schemes and non-URLs are refused. */
    char *t1[] = {"--target", "localhost:8000"};
    assert_int_equal(opts_parse(2, t1, groups, OPTS_COUNT(groups), NULL, 0, NULL, err), 0);
    assert_string_equal(c.client.target, "http://localhost:8000");
    char *t2[] = {"--target", "https://h:1/v"};
    assert_int_equal(opts_parse(2, t2, groups, OPTS_COUNT(groups), NULL, 0, NULL, err), 0);
    assert_string_equal(c.client.target, "https://h:1/v");
    const char *bad_targets[] = {"ftp://h:1", ":8000", "/v1", ""};
    for (size_t i = 0; i < sizeof bad_targets / sizeof bad_targets[0]; i++) {
        char *a[] = {"--target", (char *)bad_targets[i]};
        if (opts_parse(2, a, groups, OPTS_COUNT(groups), NULL, 0, NULL, err) != -1)
            fail_msg("--target '%s' was accepted", bad_targets[i]);
    }
    /* --extra-body: an object, compacted; never one of the members the experiment sets. */
    char *e1[] = {"--extra-body", "{ \"temperature\" : 0.5 }"};
    assert_int_equal(opts_parse(2, e1, groups, OPTS_COUNT(groups), NULL, 0, NULL, err), 0);
    assert_string_equal(c.client.extra_body, "{\"temperature\":0.5}");
    const char *bad_bodies[] = {"[1]", "{\"max_tokens\": 5}", "{\"stream\": false}", "{oops"};
    for (size_t i = 0; i < sizeof bad_bodies / sizeof bad_bodies[0]; i++) {
        char *a[] = {"--extra-body", (char *)bad_bodies[i]};
        if (opts_parse(2, a, groups, OPTS_COUNT(groups), NULL, 0, NULL, err) != -1)
            fail_msg("--extra-body '%s' was accepted", bad_bodies[i]);
    }
    /* --label once, --metadata K=V repeatable (lines). */
    char *l1[] = {"--label", "L", "--metadata", "a=1", "--metadata", "b=x=y"};
    assert_int_equal(opts_parse(6, l1, groups, OPTS_COUNT(groups), NULL, 0, NULL, err), 0);
    assert_string_equal(c.label, "L");
    assert_string_equal(c.metadata, "a=1\nb=x=y");
    char *m1[] = {"--metadata", "=v"};
    assert_int_equal(opts_parse(2, m1, groups, OPTS_COUNT(groups), NULL, 0, NULL, err), -1);
    /* OPENAI_API_KEY only where --api-key was not given. */
    experiment_secrets env_sec = {0};
    setenv("OPENAI_API_KEY", "from-env", 1);
    experiment_secrets_from_env(&env_sec);
    assert_string_equal(env_sec.api_key, "from-env");
    experiment_secrets_from_env(&sec);
    assert_string_equal(sec.api_key, "k");
    unsetenv("OPENAI_API_KEY");
    /* --scrape-metrics: auto (stored ""), on, off or a URL; anything else refused. */
    assert_string_equal(c.client.scrape_metrics, "");
    static const char *const scrape_ok[][2] = {{"on", "on"},
                                               {"off", "off"},
                                               {"http://10.0.0.1:9400/metrics", "http://10.0.0.1:9400/metrics"},
                                               {"https://h/m", "https://h/m"},
                                               {"auto", ""}};
    for (size_t i = 0; i < sizeof scrape_ok / sizeof scrape_ok[0]; i++) {
        char *a[] = {"--scrape-metrics", (char *)scrape_ok[i][0]};
        assert_int_equal(opts_parse(2, a, groups, OPTS_COUNT(groups), NULL, 0, NULL, err), 0);
        assert_string_equal(c.client.scrape_metrics, scrape_ok[i][1]);
    }
    char *scrape_bad[] = {"--scrape-metrics", "localhost:9400/metrics"};
    assert_int_equal(opts_parse(2, scrape_bad, groups, OPTS_COUNT(groups), NULL, 0, NULL, err), -1);
    assert_non_null(strstr(err, "not auto, on, off or an http"));
}

/* Issue 22, defect 10: --trace without --duration replays the whole trace (the run stopped
 * at 40 s); with --duration, that duration. */
static void test_trace_without_duration(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[128];
    scratch_file(path, sizeof path, "test_options", "t.jsonl",
                 "{\"t\": 1, \"prompt_tokens\": 100, \"max_tokens\": 4}\n"
                 "{\"t\": 75, \"prompt_tokens\": 100, \"max_tokens\": 4}\n");
    for (int given = 0; given < 2; given++) {
        experiment_config c;
        experiment_defaults(&c, EXPERIMENT_SIM);
        char *argv[] = {"--trace", path, "--duration", "50s"};
        const int argc = given ? 4 : 2;
        assert_int_equal(experiment_preset(&c, argc, argv, err), 0);
        opts_group groups[] = {experiment_workload_group(&c)};
        assert_int_equal(opts_parse(argc, argv, groups, 1, NULL, 0, NULL, err), 0);
        assert_int_equal(c.duration_until_end, !given);
        assert_int_equal(experiment_resolve(&c, err), 0);
        assert_false(c.duration_until_end);
        assert_int_equal(c.wl.until_trace_end, !given);
        assert_int_equal(c.wl.duration_ns, given ? 50 * CLOCK_NS_PER_S
                                                 : 75 * CLOCK_NS_PER_S + WORKLOAD_TRACE_TAIL_NS);
        assert_int_equal(experiment_check(&c, err), 0);
    }
    unlink(path);
}

/* Issue 28, point 14: vllm bench serve's command shape. --num-prompts replaces the closed
 * users and runs until its last request has finished (--duration: the cap); --request-rate
 * inf (or max) is every request at t = 0 and needs --num-prompts; a rate of 0 or a word is
 * refused. */
static void test_num_prompts_and_rate_inf(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    for (int given = 0; given < 2; given++) {
        experiment_config c;
        experiment_defaults(&c, EXPERIMENT_SIM);
        char *argv[] = {"--num-prompts", "40", "--request-rate", "inf", "--duration", "50s"};
        const int argc = given ? 6 : 4;
        assert_int_equal(experiment_preset(&c, argc, argv, err), 0);
        opts_group groups[] = {experiment_workload_group(&c)};
        assert_int_equal(opts_parse(argc, argv, groups, 1, NULL, 0, NULL, err), 0);
        assert_int_equal(c.wl.users, 0);
        assert_true(c.rate_all_at_once);
        assert_true(c.wl.request_rate == 0.0);
        assert_int_equal(experiment_resolve(&c, err), 0);
        assert_true(c.wl.until_trace_end);
        assert_int_equal(c.wl.duration_ns,
                         given ? 50 * CLOCK_NS_PER_S : WORKLOAD_NUM_PROMPTS_TAIL_NS);
        assert_int_equal(experiment_check(&c, err), 0);
    }
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_SIM);
    opts_group groups[] = {experiment_workload_group(&c)};
    char *inf_alone[] = {"--request-rate", "max"};
    assert_int_equal(opts_parse(2, inf_alone, groups, 1, NULL, 0, NULL, err), 0);
    assert_int_equal(experiment_resolve(&c, err), -1);
    assert_non_null(strstr(err, "give --num-prompts N"));
    const char *bad[] = {"0", "-1", "fast", "nan", "2x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *a[] = {"--request-rate", (char *)bad[i]};
        assert_int_equal(opts_parse(2, a, groups, 1, NULL, 0, NULL, err), -1);
        assert_non_null(strstr(err, "is not a rate > 0"));
    }
    char *rate[] = {"--request-rate", "2.5"};
    assert_int_equal(opts_parse(2, rate, groups, 1, NULL, 0, NULL, err), 0);
    assert_true(c.wl.request_rate == 2.5);
    assert_false(c.rate_all_at_once);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_option_tables),
        cmocka_unit_test(test_connection_group),
        cmocka_unit_test(test_trace_without_duration),
        cmocka_unit_test(test_num_prompts_and_rate_inf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
