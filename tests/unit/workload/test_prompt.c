/* prompt: a request's prompt as segments (prompt.c): a conversation's turns resend the
 * history token for token, the system prompt is the same for every user, Mooncake rows with
 * common hash_ids share their blocks, and prompts without shared content keep the unique ids
 * they always had. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/rng.h"
#include "workload/workload.h"

#include "scratch_file.h"

#define VOCAB 128256

/* The ids of p, malloc'ed. */
static int32_t *ids_of(const workload_config *cfg, const workload_prompt *p)
{
    int32_t *ids = malloc((size_t)(p->tokens > 0 ? p->tokens : 1) * sizeof *ids);
    assert_non_null(ids);
    workload_prompt_fill(cfg, p, 0, ids, VOCAB);
    return ids;
}

static void plan_of(const workload_config *cfg, workload_plan *plan)
{
    char err[ERR_LEN];
    if (workload_plan_build(cfg, plan, err) != 0)
        fail_msg("%s", err);
}

/* Turn 2 = turn 1's prompt, turn 1's answer, a new message; turn 3 extends turn 2 the same. */
static void test_turns_resend_history(void **state)
{
    (void)state;
    workload_config cfg;
    workload_default(&cfg);
    cfg.turns = 3;
    cfg.system_prompt_tokens = 40;
    workload_plan plan;
    plan_of(&cfg, &plan);
    workload_conv conv = {0};
    workload_prompt p = {0};
    workload_bg_request r[4];
    int32_t *ids[4];
    for (int k = 0; k < 4; k++) {
        assert_int_equal(workload_conv_next(&plan, &cfg, &conv, 5, k, &r[k], &p), 0);
        assert_int_equal(r[k].prompt_tokens, (int)p.tokens);
        ids[k] = ids_of(&cfg, &p);
    }
    for (int k = 0; k < 3; k++) {
        const workload_bg_request draw = workload_plan_bg(&plan, &cfg, 5, k);
        assert_int_equal(r[k].max_tokens, draw.max_tokens);
        if (k < 2) { /* the next turn: this prompt, this answer, then its own message */
            assert_int_equal(r[k + 1].prompt_tokens,
                             r[k].prompt_tokens + r[k].max_tokens +
                                 workload_plan_bg(&plan, &cfg, 5, k + 1).prompt_tokens);
            assert_memory_equal(ids[k + 1], ids[k], (size_t)r[k].prompt_tokens * sizeof(int32_t));
        }
    }
    /* The 4th request starts a new conversation: the system prompt, then a new message. */
    assert_int_equal(r[3].prompt_tokens, 40 + workload_plan_bg(&plan, &cfg, 5, 3).prompt_tokens);
    assert_memory_equal(ids[3], ids[0], 40 * sizeof(int32_t));
    assert_memory_not_equal(ids[3] + 40, ids[0] + 40, 16 * sizeof(int32_t));
    for (int k = 0; k < 4; k++)
        free(ids[k]);
    workload_conv_free(&conv);
    workload_prompt_free(&p);
    workload_plan_free(&plan);
}

/* A conversation ends before a turn that would not fit max_context. */
static void test_turns_bounded_by_context(void **state)
{
    (void)state;
    workload_config cfg;
    workload_default(&cfg);
    cfg.turns = 100;
    cfg.prompt_len = (workload_dist){.kind = WORKLOAD_DIST_FIXED, .a = 100, .b = 100};
    cfg.answer_len = (workload_dist){.kind = WORKLOAD_DIST_FIXED, .a = 200, .b = 200};
    cfg.max_context = 1000;
    workload_plan plan;
    plan_of(&cfg, &plan);
    workload_conv conv = {0};
    workload_prompt p = {0};
    workload_bg_request r;
    /* 300 tokens a turn: turns of 100, 400, 700 prompt tokens (+200 answer <= 1000), then
     * a new conversation. */
    const int want[] = {100, 400, 700, 100, 400};
    for (int k = 0; k < 5; k++) {
        assert_int_equal(workload_conv_next(&plan, &cfg, &conv, 0, k, &r, &p), 0);
        assert_int_equal(r.prompt_tokens, want[k]);
        assert_true(r.prompt_tokens + r.max_tokens <= cfg.max_context);
    }
    assert_int_equal(conv.conversation, 1);
    /* a one-step prefill's budget bounds the prompt alone: 100, 400, then anew */
    cfg.max_prompt = 500;
    workload_conv_free(&conv);
    memset(&conv, 0, sizeof conv);
    const int want_budget[] = {100, 400, 100};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(workload_conv_next(&plan, &cfg, &conv, 0, k, &r, &p), 0);
        assert_int_equal(r.prompt_tokens, want_budget[k]);
    }
    workload_conv_free(&conv);
    workload_prompt_free(&p);
    workload_plan_free(&plan);
}

