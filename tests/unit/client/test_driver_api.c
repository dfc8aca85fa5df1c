/* client/driver_api: how a request is made: the bodies (endpoint, prompts of exact
 * lengths) and the token-id / text probe. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "client/driver.h"
#include "client/driver_api.h"
#include "common/clock.h"
#include "common/err.h"
#include "workload/workload.h"

#include "scripted_transport.h"

static void test_body(void **state)
{
    (void)state;
    workload_config wl;
    small_workload(&wl);
    driver_api api;
    driver_api_defaults(&api);
    api.token_ids = true;
    snprintf(api.model, sizeof api.model, "m");
    api.timestamps = true;
    char err[ERR_LEN];
    size_t len;
    char *a = driver_build_body(&api, &wl, 1, 1, 0, 8000, 16, -1, &len, err);
    char *b = driver_build_body(&api, &wl, 1, 1, 1, 8000, 16, -1, &len, err);
    char *c = driver_build_body(&api, &wl, 0, 1, 0, 8000, 16, -1, &len, err);
    assert_non_null(a);
    json_t *root = json_loads(a, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(root, "prompt")), 8000);
    assert_string_equal(json_string_value(json_object_get(root, "model")), "m");
    assert_true(json_is_true(json_object_get(root, "stream")));
    assert_true(json_is_true(json_object_get(root, "ignore_eos")));
    assert_int_equal(json_integer_value(json_object_get(root, "max_tokens")), 16);
    json_t *so = json_object_get(root, "stream_options");
    assert_true(json_is_true(json_object_get(so, "include_usage")));
    assert_true(json_is_true(json_object_get(so, "continuous_usage_stats")));
    assert_true(json_is_true(json_object_get(json_object_get(root, "stallscope"), "timestamps")));
    json_decref(root);
    /* Unique per injection and per phase: no shared prefix for a cache to find. */
    assert_int_not_equal(strncmp(a, b, 80), 0);
    assert_int_not_equal(strncmp(a, c, 80), 0);
    free(a), free(b), free(c);

    /* --extra-body: its members over ours (a model of the user's, sampling settings), the
     * rest of the body as before. */
    api.extra_body = "{\"temperature\":0.5,\"model\":\"other\",\"chat_template_kwargs\":{\"x\":1}}";
    a = driver_build_body(&api, &wl, 1, 1, 0, 8000, 16, -1, &len, err);
    assert_non_null(a);
    root = json_loads(a, 0, NULL);
    assert_true(json_real_value(json_object_get(root, "temperature")) == 0.5);
    assert_string_equal(json_string_value(json_object_get(root, "model")), "other");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(root, "chat_template_kwargs"), "x")), 1);
    assert_int_equal(json_array_size(json_object_get(root, "prompt")), 8000);
    assert_int_equal(json_integer_value(json_object_get(root, "max_tokens")), 16);
    json_decref(root);
    free(a);
    api.extra_body = NULL;

    api.token_ids = false;
    api.endpoint = DRIVER_CHAT;
    api.timestamps = false;
    api.text_overhead = 10;
    api.text_per_word = 2;
    a = driver_build_body(&api, &wl, 1, 0, 0, 110, 16, -1, &len, err);
    root = json_loads(a, 0, NULL);
    json_t *msg = json_array_get(json_object_get(root, "messages"), 0);
    const char *text = json_string_value(json_object_get(msg, "content"));
    int words = 1;
    for (const char *p = text; *p; p++)
        words += *p == ' ';
    assert_int_equal(words, 50); /* (110 - 10) / 2 */
    assert_null(json_object_get(root, "stallscope"));
    json_decref(root);
    free(a);

    /* The embedded server's sched log names the request by the id given (alone, or beside
     * the timestamps); no id, or a server that is not ours: no "request". */
    api.request_ids = true;
    for (int stamps = 0; stamps < 2; stamps++) {
        api.timestamps = stamps;
        a = driver_build_body(&api, &wl, 1, 0, 0, 110, 16, 42, &len, err);
        root = json_loads(a, 0, NULL);
        json_t *ours = json_object_get(root, "stallscope");
        assert_int_equal(json_integer_value(json_object_get(ours, "request")), 42);
        assert_int_equal(json_is_true(json_object_get(ours, "timestamps")), stamps);
        json_decref(root);
        free(a);
    }
    a = driver_build_body_text(&api, "hi", 2, 16, 43, &len, err);
    root = json_loads(a, 0, NULL);
    json_t *ours = json_object_get(root, "stallscope");
    assert_int_equal(json_integer_value(json_object_get(ours, "request")), 43);
    json_decref(root);
    free(a);
    api.timestamps = false;
    a = driver_build_body(&api, &wl, 1, 0, 0, 110, 16, -1, &len, err);
    root = json_loads(a, 0, NULL);
    assert_null(json_object_get(root, "stallscope"));
    json_decref(root);
    free(a);
    api.request_ids = false;
    a = driver_build_body(&api, &wl, 1, 0, 0, 110, 16, 42, &len, err);
    root = json_loads(a, 0, NULL);
    assert_null(json_object_get(root, "stallscope"));
    json_decref(root);
    free(a);
}

