/* stream_summary — the end of the streaming analysis (analysis.h: analysis_stream_end): the
 * summary read off the stream's state (stream.h) once the run is over. The gap distribution
 * and its noise, the failures, the injections and their waits, the stalls once the threshold
 * is known (aligned with the injections, the users each stalled, the stalled time), the
 * per-gap charts' digest, and every stall's cause (attribution.h). */
#include "analysis/stream.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/attribution.h"
#include "common/buf.h"
#include "common/err.h"

static double spread(double a, double b)
{
    double mean = (a + b) / 2;
    return mean > 0 ? fabs(a - b) / mean : 0;
}

/* One half's figures; exact: the mean summed over the sorted values, as analysis_dist_from. */
static void half_dist(const sketch *h, analysis_dist *d)
{
    memset(d, 0, sizeof *d);
    if (h->n == 0)
        return;
    d->count = h->n;
    if (sketch_exact(h)) {
        double sum = 0;
        for (int64_t i = 0; i < h->n; i++)
            sum += analysis_ns_to_ms(h->values[i]);
        d->mean = sum / (double)h->n;
    } else {
        d->mean = h->sum_ns / 1e6 / (double)h->n;
    }
    d->p50 = sketch_quantile_ns(h, 0.50) / 1e6;
    d->p90 = sketch_quantile_ns(h, 0.90) / 1e6;
    d->p99 = sketch_quantile_ns(h, 0.99) / 1e6;
    d->p999 = sketch_quantile_ns(h, 0.999) / 1e6;
    d->max = analysis_ns_to_ms(h->max);
}

/* The run's gaps: the whole distribution, and how far its figures differ between the run's
 * halves. Each half is sorted once and the whole is read off the two sorted halves. */
static int gap_distributions(analysis_stream *s, analysis_summary *out)
{
    sketch *h0 = &s->half[0], *h1 = &s->half[1];
    if (sketch_finish(h0) != 0 || sketch_finish(h1) != 0)
        return -1;
    analysis_dist d0, d1;
    half_dist(h0, &d0);
    half_dist(h1, &d1);
    const int64_t n0 = h0->n, n1 = h1->n, n = n0 + n1;
    analysis_dist *itl = &out->itl_ms, *noise = &out->itl_noise;
    memset(itl, 0, sizeof *itl);
    memset(noise, 0, sizeof *noise);
    out->itl_histogram = !(sketch_exact(h0) && sketch_exact(h1));
    out->itl_relative_error = out->itl_histogram ? SKETCH_RELATIVE_ERROR : 0;
    if (n > 0) {
        itl->count = n;
        itl->mean = (d0.mean * (double)n0 + d1.mean * (double)n1) / (double)n;
        itl->p50 = sketch_quantile2_ns(h0, h1, 0.50) / 1e6;
        itl->p90 = sketch_quantile2_ns(h0, h1, 0.90) / 1e6;
        itl->p99 = sketch_quantile2_ns(h0, h1, 0.99) / 1e6;
        itl->p999 = sketch_quantile2_ns(h0, h1, 0.999) / 1e6;
        itl->max = d0.max > d1.max ? d0.max : d1.max;
    }
    if (n0 > 0 && n1 > 0) {
        noise->count = n0 < n1 ? n0 : n1;
        noise->mean = spread(d0.mean, d1.mean);
        noise->p50 = spread(d0.p50, d1.p50);
        noise->p90 = spread(d0.p90, d1.p90);
        noise->p99 = spread(d0.p99, d1.p99);
        noise->p999 = spread(d0.p999, d1.p999);
        noise->max = spread(d0.max, d1.max);
    }
    return 0;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* Distinct background users seen in the requests table or the token events. */
static int count_users(const analysis_stream *s, int *out)
{
    int64_t n = 0;
    int64_t *users = malloc((size_t)(s->log.n_requests + s->n_states + 1) * sizeof *users);
    if (!users)
        return -1;
    for (int64_t i = 0; i < s->log.n_requests; i++)
        if (s->log.requests[i].kind == TOKENLOG_BG)
            users[n++] = s->log.requests[i].user;
    for (int64_t k = 0; k < s->n_states; k++)
        users[n++] = s->states[k].user;
    if (n > 1)
        qsort(users, (size_t)n, sizeof *users, cmp_i64);
    int distinct = 0;
    for (int64_t i = 0; i < n; i++)
        distinct += i == 0 || users[i] != users[i - 1];
    free(users);
    *out = distinct;
    return 0;
}

/* Plan order: planned time, then actual send, then request id (a total order, so the list
 * is the same however the requests table was written). */
typedef struct plan_key {
    int64_t t_plan_ns, t_send_ns, request;
    int64_t row;
} plan_key;

static int cmp_plan(const void *x, const void *y)
{
    const plan_key *a = x, *b = y;
    if (a->t_plan_ns != b->t_plan_ns)
        return (a->t_plan_ns > b->t_plan_ns) - (a->t_plan_ns < b->t_plan_ns);
    if (a->t_send_ns != b->t_send_ns)
        return (a->t_send_ns > b->t_send_ns) - (a->t_send_ns < b->t_send_ns);
    return (a->request > b->request) - (a->request < b->request);
}

/* Stalls by request, then time: the order of stalls.csv. */
static int cmp_stall(const void *x, const void *y)
{
    const stream_candidate *a = x, *b = y;
    if (a->request != b->request)
        return (a->request > b->request) - (a->request < b->request);
    return (a->t_ns > b->t_ns) - (a->t_ns < b->t_ns);
}

static void copy_name(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src ? src : "");
}

