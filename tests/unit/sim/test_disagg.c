/* test_disagg — prefill/decode disaggregation in the simulator (sim.h, "Disaggregated
 * prefill"): the P:D and --kv-link parsers, the scheduler's prefilled admission, an
 * injection's TTFT worked out to the ns from the cost model (its prefill step + its KV over
 * the link), and the lesson: with 1P:1D the 8k prompt's step no longer reaches any
 * background user, while one instance of the same run stalls every one of them.
 *
 * The made-up model is test_sim.c's ("toy" on "toy-gpu"): its KV is 2 layers x (K + V) x
 * 1 KV head x head_dim 2 x 2 bytes = 16 bytes a token. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/tokenlog.h"
#include "engine/cost.h"
#include "engine/sched.h"
#include "sim/sim.h"
#include "workload/workload.h"

#include "toy_cost.h"

/* No background user; one injection of 32 tokens at 10,000 ns with a 4-token answer;
 * 1P:1D over a 1 GB/s link (no latency); mixed, budget 64. */
static sim_config lone_injection(void)
{
    sim_config c = toy_config();
    c.wl.users = 0;
    c.wl.duration_ns = 1000000;
    c.wl.inject = true;
    c.wl.inject_at_ns = 10000;
    c.wl.inject_every_ns = c.wl.duration_ns;
    c.wl.prompt_tokens = 32;
    c.wl.inject_max_tokens = 4;
    char err[ERR_LEN];
    if (sim_disagg_parse("1:1", &c.disagg, err) != 0 ||
        sim_kv_link_parse("1GB/s", &c.disagg, err) != 0)
        fail_msg("%s", err);
    return c;
}

static const tokenlog_request *injection_row(const tokenlog *log)
{
    for (int64_t r = 0; r < log->n_requests; r++)
        if (log->requests[r].kind == TOKENLOG_INJECT)
            return &log->requests[r];
    fail_msg("no injection in the log");
    return NULL;
}

static void test_parse(void **state)
{
    (void)state;
    char err[ERR_LEN];
    sim_disagg d;
    memset(&d, 0, sizeof d);
    static const char *const bad[] = {"0:1", "1:0", "x", "1", "1:", ":1", "1:1x", "1:-1", "+1:1",
                                      " 1:1", "65:1", "1:65", "a:b", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (sim_disagg_parse(bad[i], &d, err) != -1)
            fail_msg("--disaggregate '%s' was accepted", bad[i]);
        assert_true(err[0] != '\0');
    }
    assert_int_equal(sim_disagg_parse(NULL, &d, err), -1);
    assert_int_equal(sim_disagg_parse("2:3", &d, err), 0);
    assert_int_equal(d.prefill, 2);
    assert_int_equal(d.decode, 3);
    assert_int_equal(sim_disagg_gpus(&d), 5);

    /* Links: the catalog's one-way figures, the number form, and what is refused. */
    assert_int_equal(sim_kv_link_parse("nvlink", &d, err), 0);
    assert_true(d.link_bytes_per_s == 450e9);
    assert_int_equal(sim_kv_link_parse("pcie5", &d, err), 0);
    assert_true(d.link_bytes_per_s == 64e9);
    assert_int_equal(sim_kv_link_parse("rdma-100g", &d, err), 0);
    assert_true(d.link_bytes_per_s == 12.5e9);
    assert_int_equal(sim_kv_link_parse("rdma-400g", &d, err), 0);
    assert_true(d.link_bytes_per_s == 50e9);
    assert_int_equal(sim_kv_link_parse("25GB/s", &d, err), 0);
    assert_true(d.link_bytes_per_s == 25e9);
    assert_int_equal(d.link_latency_ns, 0);
    assert_string_equal(d.link, "25GB/s");
    char what[96];
    sim_disagg_describe(&d, what, sizeof what);
    assert_string_equal(what, "disaggregated 2P:3D over 25GB/s");
    static const char *const bad_links[] = {"infiniband", "25Gb/s", "0GB/s", "-3GB/s", "GB/s",
                                            "25", "25 GB/s", ""};
    for (size_t i = 0; i < sizeof bad_links / sizeof bad_links[0]; i++) {
        err[0] = '\0';
        if (sim_kv_link_parse(bad_links[i], &d, err) != -1)
            fail_msg("--kv-link '%s' was accepted", bad_links[i]);
        assert_true(err[0] != '\0');
    }
    assert_int_equal(sim_kv_link_parse("infiniband", &d, err), -1);
    assert_non_null(strstr(err, "nvlink, pcie5, rdma-100g, rdma-400g"));

    /* Not disaggregated: one GPU, no words. */
    memset(&d, 0, sizeof d);
    assert_int_equal(sim_disagg_gpus(&d), 1);
    sim_disagg_describe(&d, what, sizeof what);
    assert_string_equal(what, "");
    assert_int_equal(sim_disagg_check(&d, err), 0);
}

