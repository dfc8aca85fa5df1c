/* stream — the one analysis of a run (analysis.h), fed event by event: the stream's state
 * (stream.h) as requests, steps and events come. analysis_summarize is this stream fed from
 * an in-memory log (summarize.c), so the long path and the short path are one
 * implementation; the summary is read off it at the end (stream_summary.c).
 *
 * Per event: the gap since its request's previous event goes to the gap distribution of
 * the run's half it began in (sketch.h: exact while the budget holds), to the gaps of every
 * injection whose wait it overlaps, and, when it may be a stall, to the candidates. Stalls
 * and their causes are decided at the end, once the threshold is known. */
#include "analysis/stream.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"

static int64_t floor_to_ns(double floor_ms);

analysis_stream *analysis_stream_begin(const analysis_options *opt, char *err)
{
    analysis_stream *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(err, "analysis: out of memory");
        return NULL;
    }
    s->duration_s = opt->duration_s;
    s->half_ns = (int64_t)(opt->duration_s * 1e9 / 2);
    s->threshold_known = opt->threshold_known || opt->threshold_ms > 0 || opt->reference_p50_ms > 0;
    s->threshold_ms = opt->threshold_known || opt->threshold_ms > 0 ? opt->threshold_ms
                      : opt->reference_p50_ms > 0                   ? 5 * opt->reference_p50_ms
                                                                    : 0;
    s->reference_p50_ms = opt->reference_p50_ms;
    s->exact_gaps_max = opt->exact_gaps_max > 0 ? opt->exact_gaps_max : ANALYSIS_EXACT_GAPS_DEFAULT;
    s->candidates_max =
        opt->stall_candidates_max > 0 ? opt->stall_candidates_max : ANALYSIS_STALL_CANDIDATES_DEFAULT;
    s->floor_ms = s->threshold_known ? s->threshold_ms : -INFINITY;
    s->floor_ns = floor_to_ns(s->floor_ms);
    if (opt->gap_digest) {
        s->cells = calloc((size_t)ANALYSIS_DIGEST_COLUMNS * ANALYSIS_DIGEST_ROWS, 1);
        s->column_per_ns = opt->duration_s > 0 ? ANALYSIS_DIGEST_COLUMNS / (opt->duration_s * 1e9) : 0;
        s->max_gap_ns = -1;
        if (!s->cells) {
            analysis_stream_free(s);
            err_set(err, "analysis: out of memory");
            return NULL;
        }
    }
    tokenlog_init(&s->log);
    sketch_init(&s->half[0], INT64_MAX);
    sketch_init(&s->half[1], INT64_MAX);
    if (analysis_idmap_init(&s->row_of, 1024) != 0 || analysis_idmap_init(&s->state_of, 1024) != 0) {
        analysis_stream_free(s);
        err_set(err, "analysis: out of memory");
        return NULL;
    }
    /* The standard metrics' ITL per class holds a quarter of the gap budget each (they see the
     * injections' gaps too), all of them when the budget is unbounded (a log in memory). */
    if (!(s->std = standard_acc_begin(opt->standard, s->exact_gaps_max == INT64_MAX
                                                         ? INT64_MAX
                                                         : s->exact_gaps_max / 4,
                                      err))) {
        analysis_stream_free(s);
        return NULL;
    }
    return s;
}

void analysis_stream_free(analysis_stream *s)
{
    if (!s)
        return;
    standard_acc_free(s->std);
    tokenlog_free(&s->log);
    analysis_idmap_free(&s->row_of);
    free(s->row_dense);
    analysis_idmap_free(&s->state_of);
    free(s->window_of);
    free(s->dense);
    free(s->states);
    sketch_free(&s->half[0]);
    sketch_free(&s->half[1]);
    free(s->cand);
    for (int64_t j = 0; j < s->n_win; j++)
        sketch_free(&s->win[j].gaps);
    free(s->win);
    free(s->max_end);
    free(s->cells);
    free(s->who);
    free(s);
}

const tokenlog *analysis_stream_log(const analysis_stream *s)
{
    return &s->log;
}

/* ---- injection windows ---------------------------------------------------------------- */

static int64_t window_end(const tokenlog_request *r)
{
    int64_t end = r->t_first_ns >= 0 ? r->t_first_ns : r->t_end_ns >= 0 ? r->t_end_ns : INT64_MAX;
    return end < r->t_send_ns ? r->t_send_ns : end;
}

