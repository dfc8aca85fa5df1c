/* experiment: the typed configuration and its config.json (write -> read -> equal, every
 * field), secrets kept out of it, the option tables, the run pair through the simulator
 * runner, and the sweep's plan. */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "experiment/experiment.h"

#include "scratch_file.h"

/* Every field of the configuration and the record set to a value that is not its default,
 * so a field the writer or the reader forgets cannot compare equal by luck. */
static void distinctive(experiment_config *c, experiment_meta *m)
{
    char err[ERR_LEN] = "";
    experiment_defaults(c, EXPERIMENT_EMULATE);
    /* Field by field, not compound literals: a literal's padding bytes are unspecified, and
     * the comparison below is of every byte. */
    c->wl.users = 7;
    c->wl.duration_ns = 12345678901LL;
    c->wl.inject = false;
    c->wl.inject_at_ns = 234567890;
    c->wl.inject_every_ns = 3456789012LL;
    c->wl.inject_poisson = true;
    c->wl.prompt_tokens = 4321;
    c->wl.inject_max_tokens = 33;
    c->wl.no_inject = true;
    c->wl.prompt_len.kind = WORKLOAD_DIST_LOGNORMAL;
    c->wl.prompt_len.a = 1730;
    c->wl.prompt_len.b = 5696;
    c->wl.prompt_len.max = 16000;
    c->wl.answer_len.kind = WORKLOAD_DIST_EMPIRICAL;
    c->wl.answer_len.a = c->wl.answer_len.b = c->wl.answer_len.max = 0;
    snprintf(c->wl.answer_len.file, sizeof c->wl.answer_len.file, "/x/answers.csv@len");
    c->wl.seed = 0xfedcba9876543210ULL;
    c->wl.request_rate = 4.5;
    c->wl.burstiness = 0.25;
    c->wl.ramp_up_ns = 3000000000LL;
    c->wl.max_concurrency = 12;
    snprintf(c->wl.trace, sizeof c->wl.trace, "/t/trace.jsonl");
    c->wl.trace_format = TRACE_MOONCAKE;
    c->wl.speedup = 2.5;
    c->wl.trace_from_ns = 1000000000LL;
    c->wl.trace_to_ns = 9000000000LL;
    c->wl.trace_loop = true;
    c->wl.until_trace_end = true;
    c->wl.skip_bad_rows = true;
    c->wl.max_requests = 99;
    c->sched.policy = SCHED_PREFILL_FIRST;
    c->sched.max_num_batched_tokens = 6000;
    c->sched.max_num_seqs = 77;
    c->sched.max_model_len = 9999;
    c->sched.block_size = 32;
    c->sched.kv_blocks = 123456789012LL;
    snprintf(c->device.gpu, sizeof c->device.gpu, "a100-80g");
    snprintf(c->device.model, sizeof c->device.model, "qwen");
    snprintf(c->device.model_config, sizeof c->device.model_config, "/m/config.json");
    snprintf(c->device.hardware, sizeof c->device.hardware, "/h/hw.json");
    c->device.params_override = 7.5e9;
    c->device.step_overhead_ns = 4321;
    c->device.compute_efficiency = 0.61;
    c->device.bandwidth_efficiency = 0.72;
    c->device.gpu_memory_utilization = 0.83;
    c->device.threads = 5;
    assert_int_equal(cost_gpu_find("h100-sxm", &c->cost.gpu, err), 0);
    assert_int_equal(cost_arch_find("llama-3.1-8b", &c->cost.arch, err), 0);
    c->cost.gpu.mem_bytes = 12.5e9; /* the field the first writer forgot */
    c->cost.gpu.attention_flops = 1.25e14;
    c->cost.gpu.bytes_per_param = 4;
    c->cost.gpu.kv_bytes_per_elem = 3;
    c->cost.gpu.step_overhead_ns = 987;
    c->cost.gpu.threads = 3; /* read back too (the first reader dropped it) */
    c->cost.arch.tied_embeddings = true;
    c->cost.compute_efficiency = 0.5;
    c->cost.bandwidth_efficiency = 0.25;
    c->cost.step_overhead_ns = 1234567;
    c->cost.bytes_per_param = 1.5;
    c->cost.kv_bytes_per_elem = 2.5;
    c->cost.params_override = 3e9;
    snprintf(c->client.target, sizeof c->client.target, "https://example.test:8443/v1");
    c->client.endpoint = DRIVER_CHAT;
    snprintf(c->client.model_name, sizeof c->client.model_name, "served-name");
    c->client.request_timeout_ns = 17000000000LL;
    c->client.warmup_ns = 1500000000LL;
    c->client.fidelity = true;
    c->client.insecure = true;
    c->client.transport = TRANSPORT_CURL;
    c->client.threads = 7;
    c->client.threads_given = true;
    snprintf(c->client.extra_body, sizeof c->client.extra_body, "{\"temperature\":0.25}");
    snprintf(c->label, sizeof c->label, "a label");
    snprintf(c->metadata, sizeof c->metadata, "team=infra\nticket=12");
    snprintf(c->client.scrape_metrics, sizeof c->client.scrape_metrics,
             "http://127.0.0.1:9400/metrics");
    c->no_baseline = true;
    c->stall_threshold_ns = 42000000;
    c->wl.shard.index = 2;
    c->wl.shard.count = 5;
    snprintf(c->shard.start_at, sizeof c->shard.start_at, "2026-12-01T10:00:00.25Z");
    c->shard.start_at_ns = 1796119200250000000LL;

    memset(m, 0, sizeof *m);
    snprintf(m->label, sizeof m->label, "interference");
    snprintf(m->engine_name, sizeof m->engine_name, "emulate h100-sxm llama-3.1-8b x/6000");
    snprintf(m->target, sizeof m->target, "http://127.0.0.1:4242");
    m->complete = true;
    char *argv[] = {"--users", "7", "--policy=prefill-first"};
    assert_int_equal(experiment_meta_set_argv(m, 3, argv), 0);
    m->has_client = true;
    snprintf(m->served_model, sizeof m->served_model, "the-model");
    m->token_id_prompts = true;
    m->text_overhead = 3.25;
    m->text_tokens_per_word = 1.375;
    m->timestamps = true;
    m->nice = -10;
    m->protocol_violations = 17;
    snprintf(m->transport, sizeof m->transport, "raw");
    m->stamps_kernel = 1001;
    m->stamps_kernel_coalesced = 22;
    m->stamps_user = 3;
    m->t0_monotonic_ns = 987654321012345LL;
    snprintf(m->metrics_url, sizeof m->metrics_url, "http://127.0.0.1:4242/metrics");
    m->metrics_scrapes = 161;
    m->metrics_scrape_failures = 3;
    m->metrics_rows = 157;
    m->t0_realtime_ns = 1796119200250012345LL;
    m->start_late_ns = 12345;
    m->clock.maxerror_us = 16000;
    m->clock.esterror_us = 250;
    m->clock.synchronized = true;
    m->clock.state = 1;
    m->clock.status = 8193;
    m->clock.pair_error_ns = 43;
    m->clock.step_ns = -7;
    snprintf(m->clock.boot_id, sizeof m->clock.boot_id, "84a6a363-1e7d-423f-b3c7-b6dcd17bfca0");
    snprintf(m->clock.host, sizeof m->clock.host, "node-7");
    m->merge.shards = 4;
    snprintf(m->merge.merged, sizeof m->merge.merged, "0,2,3");
    snprintf(m->merge.missing, sizeof m->merge.missing, "1");
    m->merge.users = 24;
    m->merge.t0_realtime_ns = 1796119200250000001LL;
    m->merge.clock_uncertainty_ns = 32000086;
    m->merge.clock_estimated_ns = 500086;
    m->merge.one_host = true;
}