/* A prefilled request waits with its prompt in KV and decodes at once: one token fed over
 * the prompt, counted as a decode; it needs max_tokens >= 2 and ignores the token budget. */
static void test_sched_prefilled(void **state)
{
    (void)state;
    char err[ERR_LEN];
    sched_config cfg = {.policy = SCHED_MIXED, .max_num_batched_tokens = 64, .max_num_seqs = 4,
                        .max_model_len = 1024, .block_size = 16, .kv_blocks = 64};
    sched *s = sched_create(&cfg, err);
    assert_non_null(s);
    sched_req one = {.id = 1, .prompt_tokens = 100, .max_tokens = 1};
    assert_int_equal(sched_add_prefilled(s, &one, err), -1);
    assert_non_null(strstr(err, "max_tokens >= 2"));
    sched_req r = {.id = 2, .prompt_tokens = 100, .max_tokens = 3}; /* over the budget of 64 */
    assert_int_equal(sched_add_prefilled(s, &r, err), 0);
    sched_batch b;
    assert_int_equal(sched_next(s, &b), 1);
    assert_int_equal(b.items[0].new_tokens, 1);
    assert_int_equal(b.items[0].context, 100);
    assert_true(b.items[0].samples);
    assert_int_equal(b.decode_tokens, 1);
    assert_int_equal(b.prefill_tokens, 0);
    assert_int_equal(sched_blocks_used(s), 7); /* 101 tokens */
    sched_commit(s, &b);
    assert_int_equal(r.generated, 2);
    assert_int_equal(sched_next(s, &b), 1);
    assert_int_equal(b.items[0].context, 101);
    sched_commit(s, &b);
    assert_int_equal(r.state, SCHED_FINISHED);
    assert_int_equal(sched_blocks_used(s), 0);
    sched_free(s);
}

/* Preempted on its decode instance, a prefilled request recomputes there like any other:
 * its prompt and the token it had, in chunks of the budget (the recompute is over it). */
static void test_sched_prefilled_preempted(void **state)
{
    (void)state;
    char err[ERR_LEN];
    sched_config cfg = {.policy = SCHED_MIXED, .max_num_batched_tokens = 64, .max_num_seqs = 4,
                        .max_model_len = 1024, .block_size = 16, .kv_blocks = 14};
    sched *s = sched_create(&cfg, err);
    assert_non_null(s);
    /* 101 tokens each: 7 blocks each, the whole cache; the 113th token needs an 8th. */
    sched_req a = {.id = 1, .prompt_tokens = 100, .max_tokens = 40};
    sched_req b = {.id = 2, .prompt_tokens = 100, .max_tokens = 40};
    assert_int_equal(sched_add_prefilled(s, &a, err), 0);
    assert_int_equal(sched_add_prefilled(s, &b, err), 0);
    sched_batch batch;
    int preempted = 0;
    for (int step = 0; step < 20 && !preempted; step++) {
        assert_true(sched_next(s, &batch) > 0);
        preempted = batch.n_preempted;
        sched_commit(s, &batch);
    }
    assert_int_equal(preempted, 1);
    assert_int_equal(b.state, SCHED_WAITING); /* the newest, the victim */
    assert_int_equal(b.computed, 0);
    const int known = b.prompt_tokens + b.generated;
    /* b recomputes in chunks of at most 64 and decodes to its end, as does a. */
    int recomputed = 0;
    for (int step = 0; step < 200 && b.state != SCHED_FINISHED; step++) {
        assert_true(sched_next(s, &batch) > 0);
        for (int i = 0; i < batch.n_items; i++)
            if (batch.items[i].req == &b && batch.items[i].new_tokens > 1) {
                assert_true(batch.items[i].new_tokens <= 64);
                recomputed += batch.items[i].new_tokens;
            }
        sched_commit(s, &batch);
    }
    assert_int_equal(a.state, SCHED_FINISHED);
    assert_int_equal(b.state, SCHED_FINISHED);
    assert_true(recomputed >= known); /* at least once whole (again if preempted again) */
    assert_int_equal(b.generated, 40);
    assert_int_equal(sched_blocks_used(s), 0);
    sched_free(s);
}