static void mark_dirty(analysis_stream *s, int64_t j)
{
    if (j < s->max_end_dirty)
        s->max_end_dirty = j;
}

void analysis_stream_refresh_max_end(analysis_stream *s)
{
    for (int64_t j = s->max_end_dirty; j < s->n_win; j++)
        s->max_end[j] = j == 0 || s->win[j].end > s->max_end[j - 1] ? s->win[j].end : s->max_end[j - 1];
    s->max_end_dirty = s->n_win;
}

/* The row's window: opened when an injection is first seen sent, its end kept current. */
static int update_window(analysis_stream *s, int64_t row)
{
    const tokenlog_request *r = &s->log.requests[row];
    int64_t j = s->window_of[row];
    if (j >= 0) {
        if (r->t_send_ns != s->win[j].send) {
            /* A row given again with another send: drop its window and place it anew. */
            sketch_free(&s->win[j].gaps);
            memmove(&s->win[j], &s->win[j + 1], (size_t)(s->n_win - j - 1) * sizeof *s->win);
            s->n_win--;
            for (int64_t k = j; k < s->n_win; k++)
                s->window_of[s->win[k].row] = k;
            s->window_of[row] = -1;
            mark_dirty(s, j);
        } else {
            s->win[j].end = window_end(r);
            mark_dirty(s, j);
            return 0;
        }
    }
    if (r->kind != TOKENLOG_INJECT || r->t_send_ns < 0)
        return 0;
    if (buf_grow_items((void **)&s->win, &s->cap_win, s->n_win + 1, sizeof *s->win) != 0)
        return -1;
    if (buf_grow_items((void **)&s->max_end, &s->cap_max_end, s->n_win + 1,
                       sizeof *s->max_end) != 0)
        return -1;
    /* Sends come in order from a producer in time order: the insertion point is the end. */
    j = s->n_win;
    while (j > 0 && s->win[j - 1].send > r->t_send_ns)
        j--;
    memmove(&s->win[j + 1], &s->win[j], (size_t)(s->n_win - j) * sizeof *s->win);
    s->n_win++;
    stream_window *w = &s->win[j];
    w->send = r->t_send_ns;
    w->end = window_end(r);
    w->row = row;
    /* The gaps across one wait are few (users x the wait / a step); a wait that never ends
     * (a run cut short) gets the same budget as the run. */
    sketch_init(&w->gaps, s->exact_gaps_max);
    for (int64_t k = j; k < s->n_win; k++)
        s->window_of[s->win[k].row] = k;
    mark_dirty(s, j);
    return 0;
}

