/* experiment/config: the lesson's defaults resolved on each engine, the engine's name, the
 * admission check, and the load generator's threads. */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/opts.h"
#include "experiment/config.h"
#include "experiment/options.h"

/* The lesson's defaults resolve to the lesson's numbers, on each engine. */
static void test_defaults_and_names(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", name[192];
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_SIM);
    assert_int_equal(c.wl.users, 32);
    assert_int_equal(c.wl.prompt_tokens, 8000);
    assert_int_equal(c.sched.policy, SCHED_MIXED);
    assert_int_equal(c.sched.max_num_batched_tokens, 16384);
    assert_int_equal(experiment_resolve(&c, err), 0);
    assert_int_equal(experiment_check(&c, err), 0);
    experiment_engine_name(&c, NULL, name, sizeof name);
    assert_string_equal(name, "sim h100-sxm llama-3.1-8b mixed/16384");
    assert_true(c.sched.kv_blocks > 0);
    assert_int_equal(c.sched.max_model_len, c.cost.arch.max_position);

    experiment_defaults(&c, EXPERIMENT_CPU);
    assert_int_equal(experiment_resolve(&c, err), 0);
    experiment_engine_name(&c, NULL, name, sizeof name);
    assert_string_equal(name, "cpu small mixed/16384");

    experiment_defaults(&c, EXPERIMENT_REMOTE);
    assert_int_equal(experiment_resolve(&c, err), -1); /* no target */
    snprintf(c.client.target, sizeof c.client.target, "http://127.0.0.1:9");
    assert_int_equal(experiment_resolve(&c, err), 0);
    experiment_engine_name(&c, "vllm-model", name, sizeof name);
    assert_string_equal(name, "remote vllm-model");

    /* One-step prefill cannot hold a prompt over the budget: refused before anything runs. */
    experiment_defaults(&c, EXPERIMENT_SIM);
    c.sched.max_num_batched_tokens = 4096;
    assert_int_equal(experiment_resolve(&c, err), 0);
    assert_int_equal(experiment_check(&c, err), -1);
    c.sched.policy = SCHED_CHUNKED;
    assert_int_equal(experiment_check(&c, err), 0);
}

/* A --hardware profile that found its server caching prefixes (calibrate --target) turns
 * the simulator's prefix caching on, unless the command line said either way. */
static void test_profile_prefix_caching(void **state)
{
    (void)state;
    char path[] = "/tmp/stallscope-test-profile-XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("{\"format\": \"stallscope-hardware-profile\", \"version\": 2, \"source\": "
          "\"target\", \"mem_bytes\": 8e10, \"prefix_caching\": true, \"step_model\": "
          "{\"model\": \"llama-3.1-8b\", \"step_ns\": 4e6, \"seq_ns\": 3e4, \"ctx_ns\": 1, "
          "\"token_ns\": 1.6e4, \"pair_ns\": 0.002}}",
          f);
    fclose(f);
    char err[ERR_LEN] = "";
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_SIM);
    snprintf(c.device.hardware, sizeof c.device.hardware, "%s", path);
    assert_int_equal(experiment_resolve(&c, err), 0);
    assert_true(c.sched.prefix_caching);
    experiment_defaults(&c, EXPERIMENT_SIM);
    snprintf(c.device.hardware, sizeof c.device.hardware, "%s", path);
    c.prefix_caching_said = true; /* --no-enable-prefix-caching */
    assert_int_equal(experiment_resolve(&c, err), 0);
    assert_false(c.sched.prefix_caching);
    unlink(path);
}

/* The load generator's threads: what --client-threads says, else the CPUs the server
 * leaves (at least 1), recorded by experiment_resolve; the CPUs are this process's affinity
 * mask (issue 22, defect 9: taskset -c 0 on 2 cores counted 2). */
