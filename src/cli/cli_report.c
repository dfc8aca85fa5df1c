/* stallscope report DIR — recompute every summary from a run's token log, so the numbers
 * people quote always come from the one analysis, whatever wrote the CSVs; then rebuild
 * DIR/report.html and DIR/plots/ from the same files. DIR is a run directory (baseline/ and
 * interference/, or one run) or a sweep (sweep.json and its point-k/ directories). */
#include <stdio.h>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "report/report.h"

typedef struct report_flags {
    int64_t stall_threshold_ns; /* 0: the default rule */
    bool json;
    bool no_report;
} report_flags;

static const opts_spec report_specs[] = {
    OPTS_DURATION("stall-threshold", "DUR",
                  "a stall is a gap above this (default 5 x the baseline's p50; e.g. 50ms)",
                  report_flags, stall_threshold_ns, 1, 3600 * CLOCK_NS_PER_S),
    OPTS_FLAG("json", "print comparison.json (or the summary), not the table", report_flags, json),
    OPTS_FLAG("no-report", "recompute the summaries only: no report.html, no plots", report_flags,
              no_report),
};

int cli_report(int argc, char **argv)
{
    static const char usage[] = "stallscope report DIR [--stall-threshold DUR] [--json] [--no-report]";
    report_flags flags = {0, false, false};
    opts_group groups[] = {{"report options", report_specs, OPTS_COUNT(report_specs), &flags}};
    if (opts_wants_help(argc, argv)) {
        opts_print_help(stdout, usage,
                        "Recompute summary.json (and comparison.json) from the token logs in\n"
                        "DIR/<label>/ (or in DIR itself), print the side-by-side table and the\n"
                        "verdict, and rebuild DIR/report.html with its plots (DIR/plots/). For a\n"
                        "sweep (DIR/sweep.json), every point, sweep.csv and the sweep's report.",
                        groups, 1);
        return CLI_EXIT_OK;
    }
    char err[ERR_LEN] = "";
    char *positional[1];
    int n_positional = 0;
    if (opts_parse(argc, argv, groups, 1, positional, 1, &n_positional, err) != 0)
        return cli_usage_error("report", err);
    if (n_positional != 1)
        return cli_usage_error("report", "needs one directory (usage: stallscope report DIR)");
    int rc = report_rebuild_dir(positional[0], (double)flags.stall_threshold_ns / 1e6, flags.json,
                        !flags.no_report, err);
    if (rc == -2)
        return cli_usage_error("report", err);
    if (rc != 0) {
        fprintf(stderr, "stallscope report: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}
