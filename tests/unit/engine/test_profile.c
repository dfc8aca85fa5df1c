/* test_profile — the hardware profile file (engine/profile.h): version 2 written and read
 * back, version 1 still read, malformed profiles refused with the field named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "engine/profile.h"
#include "engine/sched.h"

static char dir[] = "/tmp/test_profile_XXXXXX";
static char path[256];

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, sizeof path, "%s/hw.json", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    rmdir(dir);
    return 0;
}

static void write_text(const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The profile calibrate writes: every term and rate read back. */
static void test_round_trip(void **state)
{
    (void)state;
    cost_gpu g;
    memset(&g, 0, sizeof g);
    snprintf(g.name, sizeof g.name, "cpu-1t");
    g.peak_flops = 9e10;
    g.attention_flops = 8e10;
    g.mem_bandwidth = 2e10;
    g.mem_bytes = 4e9;
    g.bytes_per_param = 4;
    g.kv_bytes_per_elem = 4;
    g.step_overhead_ns = 2890000;
    g.threads = 1;
    g.fit = (cost_step_fit){"small", 5e6, 0.25e6, 300, 0.1e6, 56, false};
    const fit_probe probes[2] = {{32, 16384, 0, 18e6}, {1, 0, 8000, 2.6e9}};
    const double residual[2] = {0.01, -0.02};
    fit_result fr;
    memset(&fr, 0, sizeof fr);
    fr.fit = g.fit;
    fr.decode_rms = 0.01;
    profile_info info = {.version = PROFILE_VERSION};
    snprintf(info.source, sizeof info.source, "%s", PROFILE_SOURCE_CPU);
    json_t *root = profile_to_json(&g, &info, &fr, probes, residual, 2);
    assert_non_null(root);
    assert_int_equal(json_dump_file(root, path, JSON_INDENT(2)), 0);
    json_decref(root);

    cost_gpu back;
    profile_info bi;
    char err[ERR_LEN] = "";
    assert_int_equal(profile_read(path, &back, &bi, err), 0);
    assert_int_equal(bi.version, 2);
    assert_string_equal(bi.source, "cpu-engine");
    assert_string_equal(back.name, "cpu-1t");
    assert_true(back.peak_flops == 9e10 && back.attention_flops == 8e10);
    assert_true(back.mem_bandwidth == 2e10 && back.mem_bytes == 4e9);
    assert_int_equal(back.step_overhead_ns, 2890000);
    assert_int_equal(back.threads, 1);
    assert_string_equal(back.fit.model, "small");
    assert_true(back.fit.step_ns == 5e6 && back.fit.seq_ns == 0.25e6 && back.fit.ctx_ns == 300 &&
                back.fit.token_ns == 0.1e6 && back.fit.pair_ns == 56);
    /* through the cost model's reader too */
    assert_int_equal(cost_gpu_from_profile(path, &back, err), 0);
    assert_string_equal(back.fit.model, "small");
}

/* A profile written before issue 16: rates only, read as a roofline device. */
static void test_version1(void **state)
{
    (void)state;
    write_text("{\"name\": \"cpu-1t\", \"kind\": \"cpu\", \"peak_flops\": 9e10, "
               "\"attention_flops\": 8e10, \"mem_bandwidth\": 2e10, \"mem_bytes\": 4e9, "
               "\"bytes_per_param\": 4, \"kv_bytes_per_elem\": 4, \"step_overhead_ns\": 2890000, "
               "\"threads\": 1, \"source\": \"stallscope calibrate\", \"measured\": {}}");
    cost_gpu g;
    profile_info info;
    char err[ERR_LEN] = "";
    assert_int_equal(profile_read(path, &g, &info, err), 0);
    assert_int_equal(info.version, 1);
    assert_string_equal(g.fit.model, "");
    assert_int_equal(g.step_overhead_ns, 2890000);
}

