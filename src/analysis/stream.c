/* stream — the one analysis of a run (analysis.h), fed event by event. analysis_summarize
 * is this stream fed from an in-memory log, so the long path and the short path are one
 * implementation.
 *
 * Per event: the gap since its request's previous event goes to the gap distribution of
 * the run's half it began in (sketch.h: exact while the budget holds), to the gaps of every
 * injection whose wait it overlaps, and, when it may be a stall, to the candidates. Stalls
 * and their causes are decided at the end, once the threshold is known. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/analysis.h"
#include "analysis/attribution.h"
#include "analysis/sketch.h"
#include "analysis/timeline.h"
#include "common/buf.h"
#include "common/err.h"

/* One background request's running state. */
typedef struct req_state {
    int64_t request;
    int64_t last_t;  /* its latest event */
    int64_t longest; /* its longest gap, ns */
    int32_t user;    /* of its first event */
} req_state;

/* A gap that may be a stall: (t_ns, t_ns + gap_ns) in request's stream. */
typedef struct candidate {
    int64_t t_ns, gap_ns, request;
    int32_t user;
} candidate;

/* An injection's wait [send, end] (end: first token, else its end, else open). */
typedef struct window {
    int64_t send, end;
    int64_t row;  /* in log.requests */
    sketch gaps;  /* the background gaps overlapping it */
} window;

struct analysis_stream {
    double duration_s;
    int64_t half_ns;
    double threshold_ms; /* when threshold_known */
    bool threshold_known; /* else 5 x the run's own p50, known at the end */
    double reference_p50_ms;
    int64_t exact_gaps_max, candidates_max;

    tokenlog log;              /* requests and steps; no events */
    analysis_idmap row_of;     /* request id -> newest row (ids outside row_dense[]) */
    int64_t *row_dense;        /* (cap_row_dense) request id -> row, -1: the usual ids */
    int64_t cap_row_dense;
    int64_t *window_of;        /* (log.cap_requests) row -> window, -1 */
    int64_t cap_window_of;

    analysis_idmap state_of;   /* request id -> req_state (ids outside dense[]) */
    int64_t *dense;            /* (cap_dense) request id -> req_state, -1: ids are usually
                                * 0, 1, 2 ... (the simulator, a run's requests.csv) */
    int64_t cap_dense;
    req_state *states;
    int64_t n_states, cap_states;

    sketch half[2];            /* gaps that began before / after half_ns */
    standard_acc *std;         /* TTFT, TPOT, ITL, E2E ... of every request (standard.h) */
    int64_t tokens;

    candidate *cand;
    int64_t n_cand, cap_cand;
    double floor_ms;           /* every gap longer than this is a candidate */
    int64_t floor_ns;          /* the same test on integer ns: gap_ms > floor_ms exactly when
                                * gap_ns > floor_ns (ns -> ms is monotone) */

    /* The per-gap charts' digest (opt.gap_digest): occupied cells, and the longest gap. */
    unsigned char *cells;      /* (ANALYSIS_DIGEST_COLUMNS x DIGEST_ROWS) */
    double column_per_ns;
    int64_t max_gap_ns, max_gap_t;

    window *win;               /* by send */
    int64_t n_win, cap_win;
    int64_t *max_end;          /* running maximum of win[].end */
    int64_t cap_max_end;
    int64_t max_end_dirty;     /* max_end[j] is stale for j >= this */
    int64_t lower_hint;        /* the last windows_lower_bound: events come in time order */

    struct gap_owner *who;     /* (cap_who) a batch's run of equal gaps: whose each one is */
    int64_t cap_who;
};

static int64_t floor_to_ns(double floor_ms);

#define DIGEST_SHIFT 4 /* rows: the histogram's buckets by 16, 8 per doubling */
#define DIGEST_ROWS ((SKETCH_BUCKETS >> DIGEST_SHIFT) + 1)

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
        s->cells = calloc((size_t)ANALYSIS_DIGEST_COLUMNS * DIGEST_ROWS, 1);
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

static void refresh_max_end(analysis_stream *s)
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
    window *w = &s->win[j];
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

/* First window sent at or after t. */
static int64_t windows_lower_bound(const analysis_stream *s, int64_t t)
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
        s->states[s->n_states++] = (req_state){request, t, -1, user};
        return 0;
    }
    req_state *rs = &s->states[k];
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

/* Whose gap: a candidate's request and user (of the request's first event). */
typedef struct gap_owner {
    int64_t request;
    int32_t user;
} gap_owner;

/* count equal gaps (a, a + gap), one for each of who[0..count), in event order: what count
 * events would have done one by one (a simulator's step stamps its batch at one instant, and
 * most of its requests had their previous token at the previous step's end). */
