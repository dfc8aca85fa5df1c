/* attribution — every stall gets one cause (analysis.h: preempted, prefill, server, not
 * scheduled, client, unexplained) and, for any cause, its culprits: the requests whose long
 * wait for a first token overlapped the gap, the dominant prompts among them (at least a
 * quarter of the longest: a short request that only queued behind the prefill waited long
 * too). Then the totals a user of real traffic asks for: per cause, per culprit ("who stalled
 * whom"), per prompt length, and the rates.
 *
 * The rule, in order: the request's own absences first (sched_events.csv, where the server
 * logs them): out of the steps when the gap began, preempted then or before the gap's end
 * ([preempted, resumed)), the stall is "preempted". Else the steps that ran during the gap:
 * a long one carrying prompt tokens is a "prefill", a long one whose model says its work was
 * short is the "server"'s. Else, the steps all short, out of them when the gap began without
 * a preemption (left out: [left_out, rejoined)) is "not scheduled"; else the server carried
 * the request and the client read late: "client". No step at all: "unexplained". A run
 * without sched_events.csv (a server that is not ours, or one that never preempted nor left
 * anyone out) keeps the rule without the absences.
 *
 * One pass over the stalls, each a binary search into three sorted lists: the long prefill
 * windows (requests whose [send, first token] lasted at least the threshold: few), the
 * server's steps (sorted by start, back to back) and the requests' absences (the sched events
 * by request, then time). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/attribution.h"
#include "common/buf.h"
#include "common/err.h"
#include "common/fsio.h"

const int analysis_prompt_bucket_lo[ANALYSIS_PROMPT_BUCKETS] = {0, 1000, 2000, 4000, 8000, 16000};

const char *analysis_cause_name(analysis_cause c)
{
    static const char *const names[ANALYSIS_N_CAUSES] = {
        "prefill", "server", "client", "unexplained", "preempted", "not_scheduled"};
    return (unsigned)c < ANALYSIS_N_CAUSES ? names[c] : "?";
}

static int prompt_bucket(int prompt_tokens)
{
    int b = 0;
    while (b + 1 < ANALYSIS_PROMPT_BUCKETS && prompt_tokens >= analysis_prompt_bucket_lo[b + 1])
        b++;
    return b;
}

/* A request that waited at least the threshold for its first token. */
typedef struct prefill_window {
    int64_t send, end;
    int64_t request;
    int32_t prompt, kind;
} prefill_window;

static int cmp_window(const void *x, const void *y)
{
    const prefill_window *a = x, *b = y;
    if (a->send != b->send)
        return (a->send > b->send) - (a->send < b->send);
    return (a->request > b->request) - (a->request < b->request);
}

/* Per culprit (index into the windows): its totals, and the users it stalled. */
typedef struct culprit_acc {
    int64_t stalls;
    double frozen_s;
} culprit_acc;

static int cmp_culprit(const void *x, const void *y)
{
    const analysis_culprit *a = x, *b = y;
    if (a->frozen_user_s != b->frozen_user_s)
        return (a->frozen_user_s < b->frozen_user_s) - (a->frozen_user_s > b->frozen_user_s);
    return (a->request > b->request) - (a->request < b->request);
}

/* The steps overlapping (a, b): from the first whose end is past a, while they start
 * before b (steps run back to back, so their ends ascend with their starts). */
