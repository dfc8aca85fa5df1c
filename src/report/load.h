/* load — a directory of runs, or a sweep, back into memory: token logs, config.json (the
 * experiment's one reader), and the summaries recomputed by the one analysis (the baseline
 * first: its p50 sets the stall threshold of every run, so a stall means the same thing in
 * every column). Everything the report shows comes from here, so `sim`, `run`, `sweep` and
 * `report DIR` show the same numbers for the same files. */
#ifndef STALLSCOPE_REPORT_LOAD_H
#define STALLSCOPE_REPORT_LOAD_H
#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "analysis/analysis.h"
#include "client/scrape.h"
#include "common/tokenlog.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/sweep.h"

#define REPORT_MAX_RUNS 256
#define REPORT_MAX_AXES EXPERIMENT_SWEEP_MAX_AXES

typedef struct report_run {
    char dir[4096];
    char label[64];
    char engine[192];
    char target[512];
    analysis_options opt;
    standard_options standard; /* from the config (zero: the defaults); opt.standard -> here */
    tokenlog log;
    analysis_summary summary;
    bool summarized;
    bool no_tokens;            /* log holds no events: tokens.csv was not kept (report_given)
                                * or was streamed (too large to hold) */
    bool stream_tokens;        /* tokens.csv is summarized by streaming it from disk */
    json_t *json;              /* config.json as read (shown raw), NULL when absent */
    bool has_config;           /* cfg and meta were read from it */
    experiment_config cfg;
    experiment_meta meta;
    char config_why[256];      /* why not, when !has_config */
    /* A merged run (report --merge) whose shards' clocks may be off by up to
     * meta.merge.clock_uncertainty_ns (U): the summary again with every injection's wait
     * [sent, first token] widened by U (hi: what aligns under some offset within ±U) and
     * shrunk by U (lo: what aligns under every one). Only the figures that set tokens of
     * one shard against an injection of another differ: the stalls' alignment, the users
     * each injection stalled and the gaps across its wait. Gaps themselves lie within one
     * request, so within one shard's clock, and carry no uncertainty. */
    bool has_bounds;
    analysis_summary bound_lo, bound_hi;
    /* server_metrics.csv (the server's Prometheus metrics over the run), when present and
     * readable; a file that is not is warned about and left out. */
    bool has_server_metrics;
    scrape_series server_metrics;
} report_run;

typedef struct report_set {
    char root[4096];
    report_run *runs;          /* (n_runs) sorted by directory name */
    int n_runs, cap_runs;
    int baseline, interference; /* indices, -1 when absent (interference: or traffic) */
} report_set;

/* Load the runs under root (root itself when it holds tokens.csv or requests.csv, else
 * its subdirectories that do) and summarize them; threshold_ms 0 is the default rule.
 * keep_logs false frees each token log once summarized (sweeps). Warnings about a bad
 * config.json go to warn (may be NULL). 0, or -1 with err; report_set_free either way. */
int report_set_load(report_set *set, const char *root, double threshold_ms, bool keep_logs,
                    FILE *warn, char *err);
/* The summaries a run pair computed as it went (experiment_pair), for the runs whose
 * tokens.csv was not kept (a long simulation past --tokens-csv-max): those are reported from
 * these (copied) and their requests.csv and steps.csv, with no per-gap charts. A run that
 * kept its tokens.csv is read back and summarized as always (streamed when large). given
 * may be NULL (report_set_load). */
typedef struct report_given {
    const analysis_summary *baseline, *interference;
    /* A tokens.csv larger than this (bytes; 0: REPORT_STREAM_TOKENS_BYTES) is not loaded:
     * the analysis streams it row by row (requests.csv first), in bounded memory, and the run
     * has no per-gap charts (report_run.no_tokens). */
    int64_t stream_tokens_bytes;
} report_given;
#define REPORT_STREAM_TOKENS_BYTES ((int64_t)256 << 20) /* ~9 M token events */
int report_set_load_given(report_set *set, const char *root, double threshold_ms,
                          bool keep_logs, const report_given *given, FILE *warn, char *err);
void report_set_free(report_set *set);
/* The run to report: the interference run (or --no-inject's traffic run), else the only
 * non-baseline run. */
const report_run *report_set_main(const report_set *set);
/* Its baseline, when it has one that is not itself. */
const report_run *report_set_baseline(const report_set *set);

typedef struct report_sweep_point {
    char label[64];                 /* point-1 */
    char dir[4096];
    char values[REPORT_MAX_AXES][64]; /* each axis' value as typed: "8k", "10s", "chunked" */
    char status[16];                /* "ok", "refused", "failed" */
    char reason[256];               /* why refused or failed */
    report_set set;                 /* its runs (summaries only), when status is ok */
    bool loaded;
    char line[160];                 /* its values on the axes after the first ("" for one axis) */
    double prompt_tokens, budget;   /* from its configuration (or its values), 0 unknown */
    analysis_sweep_point fig;       /* the figures the sweep quotes (analysis_sweep) */
} report_sweep_point;

typedef struct report_sweep {
    char dir[4096];
    char axes[REPORT_MAX_AXES][48]; /* option names: "prompt-tokens", "policy" ... */
    int n_axes;
    char mode[16];                  /* "sim" or "run" */
    report_sweep_point *points;
    int n_points;
    json_t *json;                   /* sweep.json as read */
} report_sweep;

/* True when dir holds a sweep.json. */
bool report_is_sweep(const char *dir);
/* What `report dir` would report, in a few words, into kind: "sweep, 3 points" (a sweep),
 * "one run" (dir holds tokens.csv or requests.csv), or its runs' labels ("baseline +
 * interference", sorted). False (kind "") when dir holds none of these. */
bool report_dir_kind(const char *dir, char *kind, size_t size);
/* dir's subdirectories that report_dir_kind describes, by name: their count, the first max of
 * them strdup'ed into names (the caller frees each). */
int report_dir_children(const char *dir, char **names, int max);
/* Read DIR/sweep.json, load every point that ran and compute the sweep's figures.
 * 0, or -1 with err; report_sweep_free either way. */
int report_sweep_load(report_sweep *sw, const char *dir, double threshold_ms, FILE *warn,
                      char *err);
void report_sweep_free(report_sweep *sw);
/* A point's main run (NULL when it did not run). */
const report_run *report_sweep_point_main(const report_sweep_point *pt);

#endif
