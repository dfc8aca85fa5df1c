/* metric — every figure of a run, one row each: the one table its names come from.
 *
 * A row holds a figure's names and how to read it: the id --fail-if and --slo take
 * ("itl.p999"), its path in summary.json ("itl_ms.p999"), its key in `vllm bench serve
 * --save-result`'s file where vLLM has the same figure, the label the terminal table and
 * report.html print ("gap p99.9 (ms)"), its unit, one line on what it means, and where it
 * sits in an analysis_summary. A new figure costs one row here plus its computation (in
 * analysis/); the gate, the tables, the vLLM result, tune and docs/reference/metrics.md
 * (printed by `stallscope metrics --markdown`, checked by a test) all read it from here.
 *
 * A family row stands for one figure per percentile of --metric-percentiles (vLLM's standard
 * metrics): "{P}" in its id, path, key and label is the percentile as vLLM spells it ("99",
 * "99.9"): tpot.p{P} is tpot.p99, metrics.all.tpot_ms.p99, p99_tpot_ms.
 *
 * The stall analysis' gaps and TTFTs (itl.*, ttft.*) are the background streams' and
 * nearest-rank (analysis.h); vLLM's ITL and TTFT (itl.all.*, ttft.all.*) are every request's
 * and interpolated (standard.h). They are different figures: itl.p999 has no vLLM key, and
 * vLLM's p99.9_itl_ms is itl.all.p{P}. */
#ifndef STALLSCOPE_METRIC_H
#define STALLSCOPE_METRIC_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "analysis/analysis.h"

typedef enum {
    METRIC_MS,     /* a time in ms (--fail-if: with its unit, 200ms, 1.5s) */
    METRIC_SHARE,  /* a fraction (--fail-if: 0.99 or 99%) */
    METRIC_COUNT,  /* a whole number */
    METRIC_NUMBER, /* a rate or a ratio */
} metric_unit;

/* Where a row's value sits in an analysis_summary. */
typedef enum {
    METRIC_F64,    /* a double at offset */
    METRIC_I64,    /* an int64_t at offset */
    METRIC_STAT_P, /* a family: the percentile of the standard_stat at offset */
    METRIC_FN,     /* computed by get() */
} metric_field;

typedef struct metric {
    const char *id;    /* --fail-if / --slo: "itl.p999" */
    const char *json;  /* summary.json path, dotted: "itl_ms.p999"; NULL: not in the file */
    const char *vllm;  /* vllm bench serve's result key: "p{P}_itl_ms"; NULL: vLLM has none */
    const char *label; /* the terminal table and report.html: "gap p99.9 (ms)" */
    metric_unit unit;
    const char *help;  /* what it means, one line */
    metric_field field;
    size_t offset;     /* METRIC_F64, METRIC_I64, METRIC_STAT_P: in analysis_summary */
    /* METRIC_FN: false when the run has no such figure (no SLO given, no GPU count). */
    bool (*get)(const analysis_summary *s, double *out);
    /* The int64_t count at this offset is the figure's sample: 0 samples, no figure to
     * show (the tables print a dash; the files still hold the value). 0: none (no count
     * sits at offset 0 of an analysis_summary: its label does). */
    size_t count;
} metric;

/* The rows, in the order the docs list them; *n their number. */
const metric *metric_table(int *n);
/* The row of an id (a family's as written, "tpot.p{P}"); NULL when none. */
const metric *metric_find(const char *id);

/* A figure as someone named it: its row and, for a family, the percentile. */
typedef struct metric_ref {
    const metric *row;
    char id[64];  /* canonical: "itl.p999" for "itl.p99.9", "tpot.p99" */
    char p[16];   /* a family's percentile as vLLM spells it ("99.9"); "" otherwise */
} metric_ref;

/* Parse a name as --fail-if and --slo take it: an id of a row that summary.json holds, a
 * family's id with a percentile in (0, 100] ("tpot.p99"), or METRIC.p99.9 for METRIC.p999.
 * 0, or -1 with err naming the metrics. */
int metric_parse(const char *name, metric_ref *out, char *err);
/* The figure's value in a summary's JSON (analysis_summary_to_json or summary.json): false
 * when it is absent or not a number. */
bool metric_json_value(const metric_ref *r, const json_t *summary, double *out);

/* A row's value in a summary (not a family's: false). False when the run has no such
 * figure; *out is 0 then. */
bool metric_value(const metric *m, const analysis_summary *s, double *out);
/* Whether the figure had samples (its count, when the row has one, is above 0). */
bool metric_sampled(const metric *m, const analysis_summary *s);

/* The figure's name as one JSON key, for a record of figures side by side (tune.json):
 * vLLM's key where vLLM has the figure ("output_throughput"), else the id with '_' for '.'
 * and "_ms" after a time ("itl_p999_ms"). Not for a family. */
void metric_key(const metric *m, char *buf, size_t size);

/* `vllm bench serve --save-result`'s document for a run: every row with a vLLM key, in the
 * table's order (a family once per percentile of the run's --metric-percentiles); a figure
 * the run lacks (request_goodput without an SLO) is null, counts are integers. New
 * reference, NULL on out-of-memory. */
json_t *metric_vllm_result(const analysis_summary *s);

/* Every id with its unit and meaning, one a line ("  itl.max  ms  the longest gap ..."). */
void metric_print_list(FILE *out);
/* docs/reference/metrics.md, whole. */
void metric_print_markdown(FILE *out);

#endif
