/* experiment — the one place an experiment is orchestrated: a typed configuration, its
 * config.json (one writer and one reader, side by side), a runner interface, and the run
 * pair every command performs:
 *
 *     baseline (injector off) -> its p50, the reference -> interference run -> summaries
 *     -> artifacts (OUT/<label>/..., OUT/comparison.json)
 *
 * and hands the two summaries back; the report layer turns them into the table, the verdict
 * and report.html (words and pictures are presentation: report/table.c, one function for the
 * terminal and the page).
 *
 * `sim`, `run`, `sweep`, the report's prediction and the tests differ only in the runner
 * they hand to experiment_run_pair(): the simulator (virtual time, in process) or HTTP
 * (the embedded server, started per run, or a --target).
 *
 * One header per module (config.h, options.h, config_json.h, runner.h, shard.h, pair.h,
 * outdir.h, result.h, server_flags.h, server_cmd.h, sweep.h); this one gathers them.
 *
 * Layering: experiment uses workload, engine, sim, client, analysis and common; calibrate,
 * tune, report and cli sit above it. Nothing here prints unless given a FILE, installs a
 * signal handler or exits. */
#ifndef STALLSCOPE_EXPERIMENT_H
#define STALLSCOPE_EXPERIMENT_H
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/options.h"
#include "experiment/outdir.h"
#include "experiment/pair.h"
#include "experiment/result.h"
#include "experiment/runner.h"
#include "experiment/server_cmd.h"
#include "experiment/server_flags.h"
#include "experiment/shard.h"
#include "experiment/sweep.h"

#endif