static void check_client_threads_rule(int cpus)
{
    char err[ERR_LEN] = "", line[320];
    const int rest = cpus > 1 ? cpus - 1 : 1;
    experiment_config c;
    experiment_client_cpus cc;
    experiment_defaults(&c, EXPERIMENT_EMULATE);
    assert_int_equal(experiment_resolve(&c, err), 0);
    assert_int_equal(c.client.threads, rest); /* the emulated server: its engine thread */
    assert_false(c.client.threads_given);
    experiment_client_cpus_of(&c, &cc);
    assert_int_equal(cc.cpus, cpus);
    assert_int_equal(cc.server, 1);
    assert_false(experiment_client_cpus_describe(&cc, &c, line, sizeof line));
    snprintf(err, sizeof err, "client: %d event loop%s (the default; %d CPU%s available, 1 busy "
                              "in the embedded emulate server)",
             rest, rest == 1 ? "" : "s", cpus, cpus == 1 ? "" : "s");
    assert_string_equal(line, err);
    experiment_defaults(&c, EXPERIMENT_CPU);
    assert_int_equal(experiment_client_threads(&c), 1); /* --threads: the CPUs - 1 by default */
    c.device.threads = 1;
    assert_int_equal(experiment_client_threads(&c), rest);
    c.device.threads = cpus + 4; /* more than the machine has: still one */
    assert_int_equal(experiment_client_threads(&c), 1);
    experiment_defaults(&c, EXPERIMENT_REMOTE);
    snprintf(c.client.target, sizeof c.client.target, "http://127.0.0.1:9");
    assert_int_equal(experiment_resolve(&c, err), 0);
    assert_int_equal(c.client.threads, cpus); /* the server is elsewhere */
    opts_group client = experiment_client_group(&c);
    assert_int_equal(opts_apply(&client, 1, "client-threads", "3", err), 0);
    assert_true(c.client.threads_given);
    assert_int_equal(experiment_resolve(&c, err), 0);
    assert_int_equal(c.client.threads, 3);
    experiment_client_cpus_of(&c, &cc);
    assert_false(experiment_client_cpus_describe(&cc, &c, line, sizeof line)); /* elsewhere */
    /* Given, beside the embedded server, more than the CPUs: the warning, once per runner. */
    experiment_defaults(&c, EXPERIMENT_EMULATE);
    client = experiment_client_group(&c);
    snprintf(err, sizeof err, "%d", cpus);
    assert_int_equal(opts_apply(&client, 1, "client-threads", err, err), 0);
    assert_int_equal(experiment_resolve(&c, err), 0);
    assert_int_equal(c.client.threads, cpus);
    experiment_client_cpus_of(&c, &cc);
    assert_true(experiment_client_cpus_describe(&cc, &c, line, sizeof line));
    snprintf(err, sizeof err, "warning: --client-threads %d beside the embedded emulate "
                              "server's 1 busy thread: %d threads on %d CPU%s",
             cpus, cpus + 1, cpus, cpus == 1 ? "" : "s");
    if (strncmp(line, err, strlen(err)) != 0)
        fail_msg("'%s' does not start with '%s'", line, err);
    experiment_defaults(&c, EXPERIMENT_SIM);
    assert_int_equal(experiment_client_threads(&c), 0);
}

static void test_client_threads_rule(void **state)
{
    (void)state;
    cpu_set_t all, one;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    check_client_threads_rule(CPU_COUNT(&all));
    /* one CPU of the mask, as taskset -c would */
    int first = 0;
    while (!CPU_ISSET(first, &all))
        first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    check_client_threads_rule(1);
    assert_int_equal(sched_setaffinity(0, sizeof all, &all), 0);
}

/* An injector whose first injection is at or past the end of the run: said, with both times;
 * one inside, a Poisson one from inside, or no injector: nothing. */
static void test_no_injection_inside(void **state)
{
    (void)state;
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_SIM);
    char why[512] = "";
    assert_false(experiment_no_injection_inside(&c, why, sizeof why)); /* 5 s of 40 s */
    c.wl.duration_ns = 4 * CLOCK_NS_PER_S;
    assert_true(experiment_no_injection_inside(&c, why, sizeof why));
    assert_non_null(strstr(why, "the first is planned at 5.00 s and the run lasts 4.00 s"));
    c.wl.duration_ns = 5 * CLOCK_NS_PER_S; /* at the end: outside */
    assert_true(experiment_no_injection_inside(&c, why, sizeof why));
    c.wl.duration_ns = 5 * CLOCK_NS_PER_S + 1;
    assert_false(experiment_no_injection_inside(&c, why, sizeof why));
    c.wl.duration_ns = 4 * CLOCK_NS_PER_S;
    c.wl.inject_at_ns = 3 * CLOCK_NS_PER_S;
    c.wl.inject_poisson = true;
    assert_false(experiment_no_injection_inside(&c, why, sizeof why));
    c.wl.inject_at_ns = 5 * CLOCK_NS_PER_S;
    c.wl.no_inject = true;
    assert_false(experiment_no_injection_inside(&c, why, sizeof why));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_names),
        cmocka_unit_test(test_profile_prefix_caching),
        cmocka_unit_test(test_client_threads_rule),
        cmocka_unit_test(test_no_injection_inside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