static int add_gaps(analysis_stream *s, int64_t a, int64_t gap, const gap_owner *who,
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
        s->cells[(size_t)(bucket >> DIGEST_SHIFT) * ANALYSIS_DIGEST_COLUMNS + (size_t)col] = 1;
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
            s->cand[s->n_cand++] = (candidate){a, gap, who[i].request, who[i].user};
        }
    }

    /* The injections whose wait it overlaps: sent before t, ending after a (an empty gap
     * overlaps nothing). */
    if (s->n_win > 0 && gap > 0) {
        if (s->max_end_dirty < s->n_win)
            refresh_max_end(s);
        if (s->max_end[s->n_win - 1] <= a)
            return 0; /* every wait ended before this gap began */
        s->lower_hint = windows_lower_bound(s, t);
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
    gap_owner who = {request, user};
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
        gap_owner *p = realloc(s->who, (size_t)n * sizeof *p);
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
        req_state *rs;
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
        s->who[run_n++] = (gap_owner){ev->request, user};
    }
    if (run_n > 0 && add_gaps(s, run_a, run_gap, s->who, run_n, err) != 0)
        return -1;
    return 0;
}

/* ---- the summary ----------------------------------------------------------------------- */

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

typedef struct interval {
    int64_t a, b;
} interval;

static int cmp_interval(const void *x, const void *y)
{
    const interval *a = x, *b = y;
    if (a->a != b->a)
        return (a->a > b->a) - (a->a < b->a);
    return (a->b > b->b) - (a->b < b->b);
}

typedef struct pair_i64 {
    int64_t first, second;
} pair_i64;