static void assert_meta_equal(const experiment_meta *a, const experiment_meta *b)
{
    experiment_meta x = *a, y = *b;
    assert_int_equal(x.argc, y.argc);
    for (int i = 0; i < x.argc; i++)
        assert_string_equal(x.argv[i], y.argv[i]);
    x.argv = y.argv = NULL;
    assert_memory_equal(&x, &y, sizeof x);
}

static void test_config_round_trip(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_config c, back;
    experiment_meta m, mb;
    distinctive(&c, &m);
    json_t *json = experiment_config_to_json(&c, &m);
    assert_non_null(json);
    if (experiment_config_from_json(json, &back, &mb, err) != 0)
        fail_msg("read back: %s", err);
    /* The catalogs' provenance notes are pointers to static text: the reader points them at
     * its own ("config.json"); every other byte must come back as written. */
    assert_string_equal(back.cost.gpu.source, "config.json");
    assert_string_equal(back.cost.arch.source, "config.json");
    back.cost.gpu.source = c.cost.gpu.source;
    back.cost.arch.source = c.cost.arch.source;
    assert_memory_equal(&c, &back, sizeof c);
    assert_meta_equal(&m, &mb);

    /* Through a file, too (written atomically, read by the same reader). */
    char dir[] = "/tmp/test_experiment_XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(experiment_config_write(path, &c, &m, err), 0);
    experiment_meta mf;
    assert_int_equal(experiment_config_read(path, &back, &mf, err), 0);
    back.cost.gpu.source = c.cost.gpu.source;
    back.cost.arch.source = c.cost.arch.source;
    assert_memory_equal(&c, &back, sizeof c);
    assert_meta_equal(&m, &mf);
    unlink(path);
    rmdir(dir);

    /* A remote engine has no cost section, and none comes back. */
    c.engine = EXPERIMENT_REMOTE;
    memset(&c.cost, 0, sizeof c.cost);
    json_t *remote = experiment_config_to_json(&c, &m);
    assert_null(json_object_get(remote, "cost"));
    assert_int_equal(experiment_config_from_json(remote, &back, NULL, err), 0);
    assert_memory_equal(&c, &back, sizeof c);
    json_decref(remote);

    json_decref(json);
    experiment_meta_free(&m);
    experiment_meta_free(&mb);
    experiment_meta_free(&mf);
}