/* The injection alone: its prefill step on the prefill instance (10,000 -> 10,000 + P), its
 * 32 x 16 = 512 bytes over 1 GB/s (512 ns), its first token then; the decode instance's
 * steps give the other three, one decode step (1 token over 32, 33, 34 of context) apart. */
static void test_ttft_is_prefill_plus_transfer(void **state)
{
    (void)state;
    sim_config c = lone_injection();
    tokenlog log;
    sim_stats st;
    run_or_fail(&c, &log, &st);

    const int64_t prefill = cost_prefill_ns(&c.cost, 32, NULL);
    const int64_t transfer = (int64_t)(cost_kv_bytes_per_token(&c.cost) * 32 / 1e9 * 1e9 + 0.5);
    assert_int_equal(transfer, 512);
    assert_int_equal(sim_kv_transfer_ns(&c.disagg, &c.cost, 32), 512);
    const tokenlog_request *inj = injection_row(&log);
    assert_int_equal(inj->t_send_ns, 10000);
    assert_int_equal(inj->t_first_ns, 10000 + prefill + transfer);
    assert_int_equal(inj->completion_tokens, 4);

    /* The steps: one prefill step on the prefill instance, then three decode steps. */
    assert_int_equal(log.n_steps, 4);
    assert_int_equal(log.steps[0].t_start_ns, 10000);
    assert_int_equal(log.steps[0].t_end_ns, 10000 + prefill);
    assert_int_equal(log.steps[0].prefill_tokens, 32);
    assert_int_equal(log.steps[0].decode_tokens, 0);
    int64_t t = inj->t_first_ns;
    assert_int_equal(log.n_events, 4);
    assert_int_equal(log.events[0].t_ns, t);
    for (int k = 1; k < 4; k++) {
        const tokenlog_step *s = &log.steps[k];
        assert_int_equal(s->t_start_ns, t);
        assert_int_equal(s->decode_tokens, 1);
        assert_int_equal(s->prefill_tokens, 0);
        t += cost_decode_ns(&c.cost, 1, 32 + k - 1, NULL);
        assert_int_equal(s->t_end_ns, t);
        assert_int_equal(log.events[k].t_ns, t);
    }
    assert_int_equal(inj->t_end_ns, t);
    assert_int_equal(st.steps, 4);
    assert_int_equal(st.token_events, 4);
    tokenlog_free(&log);

    /* A faster link: a smaller TTFT, by exactly the transfer saved. */
    char err[ERR_LEN];
    assert_int_equal(sim_kv_link_parse("4GB/s", &c.disagg, err), 0);
    run_or_fail(&c, &log, &st);
    assert_int_equal(injection_row(&log)->t_first_ns, 10000 + prefill + 128);
    tokenlog_free(&log);
    /* A catalog link adds its per-transfer latency. */
    assert_int_equal(sim_kv_link_parse("nvlink", &c.disagg, err), 0);
    run_or_fail(&c, &log, &st);
    assert_int_equal(injection_row(&log)->t_first_ns,
                     10000 + prefill + 1 /* 512 B / 450 GB/s */ + c.disagg.link_latency_ns);
    tokenlog_free(&log);

    /* A one-token answer ends at its prefill: nothing to move. */
    c.wl.inject_max_tokens = 1;
    run_or_fail(&c, &log, &st);
    assert_int_equal(injection_row(&log)->t_first_ns, 10000 + prefill);
    assert_int_equal(injection_row(&log)->t_end_ns, 10000 + prefill);
    assert_int_equal(log.n_steps, 1);
    tokenlog_free(&log);
}

/* Collects what a sink is handed, to compare with the log. */
typedef struct collected {
    tokenlog log; /* events and steps appended; requests: the last row of each id */
} collected;