int64_t analysis_stream_windows_lower_bound(const analysis_stream *s, int64_t t)
{
    int64_t lo = 0, hi = s->n_win;
    int64_t j = s->lower_hint < s->n_win ? s->lower_hint : s->n_win;
    if ((j == 0 || s->win[j - 1].send < t) && (j == s->n_win || s->win[j].send >= t))
        return j; /* the usual case: no window sent since the last event's lookup */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (s->win[mid].send < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---- requests and steps --------------------------------------------------------------- */

static int append_request(analysis_stream *s, const tokenlog_request *r, int64_t *row)
{
    if (tokenlog_add_request(&s->log, r, row) != 0)
        return -1;
    if (s->cap_window_of < s->log.cap_requests) {
        int64_t *p = realloc(s->window_of, (size_t)s->log.cap_requests * sizeof *p);
        if (!p)
            return -1;
        s->window_of = p;
        s->cap_window_of = s->log.cap_requests;
    }
    s->window_of[*row] = -1;
    return 0;
}

/* The row of request id, -1 when none: a direct table while ids stay dense (at most 4 x the
 * rows, plus a margin; a hash lookup per row change was a cache miss each), the map beyond
 * (ids placed there stay there). */
static int64_t row_get(const analysis_stream *s, int64_t id)
{
    if (id >= 0 && id < s->cap_row_dense && s->row_dense[id] >= 0)
        return s->row_dense[id];
    return s->row_of.n > 0 ? analysis_idmap_get(&s->row_of, id) : -1;
}

/* id's row: the one it has, else row (added). -2 on out-of-memory. */
static int64_t row_get_or_add(analysis_stream *s, int64_t id, int64_t row)
{
    int64_t have = row_get(s, id);
    if (have >= 0)
        return have;
    if (id >= 0 && id < 4 * (s->log.n_requests + 4096)) {
        if (id >= s->cap_row_dense) {
            int64_t cap = s->cap_row_dense ? s->cap_row_dense : 4096;
            while (cap <= id)
                cap *= 2;
            int64_t *p = realloc(s->row_dense, (size_t)cap * sizeof *p);
            if (!p)
                return -2;
            memset(p + s->cap_row_dense, 0xff, (size_t)(cap - s->cap_row_dense) * sizeof *p);
            s->row_dense = p;
            s->cap_row_dense = cap;
        }
        s->row_dense[id] = row;
        return row;
    }
    return analysis_idmap_get_or_add(&s->row_of, id, row);
}

int analysis_stream_request(analysis_stream *s, const tokenlog_request *r, char *err)
{
    int64_t row = row_get(s, r->request);
    if (row >= 0) {
        s->log.requests[row] = *r;
    } else {
        if (append_request(s, r, &row) != 0 || row_get_or_add(s, r->request, row) == -2)
            return err_set(err, "analysis: out of memory for the requests");
    }
    if (update_window(s, row) != 0)
        return err_set(err, "analysis: out of memory for the injections");
    return 0;
}

int analysis_stream_step(analysis_stream *s, const tokenlog_step *st, char *err)
{
    if (tokenlog_add_step(&s->log, st) != 0)
        return err_set(err, "analysis: out of memory for the step log");
    return 0;
}

int analysis_stream_sched_event(analysis_stream *s, const tokenlog_sched_event *ev, char *err)
{
    if (tokenlog_add_sched_event(&s->log, ev) != 0)
        return err_set(err, "analysis: out of memory for the step log");
    return 0;
}

/* ---- events ---------------------------------------------------------------------------- */

/* The largest ns whose ms is not above floor_ms (INT64_MIN for -inf), so that the hot test
 * is an integer compare and still exactly analysis_ns_to_ms(gap) > floor_ms. */
static int64_t floor_to_ns(double floor_ms)
{
    if (!(floor_ms > -1e300))
        return INT64_MIN;
    if (floor_ms >= 9e12)
        return INT64_MAX;
    int64_t ns = (int64_t)floor(floor_ms * 1e6);
    while (analysis_ns_to_ms(ns) > floor_ms)
        ns--;
    while (!(analysis_ns_to_ms(ns + 1) > floor_ms))
        ns++;
    return ns;
}

/* The value of 0-based rank k in v[0..n) (reordering v): Hoare's selection. */
static double select_kth(double *v, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (pivot < v[j])
                j--;
            if (i <= j) {
                double t = v[i];
                v[i++] = v[j];
                v[j--] = t;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break; /* v[j+1 .. i-1] all equal the pivot */
    }
    return v[k];
}

/* The candidates are full and the threshold unknown: keep the longest half, raise the floor
 * to the longest gap dropped (every gap not longer than the floor is no stall once the
 * threshold is at least the floor; analysis_stream_end checks that it is). */
static int prune_candidates(analysis_stream *s)
{
    int64_t n = s->n_cand, keep = s->candidates_max / 2;
    double *v = calloc((size_t)n, sizeof *v);
    if (!v)
        return -1;
    for (int64_t i = 0; i < n; i++)
        v[i] = analysis_ns_to_ms(s->cand[i].gap_ns);
    double floor = select_kth(v, n, n - keep - 1);
    free(v);
    if (floor > s->floor_ms) {
        s->floor_ms = floor;
        s->floor_ns = floor_to_ns(floor);
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (analysis_ns_to_ms(s->cand[i].gap_ns) > s->floor_ms)
            s->cand[k++] = s->cand[i];
    s->n_cand = k;
    return 0;
}

/* The state of request (inserting index n_states when new): a direct table while ids stay
 * dense (at most 4 x the requests seen, plus a margin), a hash map beyond. -2 on
 * out-of-memory. */
static int64_t state_index(analysis_stream *s, int64_t request)
{
    if (request >= 0 && request < s->cap_dense) {
        int64_t *slot = &s->dense[request];
        if (*slot < 0) {
            /* New, or seen while its id was beyond the table: then the map has it. */
            int64_t k = s->state_of.n > 0 ? analysis_idmap_get(&s->state_of, request) : -1;
            *slot = k >= 0 ? k : s->n_states;
        }
        return *slot;
    }
    if (request >= 0 && request < 4 * (s->n_states + 4096)) {
        int64_t cap = s->cap_dense ? s->cap_dense : 4096;
        while (cap <= request)
            cap *= 2;
        int64_t *p = realloc(s->dense, (size_t)cap * sizeof *p);
        if (!p)
            return -2;
        memset(p + s->cap_dense, 0xff, (size_t)(cap - s->cap_dense) * sizeof *p);
        s->dense = p;
        s->cap_dense = cap;
        return state_index(s, request);
    }
    return analysis_idmap_get_or_add(&s->state_of, request, s->n_states);
}

/* Background request's state for an event at t: 1 with the gap since its previous event
 * (*a: that event's time; *user: the user of the request's first event), 0 for its first
 * event, -1 with err. */
static int bg_state(analysis_stream *s, int64_t request, int32_t user, int64_t t, int64_t *a,
                    int64_t *gap, int32_t *first_user, char *err)
{
    int64_t k = state_index(s, request);
    if (k == -2)
        return err_set(err, "analysis: out of memory for the requests' state");
    if (k == s->n_states) {
        if (buf_grow_items((void **)&s->states, &s->cap_states, s->n_states + 1,
                           sizeof *s->states) != 0)
            return err_set(err, "analysis: out of memory for the requests' state");
        s->states[s->n_states++] = (stream_req_state){request, t, -1, user};
        return 0;
    }
    stream_req_state *rs = &s->states[k];
    *a = rs->last_t;
    *gap = t - *a;
    if (*gap < 0)
        return err_set(err, "analysis: request %lld's events are not in time order (%lld ns "
                            "after %lld ns)",
                       (long long)request, (long long)t, (long long)*a);
    rs->last_t = t;
    if (*gap > rs->longest)
        rs->longest = *gap;
    *first_user = rs->user;
    return 1;
}

/* count equal gaps (a, a + gap), one for each of who[0..count), in event order: what count
 * events would have done one by one (a simulator's step stamps its batch at one instant, and
 * most of its requests had their previous token at the previous step's end). */
static int add_gaps(analysis_stream *s, int64_t a, int64_t gap, const stream_gap_owner *who,
                    int64_t count, char *err)
{
    const int64_t t = a + gap;
    /* The distribution: exact while both halves together fit the budget. */
    sketch *h = &s->half[a < s->half_ns ? 0 : 1];
    if (sketch_exact(h) && s->half[0].n + s->half[1].n + count > s->exact_gaps_max &&
        (sketch_make_histogram(&s->half[0]) != 0 || sketch_make_histogram(&s->half[1]) != 0))
        return err_set(err, "analysis: out of memory for the gap histogram");
    const int bucket = sketch_bucket(gap);
    if (sketch_add_n(h, gap, bucket, count) != 0)
        return err_set(err, "analysis: out of memory for %lld gaps",
                       (long long)(s->half[0].n + s->half[1].n));
    if (s->cells) {
        int64_t col = (int64_t)((double)a * s->column_per_ns);
        col = col < 0 ? 0 : col >= ANALYSIS_DIGEST_COLUMNS ? ANALYSIS_DIGEST_COLUMNS - 1 : col;
        s->cells[(size_t)(bucket >> ANALYSIS_DIGEST_SHIFT) * ANALYSIS_DIGEST_COLUMNS + (size_t)col] = 1;
        if (gap > s->max_gap_ns)
            s->max_gap_ns = gap, s->max_gap_t = a;
    }

    for (int64_t i = 0; i < count && gap > s->floor_ns; i++) {
        if (!s->threshold_known && s->n_cand == s->candidates_max && prune_candidates(s) != 0)
            return err_set(err, "analysis: out of memory for the long gaps");
        if (gap > s->floor_ns) {
            if (buf_grow_items((void **)&s->cand, &s->cap_cand, s->n_cand + 1,
                               sizeof *s->cand) != 0)
                return err_set(err, "analysis: out of memory for the long gaps");
            s->cand[s->n_cand++] = (stream_candidate){a, gap, who[i].request, who[i].user};
        }
    }

    /* The injections whose wait it overlaps: sent before t, ending after a (an empty gap
     * overlaps nothing). */
    if (s->n_win > 0 && gap > 0) {
        if (s->max_end_dirty < s->n_win)
            analysis_stream_refresh_max_end(s);
        if (s->max_end[s->n_win - 1] <= a)
            return 0; /* every wait ended before this gap began */
        s->lower_hint = analysis_stream_windows_lower_bound(s, t);
        for (int64_t j = s->lower_hint - 1; j >= 0 && s->max_end[j] > a; j--)
            if (s->win[j].end > a && sketch_add_n(&s->win[j].gaps, gap, bucket, count) != 0)
                return err_set(err, "analysis: out of memory for an injection's gaps");
    }
    return 0;
}

/* A background event of request at t (its tokens counted by the caller). */
static int stream_bg(analysis_stream *s, int64_t request, int32_t user, int64_t t, char *err)
{
    int64_t a = 0, gap = 0;
    stream_gap_owner who = {request, user};
    int rc = bg_state(s, request, user, t, &a, &gap, &who.user, err);
    if (rc <= 0)
        return rc;
    return add_gaps(s, a, gap, &who, 1, err);
}

int analysis_stream_event(analysis_stream *s, const tokenlog_event *ev, char *err)
{
    return analysis_stream_events(s, ev, 1, err);
}

int analysis_stream_events(analysis_stream *s, const tokenlog_event *evs, int64_t n, char *err)
{
    if (standard_acc_events(s->std, evs, n, err) != 0)
        return -1;
    if (s->cap_who < n) {
        stream_gap_owner *p = realloc(s->who, (size_t)n * sizeof *p);
        if (!p)
            return err_set(err, "analysis: out of memory for the events");
        s->who = p;
        s->cap_who = n;
    }
    /* Runs of events whose gaps are equal and equally placed go in at once. */
    int64_t run_a = 0, run_gap = -1, run_n = 0;
    for (int64_t i = 0; i < n; i++) {
        const tokenlog_event *ev = &evs[i];
        s->tokens += ev->n_tokens;
        if (ev->kind != TOKENLOG_BG)
            continue;
        int64_t a = 0, gap = 0;
        int32_t user = ev->user;
        const uint64_t id = (uint64_t)ev->request;
        stream_req_state *rs;
        if (id < (uint64_t)s->cap_dense && (uint64_t)s->dense[id] < (uint64_t)s->n_states &&
            (rs = &s->states[s->dense[id]], ev->t_ns >= rs->last_t)) {
            /* The usual case inline: a request seen before, its event in order. */
            a = rs->last_t;
            gap = ev->t_ns - a;
            rs->last_t = ev->t_ns;
            if (gap > rs->longest)
                rs->longest = gap;
            user = rs->user;
        } else {
            int rc = bg_state(s, ev->request, ev->user, ev->t_ns, &a, &gap, &user, err);
            if (rc < 0)
                return -1;
            if (rc == 0)
                continue;
        }
        if (run_n > 0 && (a != run_a || gap != run_gap)) {
            if (add_gaps(s, run_a, run_gap, s->who, run_n, err) != 0)
                return -1;
            run_n = 0;
        }
        run_a = a;
        run_gap = gap;
        s->who[run_n++] = (stream_gap_owner){ev->request, user};
    }
    if (run_n > 0 && add_gaps(s, run_a, run_gap, s->who, run_n, err) != 0)
        return -1;
    return 0;
}

/* ---- an in-memory log ------------------------------------------------------------------- */

int analysis_stream_add_log(analysis_stream *s, const tokenlog *log,
                            const analysis_timeline *tl, char *err)
{
    for (int64_t i = 0; i < log->n_requests; i++) {
        int64_t row;
        if (append_request(s, &log->requests[i], &row) != 0 ||
            row_get_or_add(s, log->requests[i].request, row) == -2 ||
            update_window(s, row) != 0)
            return err_set(err, "analysis: out of memory for the requests");
    }
    for (int64_t i = 0; i < log->n_steps; i++)
        if (analysis_stream_step(s, &log->steps[i], err) != 0)
            return -1;
    for (int64_t i = 0; i < log->n_sched_events; i++)
        if (analysis_stream_sched_event(s, &log->sched_events[i], err) != 0)
            return -1;
    for (int64_t i = 0; i < log->n_events; i++)
        s->tokens += log->events[i].n_tokens;
    if (standard_acc_events(s->std, log->events, log->n_events, err) != 0)
        return -1;
    for (int64_t k = 0; k < tl->n_segs; k++) {
        const analysis_segment *seg = &tl->segs[k];
        for (int64_t i = 0; i < seg->len; i++)
            if (stream_bg(s, seg->request, seg->user, tl->times[seg->start + i], err) != 0)
                return -1;
    }
    return 0;
}
