/* stallscope report DIR — recompute every summary from a run's token log, so the numbers
 * people quote always come from the one analysis, whatever wrote the CSVs; then rebuild
 * DIR/report.html and DIR/plots/ from the same files. DIR is a run directory (baseline/ and
 * interference/, or one run) or a sweep (sweep.json and its point-k/ directories); a directory
 * of those (out/) has each named with its report line, nothing rebuilt.
 * stallscope report --merge DIR... — the shards of a sharded run into one run directory
 * (docs/guide/shards.md), then its report. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"
#include "experiment/pair.h"
#include "proxy/window.h"
#include "report/report.h"

#define REPORT_MERGED_DIR "out/merged"

typedef struct report_flags {
    int64_t stall_threshold_ns; /* 0: the default rule */
    bool json;
    bool no_report;
    bool merge;
    bool allow_partial;
    bool force;
    char out[1024];
    char from[64], to[64]; /* a proxy's files: the window */
} report_flags;

static const opts_spec report_specs[] = {
    OPTS_DURATION("stall-threshold", "DUR",
                  "a stall is a gap above this (default: the run's own --stall-threshold, else 5 x the "
                  "baseline's p50; e.g. 50ms)",
                  report_flags, stall_threshold_ns, 1, 3600 * CLOCK_NS_PER_S),
    OPTS_FLAG("json", "print comparison.json (or the summary), not the table", report_flags, json),
    OPTS_FLAG("no-report", "recompute the summaries only: no report.html, no plots", report_flags,
              no_report),
};

static const opts_spec window_specs[] = {
    OPTS_STRING("from", "TIME",
                "the window's start: a UTC time (2026-12-02T03:00), @SECONDS since the epoch, or "
                "a duration before now (2h) (default: the first session's start)",
                report_flags, from),
    OPTS_STRING("to", "TIME", "the window's end, as --from (default: now)", report_flags, to),
};

static const opts_spec merge_specs[] = {
    OPTS_FLAG("merge", "the directories are shards of one run (--shard I/N): merge them", report_flags,
              merge),
    OPTS_STRING("out", "DIR",
                "where the merged run goes (default out/merged, or when that holds an earlier "
                "run the next free out/merged-2, -3 ...)",
                report_flags, out),
    OPTS_FLAG("allow-partial",
              "merge the complete shards when one is missing or incomplete (the merged run is "
              "then marked incomplete)",
              report_flags, allow_partial),
    OPTS_FLAG("force", "replace an earlier run in --out", report_flags, force),
};

/* A proxy's files over [--from, --to) into one run (flags->out, default beside them), then
 * its report. 0, 1 or -1 as report_rebuild_dir; -2 (with err) for bad input. */