static int col_event(void *ctx, const tokenlog_event *ev, char *err)
{
    (void)err;
    return tokenlog_add_event(&((collected *)ctx)->log, ev);
}
static int col_request(void *ctx, const tokenlog_request *r, char *err)
{
    (void)err;
    tokenlog *log = &((collected *)ctx)->log;
    for (int64_t i = 0; i < log->n_requests; i++)
        if (log->requests[i].request == r->request) {
            log->requests[i] = *r;
            return 0;
        }
    int64_t index;
    return tokenlog_add_request(log, r, &index);
}
static int col_step(void *ctx, const tokenlog_step *s, char *err)
{
    (void)err;
    return tokenlog_add_step(&((collected *)ctx)->log, s);
}

/* Several users on 2P:2D: the sink and the log get the same rows in the same order, events
 * in time order, steps in start order; every finished answer has the length drawn; the
 * statistics agree with the log. */
static void test_sink_and_log_agree(void **state)
{
    (void)state;
    sim_config c = lone_injection();
    c.wl.users = 5;
    c.wl.duration_ns = 300000;
    c.wl.inject_every_ns = 100000;
    c.wl.prompt_len = (workload_dist){.kind = WORKLOAD_DIST_UNIFORM, .a = 4, .b = 24};
    c.wl.answer_len = (workload_dist){.kind = WORKLOAD_DIST_UNIFORM, .a = 2, .b = 30};
    char err[ERR_LEN];
    assert_int_equal(sim_disagg_parse("2:2", &c.disagg, err), 0);
    tokenlog log;
    sim_stats st;
    run_or_fail(&c, &log, &st);

    collected col;
    tokenlog_init(&col.log);
    tokenlog_sink sink = {.event = col_event, .request = col_request, .step = col_step,
                          .ctx = &col};
    sim_stats st2;
    if (sim_run_sink(&c, &sink, &st2, err) != 0)
        fail_msg("sim_run_sink: %s", err);
    assert_memory_equal(&st, &st2, sizeof st);
    assert_int_equal(col.log.n_events, log.n_events);
    assert_int_equal(col.log.n_steps, log.n_steps);
    assert_memory_equal(col.log.events, log.events, (size_t)log.n_events * sizeof *log.events);
    assert_memory_equal(col.log.steps, log.steps, (size_t)log.n_steps * sizeof *log.steps);
    assert_int_equal(st.token_events, log.n_events);
    assert_int_equal(st.steps, log.n_steps);
    assert_true(st.requests > 20);

    for (int64_t i = 1; i < log.n_events; i++)
        assert_true(log.events[i].t_ns >= log.events[i - 1].t_ns);
    for (int64_t i = 1; i < log.n_steps; i++)
        assert_true(log.steps[i].t_start_ns >= log.steps[i - 1].t_start_ns);
    /* An instance's steps never carry both kinds (no preemption here). */
    for (int64_t i = 0; i < log.n_steps; i++)
        assert_true(log.steps[i].decode_tokens == 0 || log.steps[i].prefill_tokens == 0);

    /* Every finished request: its answer's length, its events counted. */
    int64_t *events_of = calloc((size_t)log.n_requests, sizeof *events_of);
    assert_non_null(events_of);
    for (int64_t i = 0; i < log.n_events; i++)
        events_of[log.events[i].request]++;
    int64_t finished = 0;
    for (int64_t r = 0; r < log.n_requests; r++) {
        const tokenlog_request *row = &log.requests[r];
        assert_int_equal(row->request, r);
        assert_int_equal(row->completion_tokens, events_of[r]);
        if (row->t_end_ns < 0)
            continue;
        finished++;
        if (row->kind == TOKENLOG_INJECT)
            assert_int_equal(row->completion_tokens, c.wl.inject_max_tokens);
        else
            assert_true(row->completion_tokens >= 2 && row->completion_tokens <= 30);
        assert_true(row->t_first_ns > row->t_send_ns);
    }
    assert_true(finished > 20);
    /* The sink's last row of each request is the log's row. */
    for (int64_t r = 0; r < col.log.n_requests; r++) {
        const tokenlog_request *a = &col.log.requests[r];
        const tokenlog_request *b = &log.requests[a->request];
        if (a->t_first_ns < 0)
            continue; /* the sink says nothing more of a request without a token */
        assert_int_equal(a->t_first_ns, b->t_first_ns);
        assert_int_equal(a->t_end_ns, b->t_end_ns);
        assert_int_equal(a->completion_tokens, b->completion_tokens);
    }
    free(events_of);
    tokenlog_free(&col.log);
    tokenlog_free(&log);
}