static int64_t first_step_ending_after(const tokenlog_step *s, int64_t n, int64_t a)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (s[mid].t_end_ns <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int cmp_double(const void *x, const void *y)
{
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* How much slower than its model this machine ran the run's steps: the median of measured /
 * modeled over the steps that carry a model (1 with fewer than 8 of them). A cpu engine
 * priced by another machine's profile, or a sanitizer build, runs every step k times its
 * model; a step's work is then "short" only if k x its model is. The median is the typical
 * step's: a few paused steps do not move it. -1 when out of memory. */
static double machine_factor(const tokenlog *log)
{
    double *ratio = malloc((size_t)(log->n_steps ? log->n_steps : 1) * sizeof *ratio);
    if (!ratio)
        return -1;
    int64_t n = 0;
    for (int64_t k = 0; k < log->n_steps; k++) {
        const tokenlog_step *s = &log->steps[k];
        if (s->modeled_ns > 0 && s->t_end_ns > s->t_start_ns)
            ratio[n++] = (double)(s->t_end_ns - s->t_start_ns) / (double)s->modeled_ns;
    }
    double factor = 1;
    if (n >= 8) {
        qsort(ratio, (size_t)n, sizeof *ratio, cmp_double);
        factor = ratio[n / 2];
    }
    free(ratio);
    return factor;
}

static analysis_cause step_cause(const tokenlog *log, int64_t a, int64_t b, int64_t thr,
                                 double factor)
{
    bool prefill = false, overran = false, any = false;
    for (int64_t k = first_step_ending_after(log->steps, log->n_steps, a);
         k < log->n_steps && log->steps[k].t_start_ns < b; k++) {
        const tokenlog_step *s = &log->steps[k];
        any = true;
        if (s->t_end_ns - s->t_start_ns <= thr)
            continue;
        /* A long step carrying prompt tokens is a prefill, unless its model, at this
         * machine's speed, says the work was short (then the machine stretched it); a long
         * step without prompt tokens is the server's own. */
        if (s->prefill_tokens > 0 && !(s->modeled_ns > 0 && (double)s->modeled_ns * factor <= (double)thr))
            prefill = true;
        else
            overran = true;
    }
    return prefill   ? ANALYSIS_CAUSE_PREFILL
           : overran ? ANALYSIS_CAUSE_SERVER
           : any     ? ANALYSIS_CAUSE_CLIENT
                     : ANALYSIS_CAUSE_UNEXPLAINED;
}

/* ---- absences: when a request was out of the steps --------------------------------------- */

static int cmp_sched_event(const void *x, const void *y)
{
    const tokenlog_sched_event *a = x, *b = y;
    if (a->request != b->request)
        return (a->request > b->request) - (a->request < b->request);
    if (a->t_ns != b->t_ns)
        return (a->t_ns > b->t_ns) - (a->t_ns < b->t_ns);
    return (a->step > b->step) - (a->step < b->step);
}

/* Each request's absences in order (the sched events by request, then time), and each
 * request's first token (by request), for a gap that begins there. */
typedef struct absences {
    tokenlog_sched_event *ev;
    int64_t n;
    analysis_pair *first; /* (request, t_first_ns) */
    int64_t n_first;
} absences;

static void absences_free(absences *ab)
{
    free(ab->ev);
    free(ab->first);
}

static int cmp_request(const void *x, const void *y)
{
    const analysis_pair *a = x, *b = y;
    return (a->first > b->first) - (a->first < b->first);
}

/* Empty without sched events. 0, or -1 when out of memory. */
static int absences_build(const tokenlog *log, absences *ab)
{
    memset(ab, 0, sizeof *ab);
    if (log->n_sched_events == 0)
        return 0;
    size_t size = (size_t)log->n_sched_events * sizeof *ab->ev;
    ab->ev = malloc(size);
    ab->first = malloc((size_t)(log->n_requests ? log->n_requests : 1) * sizeof *ab->first);
    if (!ab->ev || !ab->first)
        return -1;
    memcpy(ab->ev, log->sched_events, size);
    ab->n = log->n_sched_events;
    qsort(ab->ev, (size_t)ab->n, sizeof *ab->ev, cmp_sched_event);
    for (int64_t i = 0; i < log->n_requests; i++)
        ab->first[ab->n_first++] =
            (analysis_pair){log->requests[i].request, log->requests[i].t_first_ns};
    qsort(ab->first, (size_t)ab->n_first, sizeof *ab->first, cmp_request);
    return 0;
}

/* Request's first token, -1 unknown. */
static int64_t first_token(const absences *ab, int64_t request)
{
    const analysis_pair key = {request, 0};
    const analysis_pair *found =
        bsearch(&key, ab->first, (size_t)ab->n_first, sizeof *ab->first, cmp_request);
    return found ? found->second : -1;
}

/* Whether request was out of the steps when the gap (a, b) began: ANALYSIS_CAUSE_PREEMPTED
 * when that absence, or one before b, was a preemption ([preempted, resumed): out of every
 * step until re-admitted, then recomputing), ANALYSIS_CAUSE_NOT_SCHEDULED when it was left
 * out ([left_out, rejoined)), else -1. At or before a: a step that carried the request
 * after its token at a would have sampled another (the simulator stamps a token at its
 * step's end, where the next step starts; a live client reads it after the server sent it,
 * and the next step started then), so an absence that only begins later in the gap follows
 * tokens the client read late. Two cases begin with the gap: a request whose first token came
 * from elsewhere (disaggregated prefill: it joins the decode instance then, and the step under
 * way cannot carry it) is out from that token when its first event leaves it out; and a log
 * whose first event for the request closes an absence (a live server's log is read from the
 * run's t = 0) had it open from the start. An absence open at the log's end lasts to its end.
 */
static int absence_cause(const absences *ab, int64_t request, int64_t a, int64_t b)
{
    const tokenlog_sched_event *ev = ab->ev;
    const int64_t n = ab->n;
    /* The first event of the request after a: what came before it says where it was at a. */
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ev[mid].request < request || (ev[mid].request == request && ev[mid].t_ns <= a))
            lo = mid + 1;
        else
            hi = mid;
    }
    int64_t k = lo;
    int32_t at_a = -1; /* the tokenlog_sched_kind that opened its absence at a; -1 none */
    if (k > 0 && ev[k - 1].request == request) {
        if (ev[k - 1].event == TOKENLOG_PREEMPTED || ev[k - 1].event == TOKENLOG_LEFT_OUT)
            at_a = ev[k - 1].event;
    } else if (k < n && ev[k].request == request) {
        const int32_t e = ev[k].event;
        at_a = e == TOKENLOG_RESUMED   ? TOKENLOG_PREEMPTED
               : e == TOKENLOG_REJOINED ? TOKENLOG_LEFT_OUT
               : (e == TOKENLOG_LEFT_OUT || e == TOKENLOG_PREEMPTED) && ev[k].t_ns < b &&
                       first_token(ab, request) == a
                   ? e
                   : -1;
    }
    if (at_a < 0)
        return -1;
    bool preempted = at_a == TOKENLOG_PREEMPTED;
    for (; !preempted && k < n && ev[k].request == request && ev[k].t_ns < b; k++)
        preempted = ev[k].event == TOKENLOG_PREEMPTED;
    return preempted ? ANALYSIS_CAUSE_PREEMPTED : ANALYSIS_CAUSE_NOT_SCHEDULED;
}

