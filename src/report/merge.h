/* merge — a sharded experiment's shards back into one run (`stallscope report --merge DIR...`,
 * docs/guide/shards.md), and the figures that compare tokens across shards, with the clock
 * uncertainty beside each.
 *
 * Each DIR is one shard's --out (baseline/ and interference/). The shards must be one
 * experiment (experiment_config_differ: everything but the shard index), each index
 * 0..N-1 given once, every run complete; else the merge names the first problem and stops,
 * or with allow_partial merges the complete shards and marks the merged run incomplete.
 * A merged shard's files are checked as they are read: a last row cut short (dropped), a
 * token row of a request requests.csv does not list (left out), a request whose rows carry
 * other than the tokens requests.csv counts for it (completion_tokens; at most that many for
 * one sent before t = 0, any number for one never ended) each make the merged run
 * incomplete, named by shard and request in merge.json's "problems" and on opt->warn. The
 * merge is built in OUT.merging-PID beside OUT and moved into OUT only when whole
 * (experiment_stage_dir): a merge that fails leaves OUT as it was.
 * Baseline and interference are merged separately into a normal run directory:
 *   - the merged t = 0 is the earliest shard's t0_realtime_ns; each shard's times move by
 *     its own t0_realtime_ns minus that (its offset on the common axis);
 *   - requests.csv: the shards' rows in shard order, each shard's request ids moved past
 *     the previous shard's (disjoint ranges: ids never collide);
 *   - tokens.csv: a k-way merge of the shards' time-ordered rows (a heap of one row per
 *     shard: the files are read row by row, never held or sorted whole);
 *   - config.json: the shards' configuration as one unsharded run, with a "merge" record
 *     (shards merged and missing, users, the merged t = 0, the clock uncertainty U: the
 *     largest bound on the offset between any two shards' clocks);
 * then OUT/merge.json (every shard's offset, clock, rows) beside them. The caller rebuilds
 * the report from OUT as for any run. */
#ifndef STALLSCOPE_REPORT_MERGE_H
#define STALLSCOPE_REPORT_MERGE_H
#include <stdbool.h>
#include <stdio.h>

#include "report/load.h"

typedef struct report_merge_options {
    char **dirs;       /* the shards' directories */
    int n_dirs;
    const char *out;   /* the merged run's directory (claimed as a run's --out) */
    bool allow_partial;
    bool force;        /* replace an earlier run in out */
    int argc;          /* the command line, for the merged config.json */
    char **argv;
    FILE *notes;       /* what was merged; NULL: nothing */
    FILE *warn;        /* shards left out, unsynchronized clocks; NULL: nothing */
} report_merge_options;

/* Merge. 0 when merged (*complete: every shard merged, and whole); -2 with err when the
 * input cannot be merged (not shards, not one experiment, a shard missing or incomplete
 * without allow_partial, a shard's file that cannot be read or holds a malformed row):
 * the command's exit 2; -1 with err when writing failed. */
int report_merge(const report_merge_options *opt, bool *complete, char *err);

/* For a merged run: the clock line and every cross-shard figure with its range under the
 * clock uncertainty (report_run.has_bounds). Nothing for a run that was not merged. */
void report_merge_print(FILE *out, const report_run *x);

#endif
