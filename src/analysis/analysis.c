#include "analysis/analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/attribution.h"
#include "analysis/timeline.h"
#include "common/err.h"

/* ---- percentiles ------------------------------------------------------------------ */

double analysis_quantile(const double *sorted, int64_t n, double p)
{
    if (n <= 0)
        return 0;
    /* p x n carries binary rounding error: 0.07 x 100 is 7.000000000000001, whose ceil
     * would skip a rank. Shave a relative hair off before ceil; no real p has 12
     * significant digits. */
    double x = p * (double)n;
    int64_t rank = (int64_t)ceil(x - fabs(x) * 1e-12);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

static void dist_from_sorted(const double *values, int64_t n, analysis_dist *out)
{
    memset(out, 0, sizeof *out);
    if (n <= 0)
        return;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += values[i];
    out->count = n;
    out->mean = sum / (double)n;
    out->p50 = analysis_quantile(values, n, 0.50);
    out->p90 = analysis_quantile(values, n, 0.90);
    out->p99 = analysis_quantile(values, n, 0.99);
    out->p999 = analysis_quantile(values, n, 0.999);
    out->max = values[n - 1];
}

void analysis_dist_from(double *values, int64_t n, analysis_dist *out)
{
    if (n > 0)
        analysis_sort_doubles(values, n);
    dist_from_sorted(values, n, out);
}

/* The value of 1-based rank k in the union of two sorted arrays, without merging them:
 * a binary search for how many of the k smallest come from a. */
static double kth_of_two(const double *a, int64_t na, const double *b, int64_t nb, int64_t k)
{
    int64_t lo = k > nb ? k - nb : 0, hi = k < na ? k : na;
    while (lo < hi) {
        int64_t i = lo + (hi - lo) / 2; /* take i from a, k - i from b */
        if (a[i] < b[k - i - 1])
            lo = i + 1;
        else
            hi = i;
    }
    /* lo from a, k - lo from b: the k-th is the larger of the two last taken. */
    double from_a = lo > 0 ? a[lo - 1] : -INFINITY, from_b = k - lo > 0 ? b[k - lo - 1] : -INFINITY;
    return from_a > from_b ? from_a : from_b;
}

/* The nearest-rank rule of analysis_quantile over the union of two sorted arrays. */
static double quantile_of_two(const double *a, int64_t na, const double *b, int64_t nb, double p)
{
    int64_t n = na + nb;
    if (n <= 0)
        return 0;
    double x = p * (double)n;
    int64_t rank = (int64_t)ceil(x - fabs(x) * 1e-12);
    rank = rank < 1 ? 1 : rank > n ? n : rank;
    return kth_of_two(a, na, b, nb, rank);
}

/* ---- gaps ------------------------------------------------------------------------- */

static int64_t timeline_gap_count(const analysis_timeline *tl)
{
    int64_t n = 0;
    for (int64_t k = 0; k < tl->n_segs; k++)
        n += tl->segs[k].len - 1;
    return n;
}

/* Every background gap in ms, in timeline order; *out is NULL when there are none. */
static int timeline_gaps_ms(const analysis_timeline *tl, double **out, int64_t *n, char *err)
{
    *out = NULL;
    *n = timeline_gap_count(tl);
    if (*n == 0)
        return 0;
    double *gaps = malloc((size_t)*n * sizeof *gaps);
    if (!gaps)
        return err_set(err, "analysis: out of memory for %lld gaps", (long long)*n);
    int64_t g = 0;
    for (int64_t k = 0; k < tl->n_segs; k++) {
        const int64_t *t = tl->times + tl->segs[k].start;
        for (int64_t i = 1; i < tl->segs[k].len; i++)
            gaps[g++] = analysis_ns_to_ms(t[i] - t[i - 1]);
    }
    *out = gaps;
    return 0;
}

int analysis_gaps_ms(const tokenlog *log, double **out, int64_t *n, char *err)
{
    analysis_timeline tl;
    *out = NULL;
    *n = 0;
    if (analysis_timeline_build(log, &tl, err) != 0)
        return -1;
    int rc = timeline_gaps_ms(&tl, out, n, err);
    analysis_timeline_free(&tl);
    return rc;
}

/* ---- growable helpers -------------------------------------------------------------- */

typedef struct dvec {
    double *v;
    int64_t n, cap;
} dvec;

static int push(void **items, int64_t *n, int64_t *cap, const void *item, size_t size)
{
    if (*n == *cap) {
        int64_t new_cap = *cap ? *cap * 2 : 64;
        void *p = realloc(*items, (size_t)new_cap * size);
        if (!p)
            return -1;
        *items = p;
        *cap = new_cap;
    }
    memcpy((char *)*items + (size_t)*n * size, item, size);
    (*n)++;
    return 0;
}

static int dvec_push(dvec *d, double x)
{
    return push((void **)&d->v, &d->n, &d->cap, &x, sizeof x);
}

typedef struct interval {
    int64_t a, b;
} interval;

typedef struct pair_i64 {
    int64_t first, second;
} pair_i64;

static int cmp_interval(const void *x, const void *y)
{
    const interval *a = x, *b = y;
    if (a->a != b->a)
        return (a->a > b->a) - (a->a < b->a);
    return (a->b > b->b) - (a->b < b->b);
}

static int cmp_pair(const void *x, const void *y)
{
    const pair_i64 *a = x, *b = y;
    if (a->first != b->first)
        return (a->first > b->first) - (a->first < b->first);
    return (a->second > b->second) - (a->second < b->second);
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* ---- injections -------------------------------------------------------------------- */

/* An injection's window: [send, first token], or to its end when no token came, or open
 * to the end of time when it never ended (cut short). */
typedef struct window {
    int64_t send, end;
    int inj; /* index into the summary's injections (plan order) */
} window;

/* Plan order: planned time, then actual send, then request id (a total order, so the
 * list is the same however the requests table was written). */
typedef struct plan_key {
    int64_t t_plan_ns, t_send_ns, request;
    int64_t row; /* index into the requests table */
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

static int cmp_window_send(const void *x, const void *y)
{
    const window *a = x, *b = y;
    return (a->send > b->send) - (a->send < b->send);
}

/* First index in windows[0..n) whose send is >= t. */
static int64_t windows_lower_bound(const window *w, int64_t n, int64_t t)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (w[mid].send < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* First index in t[0..n) with t[i] > x (upper) or t[i] >= x (lower). */
static int64_t times_upper_bound(const int64_t *t, int64_t n, int64_t x)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (t[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int64_t times_lower_bound(const int64_t *t, int64_t n, int64_t x)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (t[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---- noise -------------------------------------------------------------------------- */

static double spread(double a, double b)
{
    double mean = (a + b) / 2;
    return mean > 0 ? fabs(a - b) / mean : 0;
}

/* Every background gap in ms, those that began in the run's first half first: n_first of
 * them, then the rest. *out is NULL when there are none. */
static int timeline_gaps_by_half(const analysis_timeline *tl, int64_t half_ns, double **out,
                                 int64_t *n, int64_t *n_first, char *err)
{
    *out = NULL;
    *n = timeline_gap_count(tl);
    *n_first = 0;
    if (*n == 0)
        return 0;
    for (int64_t k = 0; k < tl->n_segs; k++) {
        const int64_t *t = tl->times + tl->segs[k].start;
        for (int64_t i = 1; i < tl->segs[k].len; i++)
            *n_first += t[i - 1] < half_ns;
    }
    double *gaps = malloc((size_t)*n * sizeof *gaps);
    if (!gaps)
        return err_set(err, "analysis: out of memory for %lld gaps", (long long)*n);
    int64_t front = 0, back = *n_first;
    for (int64_t k = 0; k < tl->n_segs; k++) {
        const int64_t *t = tl->times + tl->segs[k].start;
        for (int64_t i = 1; i < tl->segs[k].len; i++)
            gaps[t[i - 1] < half_ns ? front++ : back++] = analysis_ns_to_ms(t[i] - t[i - 1]);
    }
    *out = gaps;
    return 0;
}

/* The run's gaps: the whole distribution, and how far its figures differ between the
 * run's halves. Each half is sorted once and the whole is read off the two sorted halves,
 * so the noise costs no second copy and no second sort. */
static int gap_distributions(const analysis_timeline *tl, double duration_s, analysis_dist *itl,
                             analysis_dist *noise, char *err)
{
    double *gaps = NULL;
    int64_t n = 0, n0 = 0;
    if (timeline_gaps_by_half(tl, (int64_t)(duration_s * 1e9 / 2), &gaps, &n, &n0, err) != 0)
        return -1;
    double *h0 = gaps, *h1 = gaps ? gaps + n0 : NULL;
    const int64_t n1 = n - n0;
    if (n0 > 0)
        analysis_sort_doubles(h0, n0);
    if (n1 > 0)
        analysis_sort_doubles(h1, n1);
    analysis_dist d0, d1;
    dist_from_sorted(h0, n0, &d0);
    dist_from_sorted(h1, n1, &d1);
    memset(itl, 0, sizeof *itl);
    memset(noise, 0, sizeof *noise);
    if (n > 0) {
        itl->count = n;
        itl->mean = (d0.mean * (double)n0 + d1.mean * (double)n1) / (double)n;
        itl->p50 = quantile_of_two(h0, n0, h1, n1, 0.50);
        itl->p90 = quantile_of_two(h0, n0, h1, n1, 0.90);
        itl->p99 = quantile_of_two(h0, n0, h1, n1, 0.99);
        itl->p999 = quantile_of_two(h0, n0, h1, n1, 0.999);
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
    free(gaps);
    return 0;
}

/* ---- summary ----------------------------------------------------------------------- */

void analysis_summary_free(analysis_summary *s)
{
    free(s->injections);
    s->injections = NULL;
    s->n_injections = 0;
    free(s->attribution.culprits);
    s->attribution.culprits = NULL;
    s->attribution.n_culprits = 0;
    free(s->stall_list);
    s->stall_list = NULL;
    s->n_stall_list = 0;
}

bool analysis_injection_ttft(const analysis_summary *s, analysis_dist *out)
{
    memset(out, 0, sizeof *out);
    if (!s || s->n_injections == 0)
        return false;
    double *v = malloc((size_t)s->n_injections * sizeof *v);
    if (!v)
        return false;
    int n = 0;
    for (int i = 0; i < s->n_injections; i++)
        if (s->injections[i].ttft_ms >= 0)
            v[n++] = s->injections[i].ttft_ms;
    analysis_dist_from(v, n, out);
    free(v);
    return n > 0;
}

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

/* Distinct background users seen in the requests table or the token events. */
static int count_users(const tokenlog *log, const analysis_timeline *tl, char *err, int *out)
{
    int64_t n = 0, cap = 0;
    int64_t *users = NULL;
    for (int64_t i = 0; i < log->n_requests; i++) {
        if (log->requests[i].kind != TOKENLOG_BG)
            continue;
        int64_t u = log->requests[i].user;
        if (push((void **)&users, &n, &cap, &u, sizeof u) != 0)
            goto oom;
    }
    for (int64_t k = 0; k < tl->n_segs; k++) {
        int64_t u = tl->segs[k].user;
        if (push((void **)&users, &n, &cap, &u, sizeof u) != 0)
            goto oom;
    }
    if (n > 1)
        qsort(users, (size_t)n, sizeof *users, cmp_i64);
    int distinct = 0;
    for (int64_t i = 0; i < n; i++)
        if (i == 0 || users[i] != users[i - 1])
            distinct++;
    free(users);
    *out = distinct;
    return 0;
oom:
    free(users);
    return err_set(err, "analysis: out of memory counting users");
}

static void copy_name(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src ? src : "");
}

int analysis_summarize(const tokenlog *log, const analysis_options *opt, analysis_summary *out,
                       char *err)
{
    memset(out, 0, sizeof *out);
    analysis_timeline tl;
    double *ttft = NULL;
    plan_key *inj_rows = NULL;
    int64_t n_inj = 0, n_ttft = 0, n_gaps_total = 0;
    int rc = -1;
    window *windows = NULL;
    int64_t *prefix_max_end = NULL;
    dvec *inj_gaps = NULL;
    unsigned char *flags = NULL;
    interval *stalls = NULL;
    int64_t n_stalls = 0, cap_stalls = 0;
    pair_i64 *aligned_users = NULL; /* (injection, user) per aligned stall */
    int64_t n_aligned_users = 0, cap_aligned_users = 0;
    int64_t n_windows = 0;

    if (analysis_timeline_build(log, &tl, err) != 0)
        return -1;

    copy_name(out->label, sizeof out->label, opt->label);
    copy_name(out->engine, sizeof out->engine, opt->engine);
    copy_name(out->target, sizeof out->target, opt->target);
    out->complete = opt->complete;
    out->protocol_violations = opt->protocol_violations;
    out->stamps = opt->stamps;
    out->duration_s = opt->duration_s > 0 ? opt->duration_s : run_duration_s(log);
    if (opt->users > 0)
        out->users = opt->users;
    else if (count_users(log, &tl, err, &out->users) != 0)
        goto fail;
    for (int64_t i = 0; i < log->n_events; i++)
        out->tokens_received += log->events[i].n_tokens;
    for (int64_t i = 0; i < log->n_requests; i++)
        if (log->requests[i].error[0] != '\0')
            out->errors++;

    /* ITL: every background gap, and its noise (the two halves of the run). The stall pass
     * re-derives gaps from the timeline. */
    if (gap_distributions(&tl, out->duration_s, &out->itl_ms, &out->itl_noise, err) != 0)
        goto fail;
    out->spike_ratio = out->itl_ms.p50 > 0 ? out->itl_ms.max / out->itl_ms.p50 : 0;

    /* TTFT of background requests that got a first token. */
    ttft = malloc((size_t)(log->n_requests ? log->n_requests : 1) * sizeof *ttft);
    if (!ttft)
        goto oom;
    for (int64_t i = 0; i < log->n_requests; i++) {
        const tokenlog_request *r = &log->requests[i];
        if (r->kind == TOKENLOG_BG && r->t_first_ns >= 0 && r->t_send_ns >= 0)
            ttft[n_ttft++] = analysis_ns_to_ms(r->t_first_ns - r->t_send_ns);
    }
    analysis_dist_from(ttft, n_ttft, &out->ttft_ms);
    free(ttft);
    ttft = NULL;

    double threshold_ms = opt->threshold_ms > 0       ? opt->threshold_ms
                          : opt->reference_p50_ms > 0 ? 5 * opt->reference_p50_ms
                                                      : 5 * out->itl_ms.p50;
    out->stalls.threshold_ms = threshold_ms;

    /* Injections in plan order, and their windows sorted by send time for the sweep. */
    for (int64_t i = 0; i < log->n_requests; i++)
        n_inj += log->requests[i].kind == TOKENLOG_INJECT;
    if (n_inj > 0) {
        inj_rows = malloc((size_t)n_inj * sizeof *inj_rows);
        out->injections = calloc((size_t)n_inj, sizeof *out->injections);
        windows = malloc((size_t)n_inj * sizeof *windows);
        prefix_max_end = malloc((size_t)n_inj * sizeof *prefix_max_end);
        inj_gaps = calloc((size_t)n_inj, sizeof *inj_gaps);
        if (!inj_rows || !out->injections || !windows || !prefix_max_end || !inj_gaps)
            goto oom;
    }
    out->n_injections = (int)n_inj;
    for (int64_t i = 0, j = 0; i < log->n_requests; i++) {
        const tokenlog_request *r = &log->requests[i];
        if (r->kind == TOKENLOG_INJECT)
            inj_rows[j++] = (plan_key){r->t_plan_ns, r->t_send_ns, r->request, i};
    }
    if (n_inj > 1)
        qsort(inj_rows, (size_t)n_inj, sizeof *inj_rows, cmp_plan);
    for (int64_t j = 0; j < n_inj; j++) {
        const tokenlog_request *r = &log->requests[inj_rows[j].row];
        analysis_injection *inj = &out->injections[j];
        inj->t_plan_s = (double)r->t_plan_ns / 1e9;
        inj->t_send_s = r->t_send_ns >= 0 ? (double)r->t_send_ns / 1e9 : -1;
        inj->ttft_ms = r->t_first_ns >= 0 && r->t_send_ns >= 0
                           ? analysis_ns_to_ms(r->t_first_ns - r->t_send_ns)
                           : -1;
        inj->prompt_tokens = r->prompt_tokens > 0 ? r->prompt_tokens : r->prompt_tokens_requested;
        if (r->t_send_ns < 0)
            continue; /* never sent: it cannot have stalled anyone */
        window *w = &windows[n_windows++];
        w->send = r->t_send_ns;
        w->end = r->t_first_ns >= 0 ? r->t_first_ns : r->t_end_ns >= 0 ? r->t_end_ns : INT64_MAX;
        if (w->end < w->send)
            w->end = w->send;
        w->inj = (int)j;
    }
    if (n_windows > 1)
        qsort(windows, (size_t)n_windows, sizeof *windows, cmp_window_send);
    for (int64_t j = 0; j < n_windows; j++)
        prefix_max_end[j] = j == 0 || windows[j].end > prefix_max_end[j - 1]
                                ? windows[j].end
                                : prefix_max_end[j - 1];

    int64_t max_len = 0;
    for (int64_t k = 0; k < tl.n_segs; k++)
        if (tl.segs[k].len > max_len)
            max_len = tl.segs[k].len;
    flags = malloc((size_t)(max_len ? max_len : 1));
    if (!flags)
        goto oom;

    /* One sweep per request. A gap is the open interval (t[i], t[i+1]); it overlaps a
     * window [s, e] when t[i] < e and t[i+1] > s. Candidate windows for a request: those
     * sent before its last token (binary search) whose end reaches past its first token
     * (the backward walk stops once the prefix maximum of ends falls short). */
    for (int64_t k = 0; k < tl.n_segs; k++) {
        const analysis_segment *seg = &tl.segs[k];
        const int64_t *t = tl.times + seg->start;
        int64_t len = seg->len;
        if (len < 2)
            continue;
        n_gaps_total += len - 1;
        memset(flags, 0, (size_t)(len - 1));
        for (int64_t j = windows_lower_bound(windows, n_windows, t[len - 1]) - 1;
             j >= 0 && prefix_max_end[j] > t[0]; j--) {
            const window *w = &windows[j];
            if (w->end <= t[0])
                continue;
            int64_t first = times_upper_bound(t, len, w->send) - 1; /* t[first+1] > send */
            if (first < 0)
                first = 0;
            int64_t last = times_lower_bound(t, len, w->end) - 1; /* t[last] < end */
            if (last > len - 2)
                last = len - 2;
            /* Gaps first..last are exactly those with t[i] < end and t[i+1] > send. */
            for (int64_t i = first; i <= last; i++) {
                if (t[i] == t[i + 1])
                    continue; /* an empty interval overlaps nothing */
                double gap_ms = analysis_ns_to_ms(t[i + 1] - t[i]);
                if (dvec_push(&inj_gaps[w->inj], gap_ms) != 0)
                    goto oom;
                if (gap_ms > threshold_ms) {
                    flags[i] = 1;
                    pair_i64 p = {w->inj, seg->user};
                    if (push((void **)&aligned_users, &n_aligned_users, &cap_aligned_users, &p,
                             sizeof p) != 0)
                        goto oom;
                }
            }
        }
        for (int64_t i = 0; i + 1 < len; i++) {
            if (!(analysis_ns_to_ms(t[i + 1] - t[i]) > threshold_ms))
                continue;
            out->stalls.count++;
            out->stalls.aligned += flags[i];
            interval iv = {t[i], t[i + 1]};
            if (push((void **)&stalls, &n_stalls, &cap_stalls, &iv, sizeof iv) != 0)
                goto oom;
        }
    }
    out->stalls.fraction_of_gaps =
        n_gaps_total > 0 ? (double)out->stalls.count / (double)n_gaps_total : 0;
    out->stalls.aligned_fraction =
        out->stalls.count > 0 ? (double)out->stalls.aligned / (double)out->stalls.count : 0;

    /* Stalled time: the union, not the sum — 32 users frozen by one prefill are one
     * frozen interval of wall time. */
    if (n_stalls > 1)
        qsort(stalls, (size_t)n_stalls, sizeof *stalls, cmp_interval);
    int64_t stalled_ns = 0;
    for (int64_t i = 0; i < n_stalls;) {
        int64_t a = stalls[i].a, b = stalls[i].b;
        for (i++; i < n_stalls && stalls[i].a < b; i++)
            if (stalls[i].b > b)
                b = stalls[i].b;
        stalled_ns += b - a;
    }
    out->stalls.stalled_time_fraction =
        out->duration_s > 0 ? (double)stalled_ns / 1e9 / out->duration_s : 0;

    /* Per injection: the gaps users lived through across it, and who stalled. */
    for (int64_t j = 0; j < n_inj; j++) {
        analysis_dist d;
        analysis_dist_from(inj_gaps[j].v, inj_gaps[j].n, &d);
        out->injections[j].max_gap_ms = d.max;
        out->injections[j].median_gap_ms = d.p50;
    }
    if (n_aligned_users > 1)
        qsort(aligned_users, (size_t)n_aligned_users, sizeof *aligned_users, cmp_pair);
    for (int64_t i = 0; i < n_aligned_users; i++)
        if (i == 0 || cmp_pair(&aligned_users[i], &aligned_users[i - 1]) != 0)
            out->injections[aligned_users[i].first].users_stalled++;
    for (int64_t j = 0; j < n_inj; j++)
        out->injections_with_stalls += out->injections[j].users_stalled > 0;

    /* Every stall's cause and culprits, whatever the workload. */
    if (analysis_attribute(log, &tl, threshold_ms, out, err) != 0)
        goto fail;
    /* The benchmark world's metrics, per request. */
    if (standard_compute(log, opt->standard, out->duration_s, &out->standard, err) != 0)
        goto fail;

    rc = 0;
    goto done;
oom:
    err_set(err, "analysis: out of memory");
fail:
    analysis_summary_free(out);
done:
    if (inj_gaps)
        for (int64_t j = 0; j < n_inj; j++)
            free(inj_gaps[j].v);
    free(inj_gaps);
    free(ttft);
    free(inj_rows);
    free(windows);
    free(prefix_max_end);
    free(flags);
    free(stalls);
    free(aligned_users);
    analysis_timeline_free(&tl);
    return rc;
}