/* Every user's prompt starts with the same system prompt; what follows is its own. */
static void test_system_prompt_shared(void **state)
{
    (void)state;
    workload_config cfg;
    workload_default(&cfg);
    cfg.system_prompt_tokens = 300;
    workload_plan plan;
    plan_of(&cfg, &plan);
    workload_conv c0 = {0}, c1 = {0};
    workload_prompt p = {0};
    workload_bg_request r0, r1;
    assert_int_equal(workload_conv_next(&plan, &cfg, &c0, 0, 0, &r0, &p), 0);
    int32_t *a = ids_of(&cfg, &p);
    assert_int_equal(workload_conv_next(&plan, &cfg, &c1, 1, 0, &r1, &p), 0);
    int32_t *b = ids_of(&cfg, &p);
    assert_int_equal(r0.prompt_tokens, 300 + workload_plan_bg(&plan, &cfg, 0, 0).prompt_tokens);
    assert_memory_equal(a, b, 300 * sizeof(int32_t));
    assert_memory_not_equal(a + 300, b + 300, 16 * sizeof(int32_t));
    /* open-loop arrivals start with it too (a rate's) */
    free(a);
    free(b);
    workload_conv_free(&c0);
    workload_conv_free(&c1);
    workload_prompt_free(&p);
    workload_plan_free(&plan);
}

/* Without shared content a closed user's prompt is one unique segment: the ids it always had
 * (the index (user << 24) | k of the unique stream). */
static void test_unshared_prompt_unchanged(void **state)
{
    (void)state;
    workload_config cfg;
    workload_default(&cfg);
    workload_plan plan;
    plan_of(&cfg, &plan);
    workload_conv conv = {0};
    workload_prompt p = {0};
    workload_bg_request r;
    assert_int_equal(workload_conv_next(&plan, &cfg, &conv, 3, 7, &r, &p), 0);
    assert_int_equal(p.n_segs, 1);
    assert_false(workload_prompt_shared(&p));
    assert_int_equal(r.prompt_tokens, workload_plan_bg(&plan, &cfg, 3, 7).prompt_tokens);
    int32_t *got = ids_of(&cfg, &p);
    uint64_t st = rng_hash3(cfg.seed, 0xb9, (3ULL << 24) | 7);
    for (int i = 0; i < r.prompt_tokens; i++)
        assert_int_equal(got[i], (int32_t)rng_range(&st, 100, VOCAB - 1));
    free(got);
    workload_conv_free(&conv);
    workload_prompt_free(&p);
    workload_plan_free(&plan);
}

/* Mooncake: rows sharing hash_ids share those 512-token blocks; a last partial block and the
 * rest are the row's own; a row without hash_ids is one unique segment, as before. */
static void test_mooncake_hash_ids(void **state)
{
    (void)state;
    char path[256], err[ERR_LEN];
    scratch_file(path, sizeof path, "test_prompt", "mooncake.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 1300, \"output_length\": 5, "
                 "\"hash_ids\": [11, 12, 13]}\n"
                 "{\"timestamp\": 10, \"input_length\": 1100, \"output_length\": 5, "
                 "\"hash_ids\": [11, 12, 99]}\n"
                 "{\"timestamp\": 20, \"input_length\": 600, \"output_length\": 5}\n");
    workload_config cfg;
    workload_default(&cfg);
    cfg.users = 0;
    cfg.no_inject = true;
    snprintf(cfg.trace, sizeof cfg.trace, "%s", path);
    workload_plan plan;
    plan_of(&cfg, &plan);
    assert_int_equal(plan.n_arrivals, 3);
    workload_prompt p = {0};
    int32_t *ids[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(workload_arrival_prompt(&plan, &cfg, i, &p), 0);
        assert_int_equal(p.tokens, plan.arrivals[i].prompt_tokens);
        ids[i] = ids_of(&cfg, &p);
        if (i == 2) {
            assert_int_equal(p.n_segs, 1);
            assert_false(workload_prompt_shared(&p));
        }
    }
    /* rows 0 and 1: blocks 11 and 12 alike (1024 tokens), then their own */
    assert_memory_equal(ids[0], ids[1], 1024 * sizeof(int32_t));
    assert_memory_not_equal(ids[0] + 1024, ids[1] + 1024, 16 * sizeof(int32_t));
    for (int i = 0; i < 3; i++)
        free(ids[i]);
    workload_prompt_free(&p);
    workload_plan_free(&plan);
    /* more than TRACE_MAX_HASH_IDS ids, or a non-integer, is a bad row */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [");
    for (int i = 0; i <= TRACE_MAX_HASH_IDS; i++)
        fprintf(f, "%s%d", i ? "," : "", i);
    fprintf(f, "]}\n");
    fclose(f);
    assert_int_equal(workload_plan_build(&cfg, &plan, err), -1);
    assert_non_null(strstr(err, "hash_ids"));
    scratch_file(path, sizeof path, "test_prompt", "mooncake.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, "
                 "\"hash_ids\": [1, \"x\"]}\n");
    assert_int_equal(workload_plan_build(&cfg, &plan, err), -1);
    assert_non_null(strstr(err, "hash_ids"));
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_turns_resend_history),
        cmocka_unit_test(test_turns_bounded_by_context),
        cmocka_unit_test(test_system_prompt_shared),
        cmocka_unit_test(test_unshared_prompt_unchanged),
        cmocka_unit_test(test_mooncake_hash_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