/* A server's profile (calibrate --target): the step model alone, plus memory. */
static void test_target(void **state)
{
    (void)state;
    write_text("{\"format\": \"stallscope-hardware-profile\", \"version\": 2, \"name\": \"vllm\", "
               "\"source\": \"target\", \"target\": \"http://gpu:8000\", \"mem_bytes\": 8e10, "
               "\"step_model\": {\"model\": \"llama-3.1-8b\", \"step_ns\": 4e6, \"seq_ns\": 3e4, "
               "\"ctx_ns\": 1, \"token_ns\": 1.6e4, \"pair_ns\": 0.002}}");
    cost_gpu g;
    profile_info info;
    char err[ERR_LEN] = "";
    assert_int_equal(profile_read(path, &g, &info, err), 0);
    assert_string_equal(info.source, "target");
    assert_string_equal(info.target, "http://gpu:8000");
    assert_true(g.peak_flops == 0);
    assert_string_equal(g.fit.model, "llama-3.1-8b");
    assert_int_equal(info.prefix_caching, -1); /* absent (before issue 24): unknown */

    /* calibrate --target's prefix-caching detection: true, false, null; anything else refused */
    static const char *const values[] = {"true", "false", "null", "\"yes\""};
    static const int want[] = {1, 0, -1, 99};
    for (int i = 0; i < 4; i++) {
        char text[512];
        snprintf(text, sizeof text, "{\"format\": \"stallscope-hardware-profile\", \"version\": 2, "
                 "\"source\": \"target\", \"mem_bytes\": 8e10, \"prefix_caching\": %s, "
                 "\"step_model\": {\"model\": \"llama-3.1-8b\", \"step_ns\": 4e6, \"seq_ns\": 3e4, "
                 "\"ctx_ns\": 1, \"token_ns\": 1.6e4, \"pair_ns\": 0.002}}", values[i]);
        write_text(text);
        if (want[i] == 99) {
            assert_int_equal(profile_read(path, &g, &info, err), -1);
            assert_non_null(strstr(err, "\"prefix_caching\" must be true, false or null"));
        } else {
            assert_int_equal(profile_read(path, &g, &info, err), 0);
            assert_int_equal(info.prefix_caching, want[i]);
        }
    }

    /* calibrate --target's KV layout: "paged", "unified" (with its slots), null; a unified
     * profile written and read back keeps both; a bad layout or slot count is refused */
    assert_int_equal(info.kv_layout, -1);
    static const struct {
        const char *extra;
        int layout, slots;
        const char *refused;
    } layouts[] = {
        {"\"kv_layout\": \"paged\"", SCHED_KV_PAGED, 0, NULL},
        {"\"kv_layout\": \"unified\", \"slots\": 33", SCHED_KV_UNIFIED, 33, NULL},
        {"\"kv_layout\": null", -1, 0, NULL},
        {"\"kv_layout\": \"radix\"", 0, 0, "\"kv_layout\" must be"},
        {"\"kv_layout\": \"unified\", \"slots\": 0", 0, 0, "\"slots\" must be"},
    };
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "{\"format\": \"stallscope-hardware-profile\", \"version\": 2, "
                 "\"source\": \"target\", \"mem_bytes\": 8e10, %s, "
                 "\"step_model\": {\"model\": \"llama-3.1-8b\", \"step_ns\": 4e6, \"seq_ns\": 3e4, "
                 "\"ctx_ns\": 1, \"token_ns\": 1.6e4, \"pair_ns\": 0.002}}", layouts[i].extra);
        write_text(text);
        if (layouts[i].refused) {
            assert_int_equal(profile_read(path, &g, &info, err), -1);
            assert_non_null(strstr(err, layouts[i].refused));
            continue;
        }
        assert_int_equal(profile_read(path, &g, &info, err), 0);
        assert_int_equal(info.kv_layout, layouts[i].layout);
        assert_int_equal(info.slots, layouts[i].slots);
        json_t *back = profile_to_json(&g, &info, NULL, NULL, NULL, 0);
        assert_non_null(back);
        const json_t *kl = json_object_get(back, "kv_layout");
        if (layouts[i].layout < 0)
            assert_true(json_is_null(kl));
        else
            assert_string_equal(json_string_value(kl),
                                sched_kv_layout_name((sched_kv_layout)layouts[i].layout));
        assert_int_equal(json_integer_value(json_object_get(back, "slots")), layouts[i].slots);
        json_decref(back);
    }
}