static int report_proxy_window(const char *dir, report_flags *flags, double threshold_ms,
                               char *err)
{
    if (flags->merge || flags->allow_partial)
        return err_set(err, "--merge and --allow-partial are not for a proxy's files"), -2;
    const int64_t now = clock_now_ns() + clock_realtime_offset_ns(1, NULL);
    int64_t from = 0, to = 0;
    if ((flags->from[0] && pwin_parse_time(flags->from, now, &from, err) != 0) ||
        (flags->to[0] && pwin_parse_time(flags->to, now, &to, err) != 0))
        return -2;
    char tmp[4096], probe[4200];
    snprintf(tmp, sizeof tmp, "%s/.window-building", dir);
    if (access(tmp, F_OK) == 0 && fsio_remove_tree(tmp, err) != 0)
        return -1;
    pwin_result res;
    if (pwin_build(dir, from, to, tmp, &res, err) != 0)
        return -1;
    if (!flags->out[0]) {
        char a[32], b[32];
        time_t ta = (time_t)(res.from_unix_ns / CLOCK_NS_PER_S), tb = (time_t)(res.to_unix_ns / CLOCK_NS_PER_S);
        struct tm tm;
        strftime(a, sizeof a, "%Y%m%dT%H%M%SZ", gmtime_r(&ta, &tm));
        strftime(b, sizeof b, "%Y%m%dT%H%M%SZ", gmtime_r(&tb, &tm));
        snprintf(flags->out, sizeof flags->out, "%s/window-%s-%s", dir, a, b);
    }
    /* An earlier window there is replaced; anything else is not ours to remove. */
    snprintf(probe, sizeof probe, "%s/window.json", flags->out);
    if (access(flags->out, F_OK) == 0 && access(probe, F_OK) != 0) {
        fsio_remove_tree(tmp, err);
        return err_set(err, "%s exists and is not a proxy window: give another --out", flags->out), -2;
    }
    if ((access(flags->out, F_OK) == 0 && fsio_remove_tree(flags->out, err) != 0) ||
        rename(tmp, flags->out) != 0) {
        err_set(err, "cannot make %s", flags->out);
        return -1;
    }
    fprintf(flags->json ? stderr : stdout,
            "stallscope report: %lld requests in the window (%d session(s), %d hourly "
            "part(s)), %lld token events, in %s%s\n",
            (long long)res.requests, res.sessions, res.parts, (long long)res.events, flags->out,
            res.cut_rows ? " (rows cut short by a crash dropped)" : "");
    return report_rebuild_dir(flags->out, threshold_ms, flags->json, !flags->no_report, err);
}

