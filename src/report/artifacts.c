#include "report/artifacts.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "report/html.h"
#include "report/plot.h"
#include "report/report.h"

int artifacts_mkdirs(const char *path, char *err)
{
    char buf[4096];
    if (strlen(path) >= sizeof buf)
        return err_set(err, "path too long: %s", path);
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return err_set(err, "cannot create %s: %s", buf, strerror(errno));
            *p = saved;
            if (saved == '\0')
                break;
        }
    }
    return 0;
}

int artifacts_write_atomic(const char *path, const char *data, size_t len, char *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return err_set(err, "cannot write %s: %s", tmp, strerror(errno));
    size_t put = fwrite(data, 1, len, f);
    int e = errno;
    if (fclose(f) != 0 || put != len) {
        remove(tmp);
        return err_set(err, "cannot write %s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        remove(tmp);
        return err_set(err, "cannot rename %s: %s", tmp, strerror(e));
    }
    return 0;
}

static int dump_json(json_t *json, const char *path, char *err)
{
    /* Write to a temporary name and rename, so a reader never sees half a file. */
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (json_dump_file(json, tmp, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) != 0)
        return err_set(err, "cannot write %s: %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0)
        return err_set(err, "cannot rename %s: %s", tmp, strerror(errno));
    return 0;
}

int artifacts_write_run(const char *out_dir, const tokenlog *log, const analysis_options *opt,
                        json_t *config, analysis_summary *summary_out, char *err)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/%s", out_dir, opt->label);
    if (artifacts_mkdirs(dir, err) != 0)
        return -1;
    if (tokenlog_write_dir(log, dir, err) != 0)
        return -1;
    if (config) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        if (dump_json(config, path, err) != 0)
            return -1;
    }
    if (analysis_summarize(log, opt, summary_out, err) != 0)
        return -1;
    json_t *summary = analysis_summary_to_json(summary_out);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    int rc = summary ? dump_json(summary, path, err) : err_set(err, "cannot encode summary");
    json_decref(summary);
    return rc;
}

int artifacts_write_comparison(const char *out_dir, const analysis_summary *baseline,
                               const analysis_summary *interference, char *err)
{
    char path[4200];
    json_t *cmp = analysis_comparison_to_json(baseline, interference);
    if (!cmp)
        return err_set(err, "cannot encode comparison");
    snprintf(path, sizeof path, "%s/comparison.json", out_dir);
    int rc = dump_json(cmp, path, err);
    json_decref(cmp);
    return rc;
}

int artifacts_report(const char *out_dir, double threshold_ms, char *err)
{
    html_options opt = {.predict = true};
    char why[ERR_LEN];
    int rc;
    if (html_is_sweep(out_dir)) {
        html_sweep sw;
        rc = html_sweep_load(&sw, out_dir, threshold_ms, stderr, why);
        if (rc == 0)
            rc = html_sweep_write_results(&sw, why);
        if (rc == 0)
            rc = html_write_sweep_report(&sw, &opt, why);
        html_sweep_free(&sw);
    } else {
        html_set set;
        rc = html_set_load(&set, out_dir, threshold_ms, true, stderr, why);
        if (rc == 0)
            rc = html_write_run_report(&set, &opt, why);
        html_set_free(&set);
    }
    plot_release_caches();
    if (rc != 0)
        return err_set(err, "report: %s", why);
    return 0;
}

int artifacts_finish_report(const char *out_dir, const analysis_summary *baseline,
                            const analysis_summary *interference, bool json, bool report,
                            char *err)
{
    char path[4200];
    json_t *cmp = analysis_comparison_to_json(baseline, interference);
    if (!cmp)
        return err_set(err, "cannot encode comparison");
    snprintf(path, sizeof path, "%s/comparison.json", out_dir);
    if (dump_json(cmp, path, err) != 0) {
        json_decref(cmp);
        return -1;
    }
    /* The report reads back what was just written, so `report DIR` rebuilds the same
     * page; the threshold in hand keeps its stall counts equal to these summaries'. */
    if (report && artifacts_report(out_dir, interference ? interference->stalls.threshold_ms : 0,
                                   err) != 0) {
        json_decref(cmp);
        return -1;
    }
    if (json) {
        json_dumpf(cmp, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        fputc('\n', stdout);
    } else {
        char verdict[1024];
        report_table_print(stdout, baseline, interference);
        report_verdict(verdict, sizeof verdict, baseline, interference);
        printf("\n%s\n", verdict);
        printf("\nartifacts: %s/\n", out_dir);
        if (report)
            printf("report:    %s/report.html\n", out_dir);
    }
    json_decref(cmp);
    fflush(stdout);
    return 0;
}

int artifacts_finish(const char *out_dir, const analysis_summary *baseline,
                     const analysis_summary *interference, bool json, char *err)
{
    return artifacts_finish_report(out_dir, baseline, interference, json, true, err);
}
