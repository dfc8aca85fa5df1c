/* options — the flags that fill an experiment_config, one table per group (options.c): every
 * command that runs experiments shares them, so a flag means one thing everywhere. */
#ifndef STALLSCOPE_EXPERIMENT_OPTIONS_H
#define STALLSCOPE_EXPERIMENT_OPTIONS_H
#include "analysis/standard.h"
#include "common/opts.h"
#include "experiment/config.h"

/* The option groups that fill a configuration, for every command that runs experiments
 * (and for the sweep, which applies one varied value at a time through the same tables):
 *   workload  --preset --users --duration --warmup --inject-every --inject-at --inject-poisson
 *             --no-inject --prompt-tokens --inject-max-tokens --prompt-len --answer-len
 *             --bg-prompt-tokens --bg-answer-tokens --seed --request-rate --burstiness
 *             --ramp-up --max-concurrency --trace --trace-format --speedup --from --to
 *             --loop --max-requests --skip-bad-rows
 *   device    --gpu --model --model-config --params --lesson-flops --step-overhead
 *             --compute-efficiency --bandwidth-efficiency --gpu-memory-utilization
 *             --hardware --threads
 *   sched     --policy --max-num-batched-tokens --max-num-seqs --max-model-len --kv-blocks
 *             --enable-chunked-prefill --no-enable-chunked-prefill
 *   client    --target --model-name --insecure --transport (experiment_connection_group:
 *             the server and how to reach it) --endpoint --request-timeout --fidelity --extra-body --client-threads --scrape-metrics
 *   analysis  --no-baseline --stall-threshold --metric-percentiles --goodput --label
 *             --metadata
 *   shards    --shard --start-at (run only: experiment_shard_group, shard.h)
 * Call experiment_preset first: --preset is applied before every other flag. */
opts_group experiment_workload_group(experiment_config *cfg);
opts_group experiment_device_group(experiment_config *cfg);
opts_group experiment_sched_group(experiment_config *cfg);
opts_group experiment_client_group(experiment_config *cfg);
/* The client group's first flags alone: --target --model-name --insecure --transport, for a
 * command that talks to a server without running the experiment's load (calibrate
 * --target): the same names, help and parsing, into cfg->client. */
opts_group experiment_connection_group(experiment_config *cfg);
opts_group experiment_analysis_group(experiment_config *cfg);
/* --disaggregate P:D --kv-link NAME|GB/s: prefill/decode disaggregation in the simulator
 * (sim.h); for `sim` and `sweep` (experiment_check refuses it for any other engine). */
opts_group experiment_disagg_group(experiment_config *cfg);
/* Apply --preset NAME from argv, if any, over cfg->wl; then, when argv has --request-rate,
 * --num-prompts or --trace but no --users, no closed users (the open loop replaces them);
 * --trace or --num-prompts without --duration sets duration_until_end. 0, or -1 with err. */
int experiment_preset(experiment_config *cfg, int argc, char **argv, char *err);

/* --api-key and --header (repeatable) into secrets. */
opts_group experiment_secrets_group(experiment_secrets *secrets);
/* After parsing: OPENAI_API_KEY (the environment's, never copied) when --api-key was not given. */
void experiment_secrets_from_env(experiment_secrets *secrets);

/* The standard metrics' options of cfg (--metric-percentiles, --goodput; checked when given,
 * so a config read back gives the same). */
void experiment_standard_options(const experiment_config *cfg, standard_options *out);

#endif