int cli_report(int argc, char **argv)
{
    static const char usage[] =
        "stallscope report DIR [--stall-threshold DUR] [--json] [--no-report]\n"
        "       stallscope report --merge DIR... [--out MERGED] [--allow-partial] [--force]\n"
        "       stallscope report PROXY_OUT [--from TIME] [--to TIME] [--out DIR]";
    report_flags flags = {0, false, false, false, false, false, "", "", ""};
    cli_gate gate = {0};
    opts_group groups[] = {{"report options", report_specs, OPTS_COUNT(report_specs), &flags},
                           {"merging shards (docs/guide/shards.md)", merge_specs,
                            OPTS_COUNT(merge_specs), &flags},
                           {"a proxy's files (docs/guide/production.md)", window_specs,
                            OPTS_COUNT(window_specs), &flags},
                           cli_gate_group(&gate)};
    if (opts_show_help(stdout, argc, argv, usage,
                       "Recompute summary.json (and comparison.json) from the token logs in\n"
                       "DIR/<label>/ (or in DIR itself), print the side-by-side table and the\n"
                       "verdict, and rebuild DIR/report.html with its plots (DIR/plots/). For a\n"
                       "sweep (DIR/sweep.json), every point, sweep.csv and the sweep's report.\n"
                       "A DIR holding no run of its own but run and sweep directories (out/):\n"
                       "each is named with the line that reports it, nothing rebuilt.\n"
                       "With --merge: each DIR is one shard's --out (run --shard I/N); they are\n"
                       "merged into one run in --out (tokens in time order, request ids kept\n"
                       "apart, each shard placed on the common axis by its t = 0), then reported\n"
                       "with the clock uncertainty beside every figure that compares shards. A\n"
                       "shard file cut short or disagreeing with its requests.csv is merged and\n"
                       "the merged run marked incomplete (exit 0, the reason on stderr); a\n"
                       "malformed row is bad input (exit 2), and a merge that fails leaves --out\n"
                       "as it was.\n"
                       "A PROXY_OUT (stallscope proxy --out): the rows of the streams that ran in\n"
                       "[--from, --to) are put into one run (--out, default\n"
                       "PROXY_OUT/window-FROM-TO), then reported.\n"
                       "Exit status: 0 reported; 1 a run failed (most of its requests failed:\n"
                       "reported whole, the reason on stderr) or a file could not be written;\n"
                       "2 bad input.",
                       groups, OPTS_COUNT(groups)))
        return CLI_EXIT_OK;
    char err[ERR_LEN] = "";
    char **positional = calloc((size_t)argc + 1, sizeof *positional);
    int n_positional = 0, status = CLI_EXIT_FAIL;
    if (!positional) {
        fprintf(stderr, "stallscope report: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    if (opts_parse(argc, argv, groups, OPTS_COUNT(groups), positional, argc, &n_positional,
                   err) != 0) {
        status = cli_usage_error("report", err);
        goto done;
    }
    const double threshold_ms = (double)flags.stall_threshold_ns / 1e6;
    int rc;
    if (flags.merge) {
        if (n_positional < 1) {
            status = cli_usage_error("report", "--merge needs the shards' directories (usage: "
                                               "stallscope report --merge DIR... --out MERGED)");
            goto done;
        }
        if (!flags.out[0]) {
            /* The default beside an earlier merge, as sim and run do with theirs. */
            if (cli_default_dir("report", REPORT_MERGED_DIR, flags.force, flags.out,
                                sizeof flags.out, err) != 0) {
                status = cli_usage_error("report", err);
                goto done;
            }
        }
        report_merge_options opt = {.dirs = positional, .n_dirs = n_positional, .out = flags.out,
                                    .allow_partial = flags.allow_partial, .force = flags.force,
                                    .argc = argc, .argv = argv,
                                    .notes = flags.json ? stderr : stdout, .warn = stderr};
        bool complete = false;
        rc = report_merge_dirs(&opt, threshold_ms, flags.json, !flags.no_report, &complete, err);
        if ((rc == 0 || rc == 1) && !complete)
            fprintf(stderr, "stallscope report: the merged run in %s is incomplete (its "
                            "\"problems\" in merge.json say why)\n",
                    flags.out);
    } else if (n_positional == 1 && pwin_is_proxy_dir(positional[0])) {
        rc = report_proxy_window(positional[0], &flags, threshold_ms, err);
        if (rc == 0)
            positional[0] = flags.out; /* --fail-if judges the window */
    } else {
        if (flags.from[0] || flags.to[0]) {
            status = cli_usage_error("report", "--from and --to go with a proxy's --out directory");
            goto done;
        }
        if (flags.allow_partial || flags.force || flags.out[0] || n_positional != 1) {
            status = cli_usage_error("report", n_positional != 1
                                                   ? "needs one directory (usage: stallscope "
                                                     "report DIR, or --merge DIR...)"
                                                   : "--out, --allow-partial and --force go with --merge");
            goto done;
        }
        rc = report_rebuild_dir(positional[0], threshold_ms, flags.json, !flags.no_report, err);
    }
    if (rc == REPORT_LISTED) {
        /* DIR held runs, named above; the rules judge one run. */
        status = gate.given ? cli_usage_error("report", "--fail-if judges one run: give one "
                                                        "of the directories above")
                            : CLI_EXIT_OK;
        gate.given = false;
    } else if (rc == -2) {
        status = cli_usage_error("report", err);
    } else if (rc == 1) {
        fprintf(stderr, "stallscope report: %s\n", err); /* reported whole; the run failed */
    } else if (rc != 0) {
        fprintf(stderr, "stallscope report: %s\n", err);
    } else {
        status = CLI_EXIT_OK;
    }
    if (status == CLI_EXIT_OK && gate.given) {
        /* The rules judge the interference run (--no-inject's traffic run; the run itself
         * when it has no pair). */
        const char *dir = flags.merge ? flags.out : positional[0];
        char path[4200];
        snprintf(path, sizeof path, "%s/" EXPERIMENT_RUN_INTERFERENCE "/summary.json", dir);
        if (access(path, R_OK) != 0)
            snprintf(path, sizeof path, "%s/" EXPERIMENT_RUN_TRAFFIC "/summary.json", dir);
        if (access(path, R_OK) != 0)
            snprintf(path, sizeof path, "%s/summary.json", dir);
        status = cli_gate_apply_file(&gate, path, status, flags.json ? stderr : stdout);
    }
done:
    free(positional);
    return status;
}
