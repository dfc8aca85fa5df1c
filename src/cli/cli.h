/* cli — the subcommands and the option groups they share, so one flag means one thing
 * in run, serve, sim, sweep and model. Every command returns its exit status: 0 fine,
 * 1 the run failed, 2 bad input (one clear line on stderr, no artifacts claiming success). */
#ifndef STALLSCOPE_CLI_H
#define STALLSCOPE_CLI_H
#include <stdbool.h>
#include <stdint.h>

#include "common/opts.h"
#include "engine/cost.h"
#include "engine/sched.h"
#include "workload/workload.h"

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

int cli_model(int argc, char **argv);
int cli_sim(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_report(int argc, char **argv);
int cli_sweep(int argc, char **argv);
int cli_calibrate(int argc, char **argv);

/* --gpu --model --model-config --params --step-overhead --compute-efficiency
 * --bandwidth-efficiency --gpu-memory-utilization --hardware --threads */
typedef struct cli_engine_cfg {
    char gpu[32];
    char model[64];
    char model_config[512];
    double params_override;
    int64_t step_overhead_ns;
    double compute_efficiency;
    double bandwidth_efficiency;
    double gpu_memory_utilization;
    char hardware[512]; /* a calibrated hardware profile: replaces --gpu */
    int threads;        /* cpu engine threads; 0: online cores - 1, at least 1 */
    bool gpu_set, model_set, step_overhead_set; /* given on the command line */
} cli_engine_cfg;

/* --policy --max-num-batched-tokens --max-num-seqs --max-model-len --kv-blocks
 * --enable-chunked-prefill --no-enable-chunked-prefill */
typedef struct cli_sched_cfg {
    sched_config sched;
    int64_t kv_blocks_override; /* 0: from the GPU's memory */
    bool max_model_len_set;
} cli_sched_cfg;

/* --preset --users --duration --inject-every --inject-at --prompt-tokens
 * --inject-max-tokens --seed --bg-prompt-tokens --bg-answer-tokens */
typedef struct cli_workload_cfg {
    workload_config wl;
} cli_workload_cfg;

void cli_engine_defaults(cli_engine_cfg *cfg);
void cli_sched_defaults(cli_sched_cfg *cfg);
/* Lesson preset unless argv names another --preset (applied before other flags). */
int cli_workload_defaults(cli_workload_cfg *cfg, int argc, char **argv, char *err);

opts_group cli_engine_group(cli_engine_cfg *cfg);
opts_group cli_sched_group(cli_sched_cfg *cfg);
opts_group cli_workload_group(cli_workload_cfg *cfg);

/* Resolve names against the catalog into cost parameters (the device from --hardware when
 * given, its step overhead unless --step-overhead is). */
int cli_engine_resolve(const cli_engine_cfg *cfg, cost_params *out, char *err);
/* For --engine cpu: the device defaults to the catalog's "cpu" and the model to
 * CLI_CPU_DEFAULT_MODEL unless --gpu/--hardware or --model/--model-config were given.
 * Call after parsing, before cli_engine_resolve. */
#define CLI_CPU_DEFAULT_MODEL "small"
void cli_engine_cpu_defaults(cli_engine_cfg *cfg);
/* The cpu executor: the model's shape from cost->arch, --threads, the scheduler's KV
 * blocks; on a CPU device (the catalog's "cpu" or a --hardware profile) each step's
 * modeled_ns is the cost model's prediction. 0, or -1 with err. */
struct exec;
int cli_engine_create_cpu(const cli_engine_cfg *cfg, const cost_params *cost,
                          const sched_config *sched, struct exec **out, char *err);
/* Finish the scheduler config for a cost model: KV blocks from GPU memory unless given,
 * max_model_len from the model unless given. */
int cli_sched_resolve(cli_sched_cfg *cfg, const cost_params *cost, double gpu_mem_util,
                      char *err);

/* config.json: everything needed to rerun, plus the keys `report` reads back: label,
 * engine, target, duration_s, users, complete, argv, workload{...}, cost{...} (when cost is
 * given), sched{...} (when sched is given). New reference; caller decrefs. */
#include <jansson.h>
json_t *cli_config_to_json(const char *label, const char *engine, const char *target,
                           const workload_config *wl, const cost_params *cost,
                           const sched_config *sched, int argc, char **argv);

/* Print "stallscope <cmd>: <msg>" on stderr and return CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *msg);

#endif