/* A stall's cause (the rule at the top of this file). absent: absence_cause's. */
static analysis_cause stall_cause(const tokenlog *log, const analysis_stall *st, int absent,
                                  int64_t thr, double factor)
{
    if (absent == ANALYSIS_CAUSE_PREEMPTED)
        return ANALYSIS_CAUSE_PREEMPTED;
    if (log->n_steps == 0)
        return st->n_culprits > 0 ? ANALYSIS_CAUSE_PREFILL : ANALYSIS_CAUSE_UNEXPLAINED;
    analysis_cause c = step_cause(log, st->t_ns, st->t_ns + st->gap_ns, thr, factor);
    if ((c == ANALYSIS_CAUSE_CLIENT || c == ANALYSIS_CAUSE_UNEXPLAINED) &&
        absent == ANALYSIS_CAUSE_NOT_SCHEDULED)
        return ANALYSIS_CAUSE_NOT_SCHEDULED;
    return c;
}

/* Steps as given (a live server's log is in start order already); a copy sorted by start
 * otherwise. */
static bool steps_sorted(const tokenlog *log)
{
    for (int64_t k = 1; k < log->n_steps; k++)
        if (log->steps[k].t_start_ns < log->steps[k - 1].t_start_ns)
            return false;
    return true;
}

/* The long prefill windows by send time, and what the stalls named of them. */
typedef struct windows {
    prefill_window *win;  /* (n) by send time */
    int64_t *max_end;     /* (n) running maximum of win[].end */
    culprit_acc *acc;     /* (n) the stalls naming each window */
    analysis_pair *wu;    /* (n_wu) a (window, user) for every stall naming it */
    int64_t n, n_wu, cap_wu;
} windows;