/* Each malformed profile is refused, and the reason names what is wrong. */
static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *reason;
    } cases[] = {
        {"[1, 2]", "not a JSON object"},
        {"{\"version\": 2", "hw.json:"},
        {"{\"format\": \"something-else\", \"version\": 2}", "not a hardware profile"},
        {"{\"version\": 3, \"source\": \"cpu-engine\"}", "newer"},
        {"{\"version\": \"2\"}", "\"version\""},
        {"{\"version\": 2, \"source\": \"moon\"}", "\"source\""},
        {"{\"version\": 2, \"source\": \"target\", \"mem_bytes\": 1e9}", "step_model"},
        {"{\"version\": 2, \"source\": \"cpu-engine\", \"peak_flops\": 1, \"mem_bandwidth\": 1, "
         "\"mem_bytes\": 1, \"step_model\": []}", "step_model must be an object"},
        {"{\"version\": 2, \"source\": \"cpu-engine\", \"peak_flops\": 1, \"mem_bandwidth\": 1, "
         "\"mem_bytes\": 1, \"step_model\": {\"step_ns\": 1, \"seq_ns\": 1, \"ctx_ns\": 1, "
         "\"token_ns\": 1, \"pair_ns\": 1}}", "step_model.model"},
        {"{\"version\": 2, \"source\": \"cpu-engine\", \"peak_flops\": 1, \"mem_bandwidth\": 1, "
         "\"mem_bytes\": 1, \"step_model\": {\"model\": \"small\", \"step_ns\": 1, \"seq_ns\": "
         "\"fast\", \"ctx_ns\": 1, \"token_ns\": 1, \"pair_ns\": 1}}", "step_model.seq_ns"},
        {"{\"version\": 2, \"source\": \"cpu-engine\", \"peak_flops\": 1, \"mem_bandwidth\": 1, "
         "\"mem_bytes\": 1, \"step_model\": {\"model\": \"small\", \"step_ns\": 1, \"seq_ns\": 1, "
         "\"ctx_ns\": -3, \"token_ns\": 1, \"pair_ns\": 1}}", "step_model.ctx_ns"},
        {"{\"version\": 2, \"source\": \"cpu-engine\", \"peak_flops\": 1, \"mem_bandwidth\": 1, "
         "\"mem_bytes\": 1, \"step_model\": {\"model\": \"small\", \"step_ns\": 1, \"seq_ns\": 1, "
         "\"ctx_ns\": 1, \"token_ns\": 1}}", "step_model.pair_ns"},
        {"{\"version\": 2, \"source\": \"cpu-engine\", \"peak_flops\": 1, \"mem_bandwidth\": 1, "
         "\"mem_bytes\": 1, \"step_model\": {\"model\": \"small\", \"step_ns\": 1e12, \"seq_ns\": 1, "
         "\"ctx_ns\": 1, \"token_ns\": 1, \"pair_ns\": 1}}", "step_model.step_ns"},
        {"{\"version\": 2, \"source\": \"cpu-engine\", \"peak_flops\": 1, \"mem_bandwidth\": 1, "
         "\"mem_bytes\": 1, \"step_model\": {\"model\": \"small\", \"step_ns\": 0, \"seq_ns\": 0, "
         "\"ctx_ns\": 1, \"token_ns\": 1, \"pair_ns\": 1}}", "no time"},
        {"{\"version\": 2, \"source\": \"cpu-engine\", \"mem_bandwidth\": 1, \"mem_bytes\": 1}",
         "peak_flops"},
        {"{\"peak_flops\": 1e11}", "mem_bandwidth"},
        {"{\"peak_flops\": 1e11, \"mem_bandwidth\": 1e10, \"mem_bytes\": -4}", "mem_bytes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(cases[i].text);
        cost_gpu g;
        char err[ERR_LEN] = "";
        if (profile_read(path, &g, NULL, err) != -1 || !strstr(err, cases[i].reason)) {
            print_error("case %zu (%s): err \"%s\", expected a refusal naming \"%s\"\n", i,
                        cases[i].text, err, cases[i].reason);
            fail();
        }
    }
    char err[ERR_LEN] = "";
    cost_gpu g;
    assert_int_equal(profile_read("/nonexistent/hw.json", &g, NULL, err), -1);
    assert_non_null(strstr(err, "/nonexistent/hw.json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_version1),
        cmocka_unit_test(test_target),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
