/* cli_sim — the experiment in the simulator, shared by `sim` and the in-process points of
 * `sweep`: one flag set gives one configuration, one engine name and the same two runs. */
#ifndef STALLSCOPE_CLI_SIM_H
#define STALLSCOPE_CLI_SIM_H
#include <stdbool.h>
#include <stdio.h>

#include "analysis/analysis.h"
#include "cli/cli.h"
#include "sim/sim.h"

/* The simulator's configuration from the parsed option groups, injector on. 0, or -1
 * with err (bad input). */
int cli_sim_resolve(const cli_engine_cfg *eng, cli_sched_cfg *sch, const cli_workload_cfg *wl,
                    sim_config *cfg, char *err);
/* "sim h100-sxm llama-3.1-8b mixed/16384" */
void cli_sim_engine_name(const sim_config *cfg, char *buf, size_t size);
/* The baseline (injector off; skipped with no_baseline) and the interference run, each
 * written to DIR/<label>/ with its summary; the baseline's p50 is the interference run's
 * reference. progress gets one line per run (steps, events, requests, preemptions), or
 * nothing when NULL. The caller frees both summaries, also on failure. 0, or -1 with err. */
int cli_sim_experiment(const char *dir, const sim_config *cfg, const char *engine,
                       bool no_baseline, double threshold_ms, int argc, char **argv,
                       FILE *progress, analysis_summary *baseline,
                       analysis_summary *interference, char *err);

#endif
