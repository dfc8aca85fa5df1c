/* summarize — the stream (stream.h) over what is whole already: an in-memory log
 * (analysis_summarize: always exact) and a run directory's files (analysis_summarize_files:
 * tokens.csv row by row, in bounded memory). Each makes a second pass when the stream's end
 * asks for one (more long gaps than it could hold before the threshold was known). */
#include "analysis/stream.h"

#include <stdio.h>
#include <string.h>

#include "common/err.h"

/* ---- the in-memory log ---------------------------------------------------------------- */

static double run_duration_s(const tokenlog *log)
{
    int64_t last = 0;
    for (int64_t i = 0; i < log->n_events; i++)
        if (log->events[i].t_ns > last)
            last = log->events[i].t_ns;
    for (int64_t i = 0; i < log->n_requests; i++) {
        const tokenlog_request *r = &log->requests[i];
        if (r->t_end_ns > last)
            last = r->t_end_ns;
        if (r->t_first_ns > last)
            last = r->t_first_ns;
        if (r->t_send_ns > last)
            last = r->t_send_ns;
    }
    return (double)last / 1e9;
}

static int summarize_pass(const tokenlog *log, const analysis_timeline *tl,
                          const analysis_options *opt_in, analysis_summary *out,
                          double *threshold_ms, char *err);

int analysis_summarize(const tokenlog *log, const analysis_options *opt, analysis_summary *out,
                       char *err)
{
    memset(out, 0, sizeof *out);
    analysis_options o = *opt;
    o.duration_s = opt->duration_s > 0 ? opt->duration_s : run_duration_s(log);
    o.exact_gaps_max = INT64_MAX; /* the log is in memory already: always exact */
    /* Without a threshold the long gaps are held within the stream's budget, and a second
     * pass (over memory: cheap) settles the stalls when more came than it could hold. */
    analysis_timeline tl;
    if (analysis_timeline_build(log, &tl, err) != 0)
        return -1;
    int rc = -1;
    for (int pass = 0; pass < 2; pass++) {
        double threshold_ms = 0;
        rc = summarize_pass(log, &tl, &o, out, &threshold_ms, err);
        if (rc != -2)
            break;
        o.threshold_ms = threshold_ms;
        o.threshold_known = true;
    }
    analysis_timeline_free(&tl);
    return rc == 0 ? 0 : -1;
}

/* One pass of analysis_summarize. 0, -1 with err, or -2 (analysis_stream_end). */
static int summarize_pass(const tokenlog *log, const analysis_timeline *tl,
                          const analysis_options *opt_in, analysis_summary *out,
                          double *threshold_ms, char *err)
{
    const analysis_options o = *opt_in;
    analysis_stream *s = analysis_stream_begin(&o, err);
    if (!s)
        return -1;
    if (analysis_stream_add_log(s, log, tl, err) != 0) {
        analysis_stream_free(s);
        return -1;
    }
    return analysis_stream_end(s, &o, out, threshold_ms, err);
}

/* ---- a run's files ---------------------------------------------------------------------- */

/* One pass: the rows (requests, steps, sched events: in memory) then tokens.csv from disk.
 * 0, -1, or -2 (end's). */
static int files_pass(const char *dir, const tokenlog *rows, const analysis_options *opt,
                      analysis_summary *out, double *threshold_ms, int64_t *cut, char *err)
{
    char path[4200];
    if (snprintf(path, sizeof path, "%s/tokens.csv", dir) >= (int)sizeof path)
        return err_set(err, "%s: path too long", dir);
    analysis_stream *s = analysis_stream_begin(opt, err);
    if (!s)
        return -1;
    for (int64_t i = 0; i < rows->n_requests; i++)
        if (analysis_stream_request(s, &rows->requests[i], err) != 0)
            goto fail;
    for (int64_t i = 0; i < rows->n_steps; i++)
        if (analysis_stream_step(s, &rows->steps[i], err) != 0)
            goto fail;
    for (int64_t i = 0; i < rows->n_sched_events; i++)
        if (analysis_stream_sched_event(s, &rows->sched_events[i], err) != 0)
            goto fail;
    tokenlog_reader *rd = tokenlog_reader_open(path, TOKENLOG_TOKENS_CSV, err);
    if (!rd)
        goto fail;
    tokenlog_event ev;
    int rc;
    while ((rc = tokenlog_reader_event(rd, &ev, err)) == 1)
        if (analysis_stream_event(s, &ev, err) != 0) {
            rc = -1;
            break;
        }
    *cut += tokenlog_reader_close(rd);
    if (rc != 0)
        goto fail;
    analysis_options o = *opt;
    if (*cut > 0)
        o.complete = false;
    return analysis_stream_end(s, &o, out, threshold_ms, err);
fail:
    analysis_stream_free(s);
    return -1;
}

int analysis_summarize_files(const char *dir, const analysis_options *opt, analysis_summary *out,
                             int64_t *cut_rows, char *err)
{
    memset(out, 0, sizeof *out);
    tokenlog rows;
    int64_t cut_csv = 0;
    if (tokenlog_read_dir_rows(&rows, dir, &cut_csv, err) != 0)
        return -1;
    analysis_options o = *opt;
    o.gap_digest = true; /* the events stay on disk: the report draws from the digest */
    if (!(o.duration_s > 0)) /* no duration given: the requests' last instant */
        for (int64_t i = 0; i < rows.n_requests; i++) {
            const tokenlog_request *q = &rows.requests[i];
            int64_t last = q->t_end_ns > q->t_first_ns ? q->t_end_ns : q->t_first_ns;
            if ((double)last / 1e9 > o.duration_s)
                o.duration_s = (double)last / 1e9;
        }
    int rc = -1;
    int64_t cut = 0;
    for (int pass = 0; pass < 2; pass++) {
        double threshold_ms = 0;
        cut = cut_csv;
        if (cut > 0)
            o.complete = false;
        rc = files_pass(dir, &rows, &o, out, &threshold_ms, &cut, err);
        if (rc != -2)
            break;
        o.threshold_ms = threshold_ms;
        o.threshold_known = true;
    }
    tokenlog_free(&rows);
    if (cut_rows)
        *cut_rows = cut;
    return rc == 0 ? 0 : -1;
}
