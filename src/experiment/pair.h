/* pair — the experiment itself (pair.c): the baseline, its p50 as the reference, the
 * interference run, their summaries and artifacts, with any runner. */
#ifndef STALLSCOPE_EXPERIMENT_PAIR_H
#define STALLSCOPE_EXPERIMENT_PAIR_H
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/analysis.h"
#include "experiment/config.h"
#include "experiment/runner.h"

/* The runs' labels: each run's name in the notes and tables, and its directory under OUT.
 * The baseline is the workload without the injector, the interference run with it; with
 * --no-inject there is no injector to compare against, and the one run is the workload's
 * own traffic. */
#define EXPERIMENT_RUN_BASELINE "baseline"
#define EXPERIMENT_RUN_INTERFERENCE "interference"
#define EXPERIMENT_RUN_TRAFFIC "traffic"

typedef struct experiment_io {
    const char *out_dir;  /* artifacts root (created); NULL: in memory, summaries only */
    int argc;             /* the command line, for config.json */
    char **argv;
    FILE *notes;          /* the runners' warnings, and progress unless quiet; NULL: nothing */
    bool quiet;
    const volatile sig_atomic_t *interrupted;
    /* A streaming runner's limit on tokens.csv, and a live run's on the events it holds
     * (experiment_streaming; 0: the defaults). */
    int64_t tokens_csv_max_events;
    int64_t log_events_max;
} experiment_io;

typedef struct experiment_pair {
    analysis_summary baseline, interference;
    bool have_baseline, have_interference;
    bool complete; /* every run that ran went to its end */
    char why[320]; /* when !complete: which run stopped early or failed, and why */
} experiment_pair;

/* Run cfg: the baseline (unless cfg->no_baseline), whose p50 sets the interference run's
 * stall threshold, then the interference run (with --no-inject: the traffic run alone, in
 * pair->interference); each written to OUT/<label>/ with its
 * config.json (first, marked incomplete, so a killed run is still reportable) and
 * summary.json; then OUT/comparison.json. An incomplete baseline ends the pair there (no
 * comparison against half a baseline). Returns 0 when the runs took place (pair->complete
 * says whether to the end), -1 with err when one could not (the summaries already made
 * are in *pair either way; experiment_pair_free it). */
int experiment_run_pair(const experiment_config *cfg, const experiment_runner *runner,
                        const experiment_io *io, experiment_pair *pair, char *err);
void experiment_pair_free(experiment_pair *pair);

#endif