static void windows_free(windows *w)
{
    free(w->win);
    free(w->max_end);
    free(w->acc);
    free(w->wu);
}

/* The requests that waited at least thr for their first token (or their end, or forever),
 * by send time. 0, or -1 when out of memory. */
static int windows_build(const tokenlog *log, int64_t thr, windows *w)
{
    memset(w, 0, sizeof *w);
    w->win = malloc((size_t)(log->n_requests ? log->n_requests : 1) * sizeof *w->win);
    if (!w->win)
        return -1;
    for (int64_t i = 0; i < log->n_requests; i++) {
        const tokenlog_request *r = &log->requests[i];
        if (r->t_send_ns < 0)
            continue;
        int64_t end = r->t_first_ns >= 0 ? r->t_first_ns : r->t_end_ns >= 0 ? r->t_end_ns : INT64_MAX;
        if (end - r->t_send_ns < thr)
            continue;
        w->win[w->n++] = (prefill_window){r->t_send_ns, end, r->request,
                                          r->prompt_tokens > 0 ? r->prompt_tokens
                                                               : r->prompt_tokens_requested,
                                          r->kind};
    }
    if (w->n > 1)
        qsort(w->win, (size_t)w->n, sizeof *w->win, cmp_window);
    w->max_end = malloc((size_t)(w->n ? w->n : 1) * sizeof *w->max_end);
    w->acc = calloc((size_t)(w->n ? w->n : 1), sizeof *w->acc);
    if (!w->max_end || !w->acc)
        return -1;
    for (int64_t j = 0; j < w->n; j++)
        w->max_end[j] = j == 0 || w->win[j].end > w->max_end[j - 1] ? w->win[j].end
                                                                     : w->max_end[j - 1];
    return 0;
}

/* The culprits of stall st: the windows sent before its end whose end is past its start
 * (walking back from the last one sent before the end while the running maximum of ends
 * reaches past the start), save its own request. A request that merely queued behind the
 * prefill also waited long for its first token: only the dominant prompts are culprits,
 * those at least a quarter of the longest one overlapping the gap. st names the longest
 * prompts first (their requests); each window counts the stall and its user. 0, or -1 when
 * out of memory. */