static void test_config_reader_refuses(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_config c, back;
    experiment_meta m;
    distinctive(&c, &m);
    struct {
        const char *section, *key, *json, *want;
    } bad[] = {
        {NULL, "format", "1", "format 1"},
        {NULL, "engine_kind", "\"gpu\"", "engine_kind"},
        {"workload", "users", "\"seven\"", "workload.users: not an integer"},
        {"workload", "users", "1e20", "workload.users: not an integer"},
        {"sched", "policy", "\"fastest\"", "sched.policy: not a policy"},
        {"device", "gpu", "\"0123456789012345678901234567890123456789\"", "device.gpu: too long"},
        {"client", "endpoint", "\"grpc\"", "client.endpoint"},
        {"experiment", "no_baseline", "1", "not true or false"},
        {NULL, "workload", "[]", "workload is not an object"},
        {"shard", "index", "5", "shard.index: 5 is not between 0 and 4"},
        {"shard", "count", "0", "shard.count: 0 is not between 1"},
        {"shard", "clock", "7", "clock is not an object"},
        {"merge", "one_host", "\"yes\"", "merge.one_host: not true or false"},
        {"workload", "prompt_len", "\"normal:3\"", "workload.prompt_len: not a distribution"},
        {"workload", "answer_len", "7", "workload.answer_len: not a distribution"},
        {"workload", "trace_format", "\"csv\"", "workload.trace_format: not a trace format"},
        {"workload", "request_rate", "\"fast\"", "workload.request_rate: not a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *json = experiment_config_to_json(&c, &m);
        json_t *where = bad[i].section ? json_object_get(json, bad[i].section) : json;
        json_object_set_new(where, bad[i].key, json_loads(bad[i].json, JSON_DECODE_ANY, NULL));
        err[0] = '\0';
        assert_int_equal(experiment_config_from_json(json, &back, NULL, err), -1);
        if (!strstr(err, bad[i].want))
            fail_msg("%s.%s = %s: error '%s' lacks '%s'", bad[i].section ? bad[i].section : "",
                     bad[i].key, bad[i].json, err, bad[i].want);
        json_decref(json);
    }
    /* Files from before the distributions: their uniform ranges are read as such. */
    json_t *legacy = experiment_config_to_json(&c, &m);
    json_t *w = json_object_get(legacy, "workload");
    json_object_del(w, "prompt_len");
    json_object_set_new(w, "bg_prompt_min", json_integer(11));
    json_object_set_new(w, "bg_prompt_max", json_integer(22));
    assert_int_equal(experiment_config_from_json(legacy, &back, NULL, err), 0);
    assert_int_equal(back.wl.prompt_len.kind, WORKLOAD_DIST_UNIFORM);
    assert_int_equal(back.wl.prompt_len.a, 11);
    assert_int_equal(back.wl.prompt_len.b, 22);
    assert_int_equal(back.wl.answer_len.kind, WORKLOAD_DIST_EMPIRICAL); /* as written */
    json_decref(legacy);
    /* The first format (no "format" key) is named, not misread. */
    json_t *old = experiment_config_to_json(&c, &m);
    json_object_del(old, "format");
    assert_int_equal(experiment_config_from_json(old, &back, NULL, err), -1);
    assert_non_null(strstr(err, "older stallscope"));
    json_decref(old);
    experiment_meta_free(&m);
}

/* The API key and extra headers never reach config.json, in either spelling; nor a URL's
 * user:password or query values (the target, the metrics URL, argv), nor a key inside a
 * --server-cmd template; and a file an earlier version wrote is redacted when read. */
static void test_secrets_never_written(void **state)
{
    (void)state;
    experiment_config c;
    experiment_meta m;
    distinctive(&c, &m);
    const char *url = "http://user:PASS-1@127.0.0.1:8000/v1?key=QKEY-1&x=y";
    snprintf(c.client.target, sizeof c.client.target, "%s", url);
    snprintf(c.client.scrape_metrics, sizeof c.client.scrape_metrics,
             "http://user:PASS-2@127.0.0.1:9400/metrics?token=QKEY-2");
    snprintf(m.target, sizeof m.target, "%s", url);
    snprintf(m.metrics_url, sizeof m.metrics_url, "http://u:PASS-3@127.0.0.1:8000/metrics");
    char *argv[] = {"--api-key", "sk-SECRET-1", "--header=Authorization: Bearer SECRET-2",
                    "--api-key=SECRET-3", "--header", "X-Token: SECRET-4", "--users", "7",
                    "--target", "user:PASS-4@127.0.0.1:8000/?key=QKEY-3", "--server-cmd",
                    "OPENAI_API_KEY=SECRET-5 vllm serve m --port {port} --api-key SECRET-6"};
    assert_int_equal(experiment_meta_set_argv(&m, 12, argv), 0);
    json_t *json = experiment_config_to_json(&c, &m);
    char *text = json_dumps(json, 0);
    assert_null(strstr(text, "SECRET"));
    assert_null(strstr(text, "PASS"));
    assert_null(strstr(text, "QKEY"));
    assert_non_null(strstr(text, "\"--api-key\", \"***\""));
    assert_non_null(strstr(text, "\"--header=***\""));
    assert_non_null(strstr(text, "\"--users\", \"7\""));
    assert_non_null(strstr(text, "\"--target\", \"***@127.0.0.1:8000/?key=***\""));
    assert_non_null(
        strstr(text, "\"OPENAI_API_KEY=*** vllm serve m --port {port} --api-key ***\""));
    const json_t *client = json_object_get(json, "client");
    assert_string_equal(json_string_value(json_object_get(client, "target")),
                        "http://***@127.0.0.1:8000/v1?key=***&x=***");
    free(text);

    /* config.json as an earlier version wrote it: the reader redacts what it takes. */
    json_object_set_new(json, "target", json_string(url));
    json_object_set_new(json_object_get(json, "client"), "target", json_string(url));
    json_array_set_new(json_object_get(json, "argv"), 1, json_string("sk-SECRET-1"));
    experiment_config back;
    experiment_meta mback;
    memset(&mback, 0, sizeof mback);
    char err[ERR_LEN];
    assert_int_equal(experiment_config_from_json(json, &back, &mback, err), 0);
    assert_string_equal(back.client.target, "http://***@127.0.0.1:8000/v1?key=***&x=***");
    assert_string_equal(mback.target, "http://***@127.0.0.1:8000/v1?key=***&x=***");
    assert_string_equal(mback.argv[1], "***");
    json_decref(json);
    experiment_meta_free(&m);
    experiment_meta_free(&mback);

    /* A header without its colon is refused without being echoed. */
    experiment_secrets sec = {0};
    const opts_group groups[] = {experiment_secrets_group(&sec)};
    char *bad[] = {"--header", "Authorization Bearer SECRET-7"};
    assert_int_equal(opts_parse(2, bad, groups, 1, NULL, 0, NULL, err), -1);
    assert_non_null(strstr(err, "--header"));
    assert_null(strstr(err, "SECRET"));
}

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

/* A --server-cmd template takes {host} and {port} from the target past its user:password
 * and before its query: neither the password nor a query key reaches the command. */
static void test_server_command(void **state)
{
    (void)state;
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_REMOTE);
    snprintf(c.client.target, sizeof c.client.target, "http://user:PASS@127.0.0.1:8123?key=QKEY");
    char cmd[512], err[ERR_LEN];
    const char *tmpl = "serve --host {host} --port {port} --policy {policy}";
    assert_int_equal(experiment_server_command(tmpl, &c, "p", cmd, sizeof cmd, err), 0);
    assert_string_equal(cmd, "serve --host 127.0.0.1 --port 8123 --policy mixed");
    snprintf(c.client.target, sizeof c.client.target, "https://u:p@ss@example.test/v1");
    assert_int_equal(experiment_server_command("{host}:{port}", &c, "p", cmd, sizeof cmd, err), 0);
    assert_string_equal(cmd, "example.test:443");
    /* An IPv6 literal: the address without its brackets ({host} was "[") */
    snprintf(c.client.target, sizeof c.client.target, "http://[::1]:8124/v1");
    assert_int_equal(experiment_server_command("--host {host} --port {port}", &c, "p", cmd,
                                               sizeof cmd, err), 0);
    assert_string_equal(cmd, "--host ::1 --port 8124");
    snprintf(c.client.target, sizeof c.client.target, "http://[fe80::2]");
    assert_int_equal(experiment_server_command("{host} {port}", &c, "p", cmd, sizeof cmd, err), 0);
    assert_string_equal(cmd, "fe80::2 80");
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

/* The pair: the baseline's p50 is the interference run's reference, the artifacts land, and
 * an in-memory pair (the report's prediction) writes nothing. */
static void test_run_pair(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_SIM);
    c.wl.users = 4;
    c.wl.duration_ns = 6000000000LL;
    c.wl.inject_at_ns = 1000000000LL;
    c.wl.inject_every_ns = 2000000000LL;
    assert_int_equal(experiment_resolve(&c, err), 0);
    experiment_runner sim;
    assert_int_equal(experiment_runner_sim(&sim, err), 0);

    experiment_pair mem;
    experiment_io quiet = {0};
    assert_int_equal(experiment_run_pair(&c, &sim, &quiet, &mem, err), 0);
    assert_true(mem.complete && mem.have_baseline && mem.have_interference);
    assert_int_equal(mem.baseline.n_injections, 0);
    assert_int_equal(mem.interference.n_injections, 3);
    /* The default threshold: 5 x the baseline's p50. */
    assert_float_equal(mem.interference.stalls.threshold_ms, 5 * mem.baseline.itl_ms.p50, 1e-9);
    /* Each injection's spike is the cost model's step for it. */
    assert_float_equal(mem.interference.itl_ms.max / experiment_model_spike_ms(&c, 8000), 1.0,
                       0.02);

    char dir[] = "/tmp/test_pair_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *argv[] = {"--users", "4"};
    experiment_io io = {.out_dir = dir, .argc = 2, .argv = argv};
    experiment_pair disk;
    assert_int_equal(experiment_run_pair(&c, &sim, &io, &disk, err), 0);
    /* Same configuration, same numbers: on disk or in memory. */
    assert_memory_equal(&disk.interference.itl_ms, &mem.interference.itl_ms,
                        sizeof mem.interference.itl_ms);
    static const char *const files[] = {"comparison.json", "baseline/config.json",
                                        "baseline/summary.json", "baseline/tokens.csv",
                                        "interference/steps.csv", "interference/config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[256];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (stat(path, &st) != 0)
            fail_msg("%s missing", path);
    }
    experiment_config back;
    experiment_meta meta;
    char path[256];
    snprintf(path, sizeof path, "%s/baseline/config.json", dir);
    assert_int_equal(experiment_config_read(path, &back, &meta, err), 0);
    assert_false(back.wl.inject); /* the baseline's own workload: injector off */
    assert_true(meta.complete);
    assert_string_equal(meta.label, "baseline");
    experiment_meta_free(&meta);

    /* --no-baseline: the interference run alone, its own p50 the reference. */
    c.no_baseline = true;
    experiment_pair alone;
    assert_int_equal(experiment_run_pair(&c, &sim, &quiet, &alone, err), 0);
    assert_false(alone.have_baseline);
    assert_float_equal(alone.interference.stalls.threshold_ms, 5 * alone.interference.itl_ms.p50,
                       1e-9);
    experiment_pair_free(&alone);
    experiment_pair_free(&mem);
    experiment_pair_free(&disk);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* A runner that stops early: the pair says which run and why, and goes no further than an
 * incomplete baseline. */
static int cut_run(void *impl, const experiment_phase *ph, tokenlog *log, experiment_meta *meta,
                   char *err)
{
    (void)impl, (void)log;
    meta->complete = false;
    return err_set(err, "the %s server went away", ph->label), 0;
}

/* The simulator's defaults with `users` users for 1 s, resolved. */
static void one_second_config(experiment_config *c, int users)
{
    char err[ERR_LEN] = "";
    experiment_defaults(c, EXPERIMENT_SIM);
    c->wl.users = users;
    c->wl.duration_ns = 1000000000LL;
    assert_int_equal(experiment_resolve(c, err), 0);
}

static void test_pair_incomplete(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_config c;
    one_second_config(&c, 2);
    experiment_runner cut = {.impl = NULL, .name = "cut", .run = cut_run, .destroy = NULL};
    experiment_io io = {0};
    experiment_pair p;
    assert_int_equal(experiment_run_pair(&c, &cut, &io, &p, err), 0);
    assert_false(p.complete);
    assert_true(p.have_baseline);
    assert_false(p.have_interference);
    assert_non_null(strstr(p.why, "the baseline run stopped early: the baseline server went away"));
    experiment_pair_free(&p);
}

/* A runner whose runs go to their end with *(int *)impl of their 4 requests failed: two
 * with a redirect, the rest timed out. */
static int failing_run(void *impl, const experiment_phase *ph, tokenlog *log,
                       experiment_meta *meta, char *err)
{
    (void)ph, (void)err;
    const int failed = *(const int *)impl;
    for (int i = 0; i < 4; i++) {
        tokenlog_request r = {.request = i, .user = i, .kind = TOKENLOG_BG, .t_plan_ns = 0,
                              .t_send_ns = 0, .t_first_ns = -1, .t_end_ns = 1000000};
        if (i < 2 && i < failed)
            snprintf(r.error, sizeof r.error, "HTTP 301: the target redirects to http://h/v2; "
                                              "use that URL");
        else if (i < failed)
            snprintf(r.error, sizeof r.error, "timeout: no bytes for 1.0 s");
        else
            r.completion_tokens = 1;
        if (tokenlog_add_request(log, &r, NULL) != 0)
            return -1;
    }
    meta->complete = true;
    return 0;
}

/* A run that went to its end with most of its requests failed is no run to compare: the
 * pair stops at a failed baseline, says why (the most common error), and config.json and
 * summary.json say "complete": false, "failed": true. Fewer failures: complete. */
static void test_pair_failed(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_config c;
    one_second_config(&c, 4);
    int failed = 3;
    experiment_runner runner = {.impl = &failed, .name = "failing", .run = failing_run};
    char dir[] = "/tmp/test_pair_failed_XXXXXX";
    assert_non_null(mkdtemp(dir));
    experiment_io io = {.out_dir = dir};
    experiment_pair p;
    assert_int_equal(experiment_run_pair(&c, &runner, &io, &p, err), 0);
    assert_false(p.complete);
    assert_true(p.have_baseline);
    assert_false(p.have_interference);
    assert_string_equal(p.why, "the baseline run failed: 3 of 4 requests failed; the most "
                               "common error (2): HTTP 301: the target redirects to "
                               "http://h/v2; use that URL");
    assert_true(p.baseline.failed);
    assert_false(p.baseline.complete);
    experiment_config back;
    experiment_meta meta;
    char path[256];
    snprintf(path, sizeof path, "%s/baseline/config.json", dir);
    assert_int_equal(experiment_config_read(path, &back, &meta, err), 0);
    assert_false(meta.complete);
    experiment_meta_free(&meta);
    snprintf(path, sizeof path, "%s/baseline/summary.json", dir);
    json_t *summary = json_load_file(path, 0, NULL);
    assert_non_null(summary);
    assert_true(json_is_true(json_object_get(summary, "failed")));
    assert_true(json_is_false(json_object_get(summary, "complete")));
    json_decref(summary);
    experiment_pair_free(&p);

    /* The interference run alone, half failed: failed too (at least half). */
    c.no_baseline = true;
    failed = 2;
    io.out_dir = NULL;
    assert_int_equal(experiment_run_pair(&c, &runner, &io, &p, err), 0);
    assert_false(p.complete);
    assert_true(p.have_interference);
    assert_non_null(strstr(p.why, "the interference run failed: 2 of 4 requests failed"));
    experiment_pair_free(&p);
    /* One of four: the run stands, its error counted. */
    failed = 1;
    assert_int_equal(experiment_run_pair(&c, &runner, &io, &p, err), 0);
    assert_true(p.complete);
    assert_false(p.interference.failed);
    assert_int_equal(p.interference.errors, 1);
    experiment_pair_free(&p);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_sweep_plan(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    experiment_sweep *sw = calloc(1, sizeof *sw);
    assert_non_null(sw);
    experiment_defaults(&sw->base, EXPERIMENT_SIM);
    char *argv[] = {"--prompt-tokens", "4k,8k", "--max-num-batched-tokens=16384,4096",
                    "--users", "8"};
    char *rest[8];
    int n_rest = 0;
    assert_int_equal(experiment_axes_from_argv(5, argv, sw->axes, &sw->n_axes, rest, &n_rest, err),
                     0);
    assert_int_equal(sw->n_axes, 2);
    assert_int_equal(n_rest, 2); /* --users 8: one value, passed through */
    assert_true(sw->axes[1].server_side);
    assert_int_equal(experiment_sweep_plan(sw, err), 0);
    assert_int_equal(sw->n_points, 4);
    /* The first axis varies fastest; 8k under a 4096 budget with one-step prefill is refused. */
    char desc[128];
    experiment_sweep_point_desc(sw, &sw->points[3], desc, sizeof desc);
    assert_string_equal(desc, "prompt-tokens=8k max-num-batched-tokens=4096");
    assert_string_equal(sw->points[3].status, "refused");
    assert_string_equal(sw->points[2].status, "ok");
    experiment_config pc;
    assert_int_equal(experiment_sweep_point_config(sw, &sw->points[2], &pc, err), 0);
    assert_int_equal(pc.wl.prompt_tokens, 4000);
    assert_int_equal(pc.sched.max_num_batched_tokens, 4096);
    /* A bad value is bad input before anything runs, through the option's own parser. */
    snprintf(sw->axes[0].values[1], sizeof sw->axes[0].values[1], "8q");
    assert_int_equal(experiment_sweep_plan(sw, err), -1);
    assert_non_null(strstr(err, "--prompt-tokens"));
    free(sw);
}

/* The server flags: one mapping for every command that prints them. */
static void test_server_flags(void **state)
{
    (void)state;
    workload_config wl;
    workload_default(&wl);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    experiment_print_server_flags(f, "  ", SCHED_CHUNKED, 512, &wl);
    experiment_print_server_flags(f, "  ", SCHED_MIXED, 16384, &wl);
    fclose(f);
    assert_non_null(strstr(buf, "--max-num-batched-tokens 512 --enable-chunked-prefill"));
    assert_non_null(strstr(buf, "--chunked-prefill-size 512 --enable-mixed-chunk"));
    assert_non_null(strstr(buf, "--max-num-batched-tokens 16384 --no-enable-chunked-prefill"));
    assert_non_null(strstr(buf, "--chunked-prefill-size -1 --max-prefill-tokens 16384"));
    assert_non_null(strstr(buf, "stallscope serve --policy mixed --max-num-batched-tokens 16384"));
    /* llama.cpp: a slot per stream plus the injector, each with room for the long prompt. */
    assert_non_null(strstr(buf, "--parallel 34 --ctx-size 307360"));
    free(buf);
}

/* Two runs are one experiment only when everything but the injector switch agrees. */
static void test_config_differ(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", field[200];
    experiment_config a, b;
    experiment_defaults(&a, EXPERIMENT_EMULATE);
    assert_int_equal(experiment_resolve(&a, err), 0);
    b = a;
    b.wl.inject = !a.wl.inject;         /* baseline vs interference: the same experiment */
    b.stall_threshold_ns = 1;            /* an analysis choice, not the experiment */
    b.client.warmup_ns = 0;
    assert_false(experiment_config_differ(&a, &b, field, sizeof field));
    b.wl.users = 4;
    assert_true(experiment_config_differ(&a, &b, field, sizeof field));
    assert_string_equal(field, "workload.users (32 vs 4)");
    b = a;
    b.engine = EXPERIMENT_CPU;
    assert_true(experiment_config_differ(&a, &b, field, sizeof field));
    assert_string_equal(field, "engine_kind (\"emulate\" vs \"cpu\")");
    b = a;
    b.sched.max_num_batched_tokens = 512;
    assert_true(experiment_config_differ(&a, &b, field, sizeof field));
    assert_non_null(strstr(field, "sched.max_num_batched_tokens (16384 vs 512)"));
    b = a;
    snprintf(b.client.target, sizeof b.client.target, "http://127.0.0.1:9");
    assert_true(experiment_config_differ(&a, &b, field, sizeof field));
    assert_non_null(strstr(field, "client.target"));
    /* Shards of one experiment differ in their index alone. */
    a.wl.shard = (workload_shard){0, 4};
    snprintf(a.shard.start_at, sizeof a.shard.start_at, "2026-12-01T10:00:00Z");
    a.shard.start_at_ns = 1796119200000000000LL;
    b = a;
    b.wl.shard.index = 3;
    assert_false(experiment_config_differ(&a, &b, field, sizeof field));
    b.shard.start_at_ns += 1;
    snprintf(b.shard.start_at, sizeof b.shard.start_at, "2026-12-01T10:00:00.000000001Z");
    assert_true(experiment_config_differ(&a, &b, field, sizeof field));
    assert_non_null(strstr(field, "shard.start_at"));
    b = a;
    b.wl.shard.count = 2;
    assert_true(experiment_config_differ(&a, &b, field, sizeof field));
    assert_string_equal(field, "shard.count (4 vs 2)");
    b = a;
    b.wl.shard.count = 0; /* a shard against an unsharded run */
    assert_true(experiment_config_differ(&a, &b, field, sizeof field));
    assert_non_null(strstr(field, "shard"));
}

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

/* Issue 22, defect 10: --trace without --duration replays the whole trace (the run stopped
 * at 40 s); with --duration, that duration. */
static void test_trace_without_duration(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[128];
    scratch_file(path, sizeof path, "test_experiment", "t.jsonl",
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
        assert_int_equal(c.duration_from_trace, !given);
        assert_int_equal(experiment_resolve(&c, err), 0);
        assert_false(c.duration_from_trace);
        assert_int_equal(c.wl.until_trace_end, !given);
        assert_int_equal(c.wl.duration_ns, given ? 50 * CLOCK_NS_PER_S
                                                 : 75 * CLOCK_NS_PER_S + WORKLOAD_TRACE_TAIL_NS);
        assert_int_equal(experiment_check(&c, err), 0);
    }
    unlink(path);
}

static bool present(const char *dir, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static void touch(const char *dir, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
}

/* A run owns its directory: new or empty is taken, an earlier run needs --force, a stranger's
 * files are never removed. */
static void test_claim_dir(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", root[] = "/tmp/test_claim_XXXXXX", dir[128], sub[160];
    assert_non_null(mkdtemp(root));
    snprintf(dir, sizeof dir, "%s/out/run", root);
    assert_int_equal(experiment_claim_dir(dir, false, err), 0); /* absent: created */
    assert_true(present(dir, "."));
    assert_int_equal(experiment_claim_dir(dir, false, err), 0); /* empty: fine */
    snprintf(sub, sizeof sub, "%s/baseline", dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    touch(sub, "tokens.csv");
    snprintf(sub, sizeof sub, "%s/point-12", dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    touch(dir, "report.html");
    touch(dir, "comparison.json.tmp");
    assert_int_equal(experiment_claim_dir(dir, false, err), -1);
    assert_non_null(strstr(err, "already holds an earlier run"));
    assert_non_null(strstr(err, "--force"));
    assert_true(present(dir, "baseline/tokens.csv"));
    assert_int_equal(experiment_claim_dir(dir, true, err), 0);
    assert_false(present(dir, "baseline"));
    assert_false(present(dir, "point-12"));
    assert_false(present(dir, "report.html"));
    assert_false(present(dir, "comparison.json.tmp"));
    /* Someone's own file: refused, with or without --force, and nothing removed. */
    touch(dir, "report.html");
    touch(dir, "notes.txt");
    assert_int_equal(experiment_claim_dir(dir, true, err), -1);
    assert_non_null(strstr(err, "notes.txt"));
    assert_true(present(dir, "report.html"));
    touch(dir, "point-x");
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_round_trip), cmocka_unit_test(test_config_reader_refuses),
        cmocka_unit_test(test_secrets_never_written), cmocka_unit_test(test_server_command),
        cmocka_unit_test(test_option_tables),       cmocka_unit_test(test_connection_group),
        cmocka_unit_test(test_defaults_and_names),  cmocka_unit_test(test_run_pair),
        cmocka_unit_test(test_pair_incomplete),
        cmocka_unit_test(test_pair_failed),     cmocka_unit_test(test_sweep_plan),
        cmocka_unit_test(test_server_flags),        cmocka_unit_test(test_config_differ),
        cmocka_unit_test(test_client_threads_rule),
        cmocka_unit_test(test_trace_without_duration),
        cmocka_unit_test(test_claim_dir),           cmocka_unit_test(test_start_at),
        cmocka_unit_test(test_shard_options),       cmocka_unit_test(test_shard_schedule_and_clocks),
        cmocka_unit_test(test_shard_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