/* A conversation's bodies: turn 2's prompt starts with turn 1's whole prompt, id for id, and
 * as text word for word; a salt (another run) shares nothing with it. */
static void test_body_shares_prefixes(void **state)
{
    (void)state;
    workload_config wl;
    small_workload(&wl);
    wl.turns = 3;
    wl.system_prompt_tokens = 50;
    workload_plan plan;
    char err[ERR_LEN];
    if (workload_plan_build(&wl, &plan, err) != 0)
        fail_msg("%s", err);
    driver_api api;
    driver_api_defaults(&api);
    api.token_ids = true;
    workload_conv conv = {0};
    workload_prompt p = {0};
    workload_bg_request r1, r2;
    size_t len;
    assert_int_equal(workload_conv_next(&plan, &wl, &conv, 0, 0, &r1, &p), 0);
    char *a = driver_build_body_prompt(&api, &wl, 1, &p, r1.max_tokens, -1, &len, err);
    char *a_other_run = driver_build_body_prompt(&api, &wl, 2, &p, r1.max_tokens, -1, &len, err);
    assert_int_equal(workload_conv_next(&plan, &wl, &conv, 0, 1, &r2, &p), 0);
    char *b = driver_build_body_prompt(&api, &wl, 1, &p, r2.max_tokens, -1, &len, err);
    json_t *ra = json_loads(a, 0, NULL), *rb = json_loads(b, 0, NULL),
           *ro = json_loads(a_other_run, 0, NULL);
    json_t *ja = json_object_get(ra, "prompt"), *jb = json_object_get(rb, "prompt"),
           *jo = json_object_get(ro, "prompt");
    assert_int_equal(json_array_size(ja), r1.prompt_tokens);
    assert_int_equal(json_array_size(jb), r2.prompt_tokens);
    for (size_t i = 0; i < json_array_size(ja); i++)
        assert_int_equal(json_integer_value(json_array_get(ja, i)),
                         json_integer_value(json_array_get(jb, i)));
    assert_int_not_equal(json_integer_value(json_array_get(ja, 0)),
                         json_integer_value(json_array_get(jo, 0)));
    json_decref(ra), json_decref(rb), json_decref(ro);
    free(a), free(b), free(a_other_run);
    /* as text: turn 1's words begin turn 2's */
    api.token_ids = false;
    api.text_per_word = 1.3;
    workload_prompt_free(&p);
    workload_conv_free(&conv);
    memset(&conv, 0, sizeof conv);
    assert_int_equal(workload_conv_next(&plan, &wl, &conv, 0, 0, &r1, &p), 0);
    a = driver_build_body_prompt(&api, &wl, 1, &p, r1.max_tokens, -1, &len, err);
    assert_int_equal(workload_conv_next(&plan, &wl, &conv, 0, 1, &r2, &p), 0);
    b = driver_build_body_prompt(&api, &wl, 1, &p, r2.max_tokens, -1, &len, err);
    const char *ta = strstr(a, "\"prompt\":\""), *tb = strstr(b, "\"prompt\":\"");
    assert_non_null(ta);
    assert_non_null(tb);
    const size_t n = (size_t)(strchr(ta + 10, '"') - ta);
    assert_true(n > 100);
    assert_memory_equal(ta, tb, n);
    assert_int_equal(tb[n], ' '); /* turn 2 goes on with the answer's words */
    free(a), free(b);
    workload_prompt_free(&p);
    workload_conv_free(&conv);
    workload_plan_free(&plan);
}

static void test_probe(void **state)
{
    (void)state;
    fake *f = fake_new();
    transport t = fake_transport(f);
    workload_config wl;
    small_workload(&wl);
    driver_api api;
    driver_api_defaults(&api);
    char err[ERR_LEN];
    assert_int_equal(driver_probe(&t, &api, &wl, CLOCK_NS_PER_S, NULL, err), 0);
    assert_true(api.token_ids);

    memset(f, 0, sizeof *f);
    f->retry_after_ns = -1;
    f->refuse_ids = true;
    f->text_usage = true;
    driver_api_defaults(&api);
    assert_int_equal(driver_probe(&t, &api, &wl, CLOCK_NS_PER_S, NULL, err), 0);
    assert_false(api.token_ids);
    assert_true(api.text_calibrated);
    assert_true(api.text_per_word > 1.49 && api.text_per_word < 1.51);
    assert_true(api.text_overhead > 1.5 && api.text_overhead < 4.5);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_body),
        cmocka_unit_test(test_body_shares_prefixes),
        cmocka_unit_test(test_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
