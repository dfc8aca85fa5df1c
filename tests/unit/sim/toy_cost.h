/* toy_cost — the tiny made-up device and model the simulator's unit tests price steps with
 * (test_sim, test_disagg, test_warm): a 2 GFLOP/s, 1 GB/s device with 1 MB of memory and a
 * 2-layer model of hidden size 4, so step times are microseconds and exact to work out by
 * hand; the scheduler they start from, and a run that must succeed. Include after cmocka.h. */
#ifndef STALLSCOPE_TEST_TOY_COST_H
#define STALLSCOPE_TEST_TOY_COST_H
#include <stdbool.h>
#include <string.h>

#include "common/err.h"
#include "common/tokenlog.h"
#include "engine/cost.h"
#include "engine/sched.h"
#include "sim/sim.h"
#include "workload/workload.h"

static inline cost_params toy_cost(void)
{
    const cost_gpu gpu = {.name = "toy-gpu", .peak_flops = 2e9, .mem_bandwidth = 1e9,
                          .mem_bytes = 1e6, .source = "made up for the simulator's tests"};
    const cost_arch arch = {.name = "toy", .n_layers = 2, .hidden = 4, .n_heads = 2,
                            .n_kv_heads = 1, .head_dim = 2, .ffn = 8, .vocab = 16,
                            .max_position = 4096, .source = "made up for the simulator's tests"};
    cost_params p;
    cost_params_init(&p, &gpu, &arch);
    return p;
}

/* mixed, a budget of 64 tokens, 16 sequences, 1,024 tokens of context, 256 blocks of 16. */
static inline sched_config toy_sched(void)
{
    return (sched_config){.policy = SCHED_MIXED, .max_num_batched_tokens = 64,
                          .max_num_seqs = 16, .max_model_len = 1024, .block_size = 16,
                          .kv_blocks = 256};
}

/* The workload's defaults (workload_default) on the toy device, model and scheduler: each
 * test sets the workload it runs. */
static inline sim_config toy_config(void)
{
    sim_config c;
    memset(&c, 0, sizeof c);
    workload_default(&c.wl);
    c.cost = toy_cost();
    c.sched = toy_sched();
    return c;
}

/* Four users with drawn lengths (prompts 4-24, answers 3-12 tokens), a 40-token prompt with a
 * 2-token answer every 200 us from 50 us (10 of them) under chunked prefill (budget 16), 2 ms
 * of virtual time (~370 steps): every mechanism at once, a few milliseconds of CPU. */
static inline sim_config toy_busy_config(void)
{
    sim_config c = toy_config();
    c.wl.users = 4;
    c.wl.duration_ns = 2000000;
    c.wl.inject = true;
    c.wl.inject_at_ns = 50000;
    c.wl.inject_every_ns = 200000;
    c.wl.prompt_tokens = 40;
    c.wl.inject_max_tokens = 2;
    c.wl.prompt_len.a = 4;
    c.wl.prompt_len.b = 24;
    c.wl.answer_len.a = 3;
    c.wl.answer_len.b = 12;
    c.wl.seed = 1;
    c.sched.policy = SCHED_CHUNKED;
    c.sched.max_num_batched_tokens = 16;
    return c;
}

/* Two logs alike, row for row: every field of every event, request, step and sched event. */
static inline bool toy_logs_equal(const tokenlog *a, const tokenlog *b)
{
    if (a->n_events != b->n_events || a->n_requests != b->n_requests || a->n_steps != b->n_steps ||
        a->n_sched_events != b->n_sched_events)
        return false;
    for (int64_t i = 0; i < a->n_events; i++) {
        const tokenlog_event *x = &a->events[i], *y = &b->events[i];
        if (x->t_ns != y->t_ns || x->request != y->request || x->user != y->user ||
            x->n_tokens != y->n_tokens || x->kind != y->kind)
            return false;
    }
    for (int64_t i = 0; i < a->n_requests; i++) {
        const tokenlog_request *x = &a->requests[i], *y = &b->requests[i];
        if (x->request != y->request || x->user != y->user || x->kind != y->kind ||
            x->t_plan_ns != y->t_plan_ns || x->t_send_ns != y->t_send_ns ||
            x->t_first_ns != y->t_first_ns || x->t_end_ns != y->t_end_ns ||
            x->prompt_tokens != y->prompt_tokens ||
            x->completion_tokens != y->completion_tokens ||
            strcmp(x->finish_reason, y->finish_reason) != 0 || strcmp(x->error, y->error) != 0)
            return false;
    }
    for (int64_t i = 0; i < a->n_steps; i++) {
        const tokenlog_step *x = &a->steps[i], *y = &b->steps[i];
        if (x->step != y->step || x->t_start_ns != y->t_start_ns || x->t_end_ns != y->t_end_ns ||
            x->decode_tokens != y->decode_tokens || x->prefill_tokens != y->prefill_tokens ||
            x->n_requests != y->n_requests || x->modeled_ns != y->modeled_ns)
            return false;
    }
    for (int64_t i = 0; i < a->n_sched_events; i++) {
        const tokenlog_sched_event *x = &a->sched_events[i], *y = &b->sched_events[i];
        if (x->step != y->step || x->t_ns != y->t_ns || x->request != y->request ||
            x->event != y->event)
            return false;
    }
    return true;
}

/* sim_run into a fresh log; the test fails with the simulator's reason if it refuses. */
static inline void run_or_fail(const sim_config *cfg, tokenlog *log, sim_stats *stats)
{
    char err[ERR_LEN] = "";
    tokenlog_init(log);
    if (sim_run(cfg, log, stats, err) != 0)
        fail_msg("sim_run: %s", err);
}

#endif
