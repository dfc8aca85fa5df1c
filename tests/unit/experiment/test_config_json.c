/* experiment/config_json: config.json written and read back equal, every field; what the
 * reader refuses; secrets kept out of it; and when two runs' configurations are one
 * experiment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/opts.h"
#include "engine/cost.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/options.h"

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
    c->sched.kv_layout = SCHED_KV_UNIFIED;
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
    char dir[] = "/tmp/test_config_json_XXXXXX", path[128];
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
        {"sched", "kv_layout", "\"radix\"", "sched.kv_layout: not a KV layout"},
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_round_trip),
        cmocka_unit_test(test_config_reader_refuses),
        cmocka_unit_test(test_secrets_never_written),
        cmocka_unit_test(test_config_differ),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