static int name_culprits(windows *w, analysis_stall *st)
{
    const int64_t a = st->t_ns, b = st->t_ns + st->gap_ns;
    const prefill_window *win = w->win;
    int64_t lo = 0, hi = w->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (win[mid].send < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    int32_t longest_prompt = 0;
    for (int64_t j = lo - 1; j >= 0 && w->max_end[j] > a; j--)
        if (win[j].end > a && win[j].request != st->request && win[j].prompt > longest_prompt)
            longest_prompt = win[j].prompt;
    for (int64_t j = lo - 1; j >= 0 && w->max_end[j] > a; j--) {
        if (win[j].end <= a || win[j].request == st->request ||
            (int64_t)win[j].prompt * 4 < longest_prompt)
            continue;
        /* Keep the longest prompts first. */
        int slot = st->n_culprits < ANALYSIS_MAX_CULPRITS ? st->n_culprits : -1;
        for (int c = 0; c < ANALYSIS_MAX_CULPRITS && c < st->n_culprits; c++)
            if (win[j].prompt > st->culprit_prompt[c]) {
                slot = c;
                break;
            }
        if (slot >= 0) {
            int last = st->n_culprits < ANALYSIS_MAX_CULPRITS ? st->n_culprits
                                                              : ANALYSIS_MAX_CULPRITS - 1;
            for (int c = last; c > slot; c--) {
                st->culprit[c] = st->culprit[c - 1];
                st->culprit_prompt[c] = st->culprit_prompt[c - 1];
            }
            st->culprit[slot] = j; /* the window's index for now: its request below */
            st->culprit_prompt[slot] = win[j].prompt;
        }
        st->n_culprits++;
        w->acc[j].stalls++;
        w->acc[j].frozen_s += (double)(b - a) / 1e9;
        if (buf_grow_items((void **)&w->wu, &w->cap_wu, w->n_wu + 1, sizeof *w->wu) != 0)
            return -1;
        w->wu[w->n_wu++] = (analysis_pair){j, st->user};
    }
    int named = st->n_culprits < ANALYSIS_MAX_CULPRITS ? st->n_culprits : ANALYSIS_MAX_CULPRITS;
    for (int c = 0; c < named; c++)
        st->culprit[c] = win[st->culprit[c]].request;
    return 0;
}

/* Stall st (its cause decided) into the totals per cause and, for a prefill with a
 * culprit, per prompt length of its longest culprit. */
static void count_stall(analysis_attribution *at, const analysis_stall *st)
{
    const double frozen_s = (double)st->gap_ns / 1e9;
    analysis_cause_total *c = &at->by_cause[st->cause];
    c->stalls++;
    c->frozen_user_s += frozen_s;
    if (st->cause == ANALYSIS_CAUSE_PREFILL && st->n_culprits > 0) {
        analysis_cause_total *bk = &at->by_prompt[prompt_bucket(st->culprit_prompt[0])];
        bk->stalls++;
        bk->frozen_user_s += frozen_s;
    }
}

/* Who stalled whom: every window a stall named, most frozen user-seconds first, with the
 * distinct users it stalled. 0, or -1 when out of memory. */
static int culprit_table(windows *w, analysis_attribution *at)
{
    if (w->n_wu > 1)
        qsort(w->wu, (size_t)w->n_wu, sizeof *w->wu, analysis_cmp_pair);
    int n_named = 0;
    for (int64_t j = 0; j < w->n; j++)
        n_named += w->acc[j].stalls > 0;
    at->culprits = calloc((size_t)(n_named ? n_named : 1), sizeof *at->culprits);
    if (!at->culprits)
        return -1;
    for (int64_t j = 0, i = 0; j < w->n; j++) {
        if (w->acc[j].stalls == 0)
            continue;
        analysis_culprit *c = &at->culprits[at->n_culprits++];
        c->request = w->win[j].request;
        c->kind = w->win[j].kind;
        c->prompt_tokens = w->win[j].prompt;
        c->stalls = w->acc[j].stalls;
        c->frozen_user_s = w->acc[j].frozen_s;
        for (; i < w->n_wu && w->wu[i].first < j; i++) {
        }
        for (int64_t prev = -1; i < w->n_wu && w->wu[i].first == j; i++) {
            c->users += w->wu[i].second != prev;
            prev = w->wu[i].second;
        }
    }
    if (at->n_culprits > 1)
        qsort(at->culprits, (size_t)at->n_culprits, sizeof *at->culprits, cmp_culprit);
    return 0;
}

/* The rates a user of real traffic asks for, per minute, hour and request. */
static void rates(analysis_attribution *at, const analysis_request_counts *counts,
                  const analysis_summary *out)
{
    const int64_t requests = counts->requests;
    double frozen = 0;
    for (int c = 0; c < ANALYSIS_N_CAUSES; c++)
        frozen += at->by_cause[c].frozen_user_s;
    const double minutes = out->duration_s / 60;
    at->stalls_per_min = minutes > 0 ? (double)out->n_stall_list / minutes : 0;
    at->stalls_per_1k_requests = requests > 0 ? 1000.0 * (double)out->n_stall_list / (double)requests : 0;
    at->frozen_user_s_per_hour = out->duration_s > 0 ? frozen * 3600 / out->duration_s : 0;
    at->requests_stalled_100ms =
        requests > 0 ? (double)counts->stalled_100ms / (double)requests : 0;
    at->requests_stalled_1s = requests > 0 ? (double)counts->stalled_1s / (double)requests : 0;
}

int analysis_attribute(const tokenlog *log, const analysis_request_counts *counts,
                       double threshold_ms, analysis_summary *out, char *err)
{
    const int64_t thr = (int64_t)llround(threshold_ms * 1e6);
    analysis_attribution *at = &out->attribution;
    memset(at, 0, sizeof *at);
    at->step_log = log->n_steps > 0;
    if (at->step_log && !steps_sorted(log))
        return err_set(err, "analysis: the step log is not in time order");
    const double factor = at->step_log ? machine_factor(log) : 1;
    if (factor < 0)
        return err_set(err, "analysis: out of memory attributing stalls");

    windows w;
    absences ab = {0};
    int rc = -1;
    if (windows_build(log, thr, &w) != 0 || absences_build(log, &ab) != 0)
        goto done;
    for (int64_t k = 0; k < out->n_stall_list; k++) {
        analysis_stall *st = &out->stall_list[k];
        if (name_culprits(&w, st) != 0)
            goto done;
        const int absent = absence_cause(&ab, st->request, st->t_ns, st->t_ns + st->gap_ns);
        st->cause = (int32_t)stall_cause(log, st, absent, thr, factor);
        count_stall(at, st);
    }
    if (culprit_table(&w, at) != 0)
        goto done;
    rates(at, counts, out);
    rc = 0;
done:
    windows_free(&w);
    absences_free(&ab);
    return rc == 0 ? 0 : err_set(err, "analysis: out of memory attributing stalls");
}

/* printf's "%.6f" of ns / 1e6 at out; returns the end. By hand below 10^15 ns, where the
 * double is within a fraction of a ns of ns / 1e6, so the six decimals are ns's own digits. */
static char *put_ms6(char *out, int64_t ns)
{
    if (ns < 0 || ns >= 1000000000000000LL)
        return out + snprintf(out, 64, "%.6f", (double)ns / 1e6);
    out = tokenlog_put_i64(out, ns / 1000000);
    *out++ = '.';
    int64_t frac = ns % 1000000;
    for (int64_t d = 100000; d > 0; d /= 10)
        *out++ = (char)('0' + frac / d % 10);
    return out;
}

int analysis_write_stalls_csv(const analysis_summary *s, const char *path, char *err)
{
    fsio_file out;
    if (fsio_create(&out, path, err) != 0)
        return -1;
    fputs("t_ns,user,request,gap_ms,cause,culprits\n", out.f);
    /* Rows by hand (tokenlog_put_i64), the bytes of "%lld,%d,%lld,%.6f,%s," and the
     * culprits' "%lld:%d": an hour has 10^5 stalls, and printf was most of writing them. */
    for (int64_t i = 0; i < s->n_stall_list; i++) {
        const analysis_stall *st = &s->stall_list[i];
        char row[512], *p = row;
        p = tokenlog_put_i64(p, st->t_ns);
        *p++ = ',';
        p = tokenlog_put_i64(p, st->user);
        *p++ = ',';
        p = tokenlog_put_i64(p, st->request);
        *p++ = ',';
        p = put_ms6(p, st->gap_ns);
        *p++ = ',';
        const char *cause = analysis_cause_name((analysis_cause)st->cause);
        size_t len = strlen(cause);
        memcpy(p, cause, len);
        p += len;
        *p++ = ',';
        int named = st->n_culprits < ANALYSIS_MAX_CULPRITS ? st->n_culprits : ANALYSIS_MAX_CULPRITS;
        for (int c = 0; c < named; c++) {
            if (c)
                *p++ = ';';
            p = tokenlog_put_i64(p, st->culprit[c]);
            *p++ = ':';
            p = tokenlog_put_i64(p, st->culprit_prompt[c]);
        }
        if (st->n_culprits > named) {
            *p++ = ';';
            *p++ = '+';
            p = tokenlog_put_i64(p, st->n_culprits - named);
        }
        *p++ = '\n';
        fwrite(row, 1, (size_t)(p - row), out.f);
    }
    return fsio_commit(&out, err);
}