/* The longest gap between two tokens of one background request that overlaps [a, b]. */
static int64_t longest_bg_gap(const tokenlog *log, int64_t a, int64_t b)
{
    int64_t *last = malloc((size_t)log->n_requests * sizeof *last);
    assert_non_null(last);
    for (int64_t r = 0; r < log->n_requests; r++)
        last[r] = -1;
    int64_t longest = 0;
    for (int64_t i = 0; i < log->n_events; i++) {
        const tokenlog_event *ev = &log->events[i];
        if (ev->kind != TOKENLOG_BG)
            continue;
        int64_t prev = last[ev->request];
        last[ev->request] = ev->t_ns;
        if (prev < 0 || ev->t_ns < a || prev > b)
            continue;
        if (ev->t_ns - prev > longest)
            longest = ev->t_ns - prev;
    }
    free(last);
    return longest;
}

/* The lesson on the catalog's H100 SXM and Llama 3.1 8B, 8 s with one 8k prompt at 5 s.
 * One instance: the prompt's step (~130 ms) is every user's gap. 1P:1D over NVLink: no gap
 * of any background user while the prompt is prefilled and moved is longer than the decode
 * instance's longest step + 1 ms, and no gap of the whole run longer than two of its steps
 * (a request's first token arrives mid-step; its second comes a step later). */
static void test_lesson_stall_disappears(void **state)
{
    (void)state;
    char err[ERR_LEN];
    cost_gpu gpu;
    cost_arch arch;
    if (cost_gpu_find("h100-sxm", &gpu, err) != 0 ||
        cost_arch_find("llama-3.1-8b", &arch, err) != 0)
        fail_msg("%s", err);
    sim_config c;
    memset(&c, 0, sizeof c);
    workload_default(&c.wl);
    c.wl.duration_ns = 8000000000LL;
    cost_params_init(&c.cost, &gpu, &arch);
    c.sched = (sched_config){.policy = SCHED_MIXED, .max_num_batched_tokens = 16384,
                             .max_num_seqs = 256, .max_model_len = arch.max_position,
                             .block_size = 16,
                             .kv_blocks = cost_kv_blocks(&c.cost, 0.9, 16)};

    tokenlog one;
    sim_stats st;
    run_or_fail(&c, &one, &st);
    const tokenlog_request *inj = injection_row(&one);
    const int64_t one_step_gap = longest_bg_gap(&one, inj->t_send_ns, inj->t_first_ns);
    const int64_t prefill = cost_prefill_ns(&c.cost, 8000, NULL);
    assert_true(one_step_gap >= prefill); /* the control: the stall is there */
    tokenlog_free(&one);

    assert_int_equal(sim_disagg_parse("1:1", &c.disagg, err), 0);
    assert_int_equal(sim_kv_link_parse("nvlink", &c.disagg, err), 0);
    tokenlog log;
    run_or_fail(&c, &log, &st);
    int64_t decode_step = 0;
    for (int64_t i = 0; i < log.n_steps; i++)
        if (log.steps[i].prefill_tokens == 0 && log.steps[i].modeled_ns > decode_step)
            decode_step = log.steps[i].modeled_ns;
    assert_true(decode_step > 0 && decode_step < 20000000); /* a decode step: ms, not 100s */
    inj = injection_row(&log);
    const int64_t transfer = sim_kv_transfer_ns(&c.disagg, &c.cost, 8000);
    /* Its first token: its own prefill step (alone on the prefill instance, or beside a
     * short background prompt) + the transfer. */
    assert_true(inj->t_first_ns - inj->t_send_ns >= prefill + transfer);
    assert_true(inj->t_first_ns - inj->t_send_ns < prefill + transfer + 10000000);
    const int64_t during = longest_bg_gap(&log, inj->t_send_ns, inj->t_first_ns);
    assert_true(during > 0);
    assert_true(during <= decode_step + 1000000);
    assert_true(longest_bg_gap(&log, 0, INT64_MAX) <= 2 * decode_step);
    assert_true(one_step_gap > 10 * during);
    tokenlog_free(&log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_sched_prefilled),
        cmocka_unit_test(test_sched_prefilled_preempted),
        cmocka_unit_test(test_ttft_is_prefill_plus_transfer),
        cmocka_unit_test(test_sink_and_log_agree),
        cmocka_unit_test(test_lesson_stall_disappears),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