static int cmp_pair(const void *x, const void *y)
{
    const pair_i64 *a = x, *b = y;
    if (a->first != b->first)
        return (a->first > b->first) - (a->first < b->first);
    return (a->second > b->second) - (a->second < b->second);
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
    const candidate *a = x, *b = y;
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
    int first = row << DIGEST_SHIFT, last = ((row + 1) << DIGEST_SHIFT) - 1;
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
    for (size_t i = 0; i < (size_t)ANALYSIS_DIGEST_COLUMNS * DIGEST_ROWS; i++)
        n += s->cells[i];
    d->t_s = malloc((size_t)(n ? n : 1) * sizeof *d->t_s);
    d->gap_ms = malloc((size_t)(n ? n : 1) * sizeof *d->gap_ms);
    if (!d->t_s || !d->gap_ms)
        return -1;
    const double column_s = s->duration_s / ANALYSIS_DIGEST_COLUMNS;
    for (int col = 0; col < ANALYSIS_DIGEST_COLUMNS; col++)
        for (int row = 0; row < DIGEST_ROWS; row++)
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

int analysis_stream_end(analysis_stream *s, const analysis_options *opt, analysis_summary *out,
                        double *threshold_ms, char *err)
{
    memset(out, 0, sizeof *out);
    int rc = -1;
    double *ttft = NULL;
    int64_t *plan_of_window = NULL;
    interval *intervals = NULL;
    pair_i64 *aligned_users = NULL;
    int64_t n_aligned_users = 0, cap_aligned_users = 0;
    const tokenlog *log = &s->log;

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
    if (opt->users > 0)
        out->users = opt->users;
    else if (count_users(s, &out->users) != 0)
        goto oom;
    out->tokens_received = s->tokens;
    out->streamed_throughput = s->duration_s > 0 ? (double)s->tokens / s->duration_s : 0;
    if (failures(log, out) != 0)
        goto oom;

    if (gap_distributions(s, out) != 0)
        goto oom;
    out->spike_ratio = out->itl_ms.p50 > 0 ? out->itl_ms.max / out->itl_ms.p50 : 0;
    /* The benchmark world's figures, from the requests' final rows and every gap. */
    int std_rc = standard_acc_end(s->std, log, s->duration_s, &out->standard, err);
    s->std = NULL; /* freed by end */
    if (std_rc != 0)
        goto fail;

    /* TTFT of background requests that got a first token. */
    int64_t n_ttft = 0;
    ttft = malloc((size_t)(log->n_requests ? log->n_requests : 1) * sizeof *ttft);
    if (!ttft)
        goto oom;
    for (int64_t i = 0; i < log->n_requests; i++) {
        const tokenlog_request *r = &log->requests[i];
        if (r->kind == TOKENLOG_BG && r->t_first_ns >= 0 && r->t_send_ns >= 0)
            ttft[n_ttft++] = analysis_ns_to_ms(r->t_first_ns - r->t_send_ns);
    }
    analysis_dist_from(ttft, n_ttft, &out->ttft_ms);

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

    /* The stalls, by request then time. */
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

    if (injections(s, out, &plan_of_window) != 0)
        goto oom;
    if (s->max_end_dirty < s->n_win)
        refresh_max_end(s);

    /* Aligned: a stall overlapping an injection's wait; the users each one stalled. */
    intervals = malloc((size_t)(n_stalls ? n_stalls : 1) * sizeof *intervals);
    out->stall_list = calloc((size_t)(n_stalls ? n_stalls : 1), sizeof *out->stall_list);
    if (!intervals || !out->stall_list)
        goto oom;
    for (int64_t i = 0; i < n_stalls; i++) {
        const candidate *c = &s->cand[i];
        const int64_t a = c->t_ns, b = c->t_ns + c->gap_ns;
        bool aligned = false;
        for (int64_t j = windows_lower_bound(s, b) - 1; j >= 0 && s->max_end[j] > a; j--) {
            if (s->win[j].end <= a)
                continue;
            aligned = true;
            pair_i64 p = {plan_of_window[j], c->user};
            if (buf_grow_items((void **)&aligned_users, &cap_aligned_users, n_aligned_users + 1,
                               sizeof p) != 0)
                goto oom;
            aligned_users[n_aligned_users++] = p;
        }
        out->stalls.aligned += aligned;
        intervals[i] = (interval){a, b};
        analysis_stall *st = &out->stall_list[i];
        st->t_ns = a;
        st->gap_ns = c->gap_ns;
        st->request = c->request;
        st->user = c->user;
    }
    out->n_stall_list = n_stalls;
    out->stalls.aligned_fraction =
        n_stalls > 0 ? (double)out->stalls.aligned / (double)n_stalls : 0;

    /* Stalled time: the union, not the sum — 32 users frozen by one prefill are one frozen
     * interval of wall time. */
    if (n_stalls > 1)
        qsort(intervals, (size_t)n_stalls, sizeof *intervals, cmp_interval);
    int64_t stalled_ns = 0;
    for (int64_t i = 0; i < n_stalls;) {
        int64_t a = intervals[i].a, b = intervals[i].b;
        for (i++; i < n_stalls && intervals[i].a < b; i++)
            if (intervals[i].b > b)
                b = intervals[i].b;
        stalled_ns += b - a;
    }
    out->stalls.stalled_time_fraction =
        out->duration_s > 0 ? (double)stalled_ns / 1e9 / out->duration_s : 0;

    if (n_aligned_users > 1)
        qsort(aligned_users, (size_t)n_aligned_users, sizeof *aligned_users, cmp_pair);
    for (int64_t i = 0; i < n_aligned_users; i++)
        if (i == 0 || cmp_pair(&aligned_users[i], &aligned_users[i - 1]) != 0)
            out->injections[aligned_users[i].first].users_stalled++;
    for (int j = 0; j < out->n_injections; j++)
        out->injections_with_stalls += out->injections[j].users_stalled > 0;

    if (s->cells && n_gaps > 0 && build_digest(s, out) != 0)
        goto oom;

    /* Every stall's cause and culprits, whatever the workload. */
    analysis_request_counts counts = {.requests = s->n_states};
    for (int64_t k = 0; k < s->n_states; k++) {
        counts.stalled_100ms += s->states[k].longest > 100 * 1000000LL;
        counts.stalled_1s += s->states[k].longest > 1000 * 1000000LL;
    }
    if (analysis_attribute(log, &counts, threshold, out, err) != 0)
        goto fail;
    rc = 0;
    goto done;
oom:
    err_set(err, "analysis: out of memory");
fail:
    analysis_summary_free(out);
done:
    free(ttft);
    free(plan_of_window);
    free(intervals);
    free(aligned_users);
    analysis_stream_free(s);
    return rc;
}

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
    /* Rows as they are (duplicated ids too): the log is the whole truth already. */
    for (int64_t i = 0; i < log->n_requests; i++) {
        int64_t row;
        if (append_request(s, &log->requests[i], &row) != 0 ||
            row_get_or_add(s, log->requests[i].request, row) == -2 ||
            update_window(s, row) != 0) {
            err_set(err, "analysis: out of memory for the requests");
            goto fail;
        }
    }
    for (int64_t i = 0; i < log->n_steps; i++)
        if (analysis_stream_step(s, &log->steps[i], err) != 0)
            goto fail;
    for (int64_t i = 0; i < log->n_events; i++)
        s->tokens += log->events[i].n_tokens;
    if (standard_acc_events(s->std, log->events, log->n_events, err) != 0)
        goto fail;
    /* Background events per request, in time order (the timeline sorted them). */
    for (int64_t k = 0; k < tl->n_segs; k++) {
        const analysis_segment *seg = &tl->segs[k];
        for (int64_t i = 0; i < seg->len; i++)
            if (stream_bg(s, seg->request, seg->user, tl->times[seg->start + i], err) != 0)
                goto fail;
    }
    return analysis_stream_end(s, &o, out, threshold_ms, err);
fail:
    analysis_stream_free(s);
    return -1;
}

/* ---- a run's files ---------------------------------------------------------------------- */

/* One pass: the rows (in memory) then tokens.csv from disk. 0, -1, or -2 (end's). */
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