static int cmp_text(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* The requests, their errors, the most common error, and whether the run failed (and so
 * is not complete). -1 when out of memory. */
static int failures(const tokenlog *log, analysis_summary *out)
{
    out->requests = log->n_requests;
    const char **errors = malloc((size_t)(log->n_requests ? log->n_requests : 1) * sizeof *errors);
    if (!errors)
        return -1;
    int64_t n = 0;
    for (int64_t i = 0; i < log->n_requests; i++)
        if (log->requests[i].error[0] != '\0')
            errors[n++] = log->requests[i].error;
    out->errors = n;
    /* Equal texts side by side: the longest run is the most common (the first such run in
     * byte order on a tie). */
    qsort(errors, (size_t)n, sizeof *errors, cmp_text);
    for (int64_t i = 0, run = 1; i < n; i++, run++) {
        if (i + 1 < n && strcmp(errors[i], errors[i + 1]) == 0)
            continue;
        if (run > out->error_common_count) {
            out->error_common_count = run;
            copy_name(out->error_common, sizeof out->error_common, errors[i]);
        }
        run = 0;
    }
    free(errors);
    out->failed = out->requests > 0 &&
                  (double)out->errors >= ANALYSIS_FAILED_SHARE * (double)out->requests;
    out->complete = out->complete && !out->failed;
    return 0;
}

void analysis_prompt_count(const tokenlog *log, analysis_prompt_tokens *out)
{
    memset(out, 0, sizeof *out);
    for (int64_t i = 0; i < log->n_requests; i++) {
        const tokenlog_request *r = &log->requests[i];
        if (r->error[0] || r->prompt_tokens_requested <= 0 || r->prompt_tokens <= 0)
            continue;
        out->requests++;
        out->planned += r->prompt_tokens_requested;
        out->counted += r->prompt_tokens;
        const double off = fabs((double)r->prompt_tokens / r->prompt_tokens_requested - 1);
        out->worst = off > out->worst ? off : out->worst;
    }
    out->ratio = out->planned > 0 ? (double)out->counted / (double)out->planned : 0;
}

/* Injections in plan order, each with the gaps across its wait. */
static int injections(analysis_stream *s, analysis_summary *out, int64_t **plan_of_window)
{
    const tokenlog *log = &s->log;
    int64_t n_inj = 0;
    for (int64_t i = 0; i < log->n_requests; i++)
        n_inj += log->requests[i].kind == TOKENLOG_INJECT;
    plan_key *rows = malloc((size_t)(n_inj ? n_inj : 1) * sizeof *rows);
    out->injections = calloc((size_t)(n_inj ? n_inj : 1), sizeof *out->injections);
    *plan_of_window = malloc((size_t)(s->n_win ? s->n_win : 1) * sizeof **plan_of_window);
    if (!rows || !out->injections || !*plan_of_window) {
        free(rows);
        return -1;
    }
    out->n_injections = (int)n_inj;
    for (int64_t i = 0, j = 0; i < log->n_requests; i++) {
        const tokenlog_request *r = &log->requests[i];
        if (r->kind == TOKENLOG_INJECT)
            rows[j++] = (plan_key){r->t_plan_ns, r->t_send_ns, r->request, i};
    }
    if (n_inj > 1)
        qsort(rows, (size_t)n_inj, sizeof *rows, cmp_plan);
    for (int64_t j = 0; j < n_inj; j++) {
        const tokenlog_request *r = &log->requests[rows[j].row];
        analysis_injection *inj = &out->injections[j];
        inj->t_plan_s = (double)r->t_plan_ns / 1e9;
        inj->t_send_s = r->t_send_ns >= 0 ? (double)r->t_send_ns / 1e9 : -1;
        inj->ttft_ms = r->t_first_ns >= 0 && r->t_send_ns >= 0
                           ? analysis_ns_to_ms(r->t_first_ns - r->t_send_ns)
                           : -1;
        inj->prompt_tokens = r->prompt_tokens > 0 ? r->prompt_tokens : r->prompt_tokens_requested;
        int64_t w = s->window_of[rows[j].row];
        if (w < 0)
            continue; /* never sent: it cannot have stalled anyone */
        (*plan_of_window)[w] = j;
        sketch *g = &s->win[w].gaps;
        if (sketch_finish(g) != 0) {
            free(rows);
            return -1;
        }
        inj->max_gap_ms = g->n > 0 ? analysis_ns_to_ms(g->max) : 0;
        inj->median_gap_ms = sketch_quantile_ns(g, 0.50) / 1e6;
    }
    free(rows);
    return 0;
}

/* The midpoint of digest row `row`, ns. */
static double row_mid_ns(int row)
{
    int64_t lo, hi, lo2, hi2;
    int first = row << ANALYSIS_DIGEST_SHIFT, last = ((row + 1) << ANALYSIS_DIGEST_SHIFT) - 1;
    if (last >= SKETCH_BUCKETS)
        last = SKETCH_BUCKETS - 1;
    sketch_bucket_range(first, &lo, &hi);
    sketch_bucket_range(last, &lo2, &hi2);
    return ((double)lo + (double)hi2) / 2;
}

/* The per-gap charts' digest from the cells and the gap distribution (finished). */
static int build_digest(analysis_stream *s, analysis_summary *out)
{
    analysis_gap_digest *d = calloc(1, sizeof *d);
    if (!d)
        return -1;
    out->gap_digest = d;
    const sketch *h0 = &s->half[0], *h1 = &s->half[1];
    d->gaps = h0->n + h1->n;
    d->max_gap_ms = analysis_ns_to_ms(s->max_gap_ns);
    d->max_t_s = (double)s->max_gap_t / 1e9;
    int64_t n = 0;
    for (size_t i = 0; i < (size_t)ANALYSIS_DIGEST_COLUMNS * ANALYSIS_DIGEST_ROWS; i++)
        n += s->cells[i];
    d->t_s = malloc((size_t)(n ? n : 1) * sizeof *d->t_s);
    d->gap_ms = malloc((size_t)(n ? n : 1) * sizeof *d->gap_ms);
    if (!d->t_s || !d->gap_ms)
        return -1;
    const double column_s = s->duration_s / ANALYSIS_DIGEST_COLUMNS;
    for (int col = 0; col < ANALYSIS_DIGEST_COLUMNS; col++)
        for (int row = 0; row < ANALYSIS_DIGEST_ROWS; row++)
            if (s->cells[(size_t)row * ANALYSIS_DIGEST_COLUMNS + (size_t)col]) {
                /* The row's middle, kept within the gaps seen (the label reads the max). */
                double mid = row_mid_ns(row);
                mid = mid > (double)s->max_gap_ns ? (double)s->max_gap_ns : mid;
                d->t_s[d->n_points] = (col + 0.5) * column_s;
                d->gap_ms[d->n_points++] = mid / 1e6;
            }
    /* The staircase: P(gap >= lo of bucket b) over the buckets that hold gaps. */
    int64_t *counts = calloc(SKETCH_BUCKETS, sizeof *counts);
    if (!counts)
        return -1;
    const sketch *hs[2] = {h0, h1};
    for (int k = 0; k < 2; k++) {
        if (hs[k]->buckets)
            for (int b = 0; b < SKETCH_BUCKETS; b++)
                counts[b] += hs[k]->buckets[b];
        else
            for (int64_t i = 0; i < hs[k]->n; i++)
                counts[sketch_bucket(hs[k]->values[i])]++;
    }
    int used = 0;
    for (int b = 0; b < SKETCH_BUCKETS; b++)
        used += counts[b] > 0;
    d->ccdf_ms = malloc((size_t)(2 * used + 1) * sizeof *d->ccdf_ms);
    d->ccdf_frac = malloc((size_t)(2 * used + 1) * sizeof *d->ccdf_frac);
    if (!d->ccdf_ms || !d->ccdf_frac) {
        free(counts);
        return -1;
    }
    int64_t below = 0;
    for (int b = 0; b < SKETCH_BUCKETS; b++) {
        if (counts[b] == 0)
            continue;
        int64_t lo, hi;
        sketch_bucket_range(b, &lo, &hi);
        double frac = (double)(d->gaps - below) / (double)d->gaps;
        if (hi > s->max_gap_ns)
            hi = s->max_gap_ns;
        d->ccdf_ms[d->n_ccdf] = (double)lo / 1e6;
        d->ccdf_frac[d->n_ccdf++] = frac;
        below += counts[b];
        /* Flat to the bucket's top, then the step down at the next bucket. */
        d->ccdf_ms[d->n_ccdf] = (double)hi / 1e6;
        d->ccdf_frac[d->n_ccdf++] = frac;
    }
    free(counts);
    return 0;
}

/* What the options pass through (names, completeness, stamps, limits), the run's users
 * (given, or the distinct ones seen) and its tokens. -1 when out of memory. */
static int summary_head(const analysis_stream *s, const analysis_options *opt,
                        analysis_summary *out)
{
    copy_name(out->label, sizeof out->label, opt->label);
    copy_name(out->engine, sizeof out->engine, opt->engine);
    copy_name(out->target, sizeof out->target, opt->target);
    out->complete = opt->complete;
    out->protocol_violations = opt->protocol_violations;
    out->stamps = opt->stamps;
    out->duration_s = s->duration_s;
    out->tokens_csv_dropped = opt->tokens_csv_dropped;
    out->tokens_csv_max_events = opt->tokens_csv_max_events;
    out->gpus = opt->gpus;
    out->users_are_streams = opt->users_are_streams;
    out->shard = opt->shard;
    out->shards = opt->shards;
    if (opt->users > 0)
        out->users = opt->users;
    else if (count_users(s, &out->users) != 0)
        return -1;
    out->tokens_received = s->tokens;
    out->streamed_throughput = s->duration_s > 0 ? (double)s->tokens / s->duration_s : 0;
    return 0;
}

/* TTFT of background requests that got a first token. -1 when out of memory. */
static int background_ttft(const tokenlog *log, analysis_dist *out)
{
    int64_t n = 0;
    double *ttft = malloc((size_t)(log->n_requests ? log->n_requests : 1) * sizeof *ttft);
    if (!ttft)
        return -1;
    for (int64_t i = 0; i < log->n_requests; i++) {
        const tokenlog_request *r = &log->requests[i];
        if (r->kind == TOKENLOG_BG && r->t_first_ns >= 0 && r->t_send_ns >= 0)
            ttft[n++] = analysis_ns_to_ms(r->t_first_ns - r->t_send_ns);
    }
    analysis_dist_from(ttft, n, out);
    free(ttft);
    return 0;
}

/* The candidates longer than threshold are the stalls: kept in s->cand, by request then
 * time; their count and share of the gaps. */
static void select_stalls(analysis_stream *s, double threshold, analysis_summary *out)
{
    int64_t n_stalls = 0;
    for (int64_t i = 0; i < s->n_cand; i++)
        if (analysis_ns_to_ms(s->cand[i].gap_ns) > threshold)
            s->cand[n_stalls++] = s->cand[i];
    s->n_cand = n_stalls;
    if (n_stalls > 1)
        qsort(s->cand, (size_t)n_stalls, sizeof *s->cand, cmp_stall);
    const int64_t n_gaps = s->half[0].n + s->half[1].n;
    out->stalls.count = n_stalls;
    out->stalls.fraction_of_gaps = n_gaps > 0 ? (double)n_stalls / (double)n_gaps : 0;
}

/* The stall list, each stall aligned or not (it overlaps an injection's wait), and the
 * distinct users each injection stalled (plan_of_window: an injection's window -> its index
 * in out->injections). -1 when out of memory. */
static int align_stalls(analysis_stream *s, const int64_t *plan_of_window, analysis_summary *out)
{
    const int64_t n_stalls = s->n_cand;
    analysis_pair *aligned_users = NULL;
    int64_t n_aligned_users = 0, cap_aligned_users = 0;
    if (s->max_end_dirty < s->n_win)
        analysis_stream_refresh_max_end(s);
    out->stall_list = calloc((size_t)(n_stalls ? n_stalls : 1), sizeof *out->stall_list);
    if (!out->stall_list)
        return -1;
    for (int64_t i = 0; i < n_stalls; i++) {
        const stream_candidate *c = &s->cand[i];
        const int64_t a = c->t_ns, b = c->t_ns + c->gap_ns;
        bool aligned = false;
        for (int64_t j = analysis_stream_windows_lower_bound(s, b) - 1; j >= 0 && s->max_end[j] > a;
             j--) {
            if (s->win[j].end <= a)
                continue;
            aligned = true;
            analysis_pair p = {plan_of_window[j], c->user};
            if (buf_grow_items((void **)&aligned_users, &cap_aligned_users, n_aligned_users + 1,
                               sizeof p) != 0) {
                free(aligned_users);
                return -1;
            }
            aligned_users[n_aligned_users++] = p;
        }
        out->stalls.aligned += aligned;
        analysis_stall *st = &out->stall_list[i];
        st->t_ns = a;
        st->gap_ns = c->gap_ns;
        st->request = c->request;
        st->user = c->user;
    }
    out->n_stall_list = n_stalls;
    out->stalls.aligned_fraction =
        n_stalls > 0 ? (double)out->stalls.aligned / (double)n_stalls : 0;

    if (n_aligned_users > 1)
        qsort(aligned_users, (size_t)n_aligned_users, sizeof *aligned_users, analysis_cmp_pair);
    for (int64_t i = 0; i < n_aligned_users; i++)
        if (i == 0 || analysis_cmp_pair(&aligned_users[i], &aligned_users[i - 1]) != 0)
            out->injections[aligned_users[i].first].users_stalled++;
    for (int j = 0; j < out->n_injections; j++)
        out->injections_with_stalls += out->injections[j].users_stalled > 0;
    free(aligned_users);
    return 0;
}

/* Stalled time: the union of the stalls, not their sum — 32 users frozen by one prefill
 * are one frozen interval of wall time — over the run's duration. -1 when out of memory. */
static int stalled_time(analysis_summary *out)
{
    const int64_t n = out->n_stall_list;
    analysis_pair *intervals = malloc((size_t)(n ? n : 1) * sizeof *intervals);
    if (!intervals)
        return -1;
    for (int64_t i = 0; i < n; i++)
        intervals[i] = (analysis_pair){out->stall_list[i].t_ns,
                                  out->stall_list[i].t_ns + out->stall_list[i].gap_ns};
    if (n > 1)
        qsort(intervals, (size_t)n, sizeof *intervals, analysis_cmp_pair);
    int64_t stalled_ns = 0;
    for (int64_t i = 0; i < n;) {
        int64_t a = intervals[i].first, b = intervals[i].second;
        for (i++; i < n && intervals[i].first < b; i++)
            if (intervals[i].second > b)
                b = intervals[i].second;
        stalled_ns += b - a;
    }
    free(intervals);
    out->stalls.stalled_time_fraction =
        out->duration_s > 0 ? (double)stalled_ns / 1e9 / out->duration_s : 0;
    return 0;
}

/* Every stall's cause and culprits (attribution.h), with the requests' longest gaps for
 * the rates. 0, or -1 with err. */
static int attribute(const analysis_stream *s, double threshold, analysis_summary *out,
                     char *err)
{
    analysis_request_counts counts = {.requests = s->n_states};
    for (int64_t k = 0; k < s->n_states; k++) {
        counts.stalled_100ms += s->states[k].longest > 100 * 1000000LL;
        counts.stalled_1s += s->states[k].longest > 1000 * 1000000LL;
    }
    out->prefix_cache = s->log.prefix_cache;
    for (int64_t k = 0; k < s->log.n_steps; k++) {
        out->prefix_queries += s->log.steps[k].prefix_queries;
        out->prefix_hits += s->log.steps[k].prefix_hits;
    }
    return analysis_attribute(&s->log, &counts, threshold, out, err);
}

int analysis_stream_end(analysis_stream *s, const analysis_options *opt, analysis_summary *out,
                        double *threshold_ms, char *err)
{
    memset(out, 0, sizeof *out);
    int rc = -1;
    int64_t *plan_of_window = NULL;
    const tokenlog *log = &s->log;

    if (summary_head(s, opt, out) != 0 || failures(log, out) != 0 ||
        gap_distributions(s, out) != 0)
        goto oom;
    out->spike_ratio = out->itl_ms.p50 > 0 ? out->itl_ms.max / out->itl_ms.p50 : 0;
    analysis_prompt_count(log, &out->prompt_tokens);
    /* The benchmark world's figures, from the requests' final rows and every gap. */
    int std_rc = standard_acc_end(s->std, log, s->duration_s, &out->standard, err);
    s->std = NULL; /* freed by end */
    if (std_rc != 0)
        goto fail;
    if (background_ttft(log, &out->ttft_ms) != 0)
        goto oom;

    const double threshold = s->threshold_known ? s->threshold_ms : 5 * out->itl_ms.p50;
    out->stalls.threshold_ms = threshold;
    if (threshold_ms)
        *threshold_ms = threshold;
    if (!(threshold >= s->floor_ms)) {
        rc = -2;
        err_set(err, "analysis: more than %lld gaps were longer than the stall threshold could "
                     "rule out before it was known (%.3f ms); run again with it",
                (long long)s->candidates_max, threshold);
        goto fail;
    }
    select_stalls(s, threshold, out);
    if (injections(s, out, &plan_of_window) != 0 || align_stalls(s, plan_of_window, out) != 0 ||
        stalled_time(out) != 0)
        goto oom;
    if (s->cells && s->half[0].n + s->half[1].n > 0 && build_digest(s, out) != 0)
        goto oom;
    if (attribute(s, threshold, out, err) != 0)
        goto fail;
    rc = 0;
    goto done;
oom:
    err_set(err, "analysis: out of memory");
fail:
    analysis_summary_free(out);
done:
    free(plan_of_window);
    analysis_stream_free(s);
    return rc;
}
