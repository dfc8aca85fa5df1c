/* toy_cost — the tiny made-up device and model the simulator's unit tests price steps with
 * (test_sim, test_disagg): a 2 GFLOP/s, 1 GB/s device with 1 MB of memory and a 2-layer
 * model of hidden size 4, so step times are microseconds and exact to work out by hand. */
#ifndef STALLSCOPE_TEST_TOY_COST_H
#define STALLSCOPE_TEST_TOY_COST_H
#include "engine/cost.h"

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

#endif
