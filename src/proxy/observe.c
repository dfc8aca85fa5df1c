/* observe — the proxy's live analysis (observe.h): run's rule without a step log
 * (analysis/attribution.c, windows_build and name_culprits), applied as tokens arrive.
 *
 * Per token event the work is O(1) amortised, at ~100k events/s:
 *   - the requests live in a pool of slots, found by id through an open-addressing table
 *     (linear probing, deletion by backward shift: no tombstones, so a proxy that has seen
 *     10^9 requests probes as one that has seen ten);
 *   - each open request is on one of two lists: "waiting" (no first token yet) in send
 *     order, or "streaming" in order of its last token. A token moves its stream to the tail
 *     of the streaming list, walking back only past streams whose last token is later (events
 *     come nearly in time order: one step, mostly none); the head is the oldest last token,
 *     where the next gap can begin at the earliest;
 *   - the rolling p50 is a ring of the last window_gaps gaps and a quickselect on a scratch
 *     copy every window_gaps / 16 gaps (and at the min_gaps-th): O(window_gaps) work per
 *     window_gaps / 16 gaps, i.e. about 16 element moves per gap. Exact nearest-rank p50 of
 *     the ring when recomputed (analysis.h's rule), at most window_gaps / 16 gaps stale;
 *     chosen over log buckets because it is exact and needs no bucket-width argument.
 *
 * A gap over the threshold in force when it ends becomes a pending stall. Its candidate
 * windows are every other request sent before the gap's end whose first token is unknown or
 * after the gap's start. One is resolved once its first token came or it ended (then it is
 * a culprit only if its window lasted the stall's threshold: such windows are in the kept
 * ring below, shorter ones were never kept), or it has waited the threshold (then it is one,
 * whenever its first token comes). So a pending stall is decided once no waiting request was
 * sent in (now - threshold, gap end): a walk back from the waiting list's tail over the
 * requests sent in the last threshold. Decided at pobs_advance, in the order they pend.
 * Deciding one visits the kept windows that reach past its start and the waiting requests
 * sent before its end: per stall, not per token (a storm of 10^4 stalls over 10^4 queued
 * requests is 10^8 visits: the cost left, with the queue that long). An unknown prompt (-1)
 * counts as 0 in the quarter rule and is reported as -1. The culprit callback fires for the
 * requests a stall names (its first POBS_MAX_CULPRITS), once each; stats.stalls counts the
 * stalls decided.
 *
 * Windows that ended (first token, or the request's end without one) and lasted at least the
 * keep threshold (the threshold in force, or a pending stall's if lower) go into a ring,
 * in the order they ended, each with the running maximum of the ends before it (the analysis'
 * max_end): a stall walks back from the newest while that maximum reaches past its start.
 * They leave when their end is at or before the horizon — the oldest last token of an open
 * stream, the earliest start of a pending stall's gap, or now — no gap to come can overlap
 * them; or, the ring at max_windows, the oldest is dropped and counted.
 *
 * Inexact only where the threshold moves: a window is kept by the threshold in force when
 * it ends, so a later, lower rolling threshold does not see windows shorter than the earlier
 * one. With an absolute threshold the decisions are run's (the unit test's equivalence). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/observe.h"

/* Stalls held waiting for their windows: past this many (a server with 10^5 requests
 * queued at once, each stream stalling), the oldest is decided at once with what is known
 * (its waiting candidates count if they waited its threshold by the latest time seen). */
#define POBS_MAX_PENDING 100000

void pobs_config_default(pobs_config *cfg)
{
    cfg->stall_factor = 5;
    cfg->stall_abs_ns = 0;
    cfg->window_gaps = 65536;
    cfg->min_gaps = 32;
    cfg->max_windows = 65536;
}

const char *pobs_cause_name(int cause)
{
    static const char *const names[POBS_N_CAUSES] = {"prefill", "unexplained"};
    return (unsigned)cause < POBS_N_CAUSES ? names[cause] : "?";
}

/* ---- state --------------------------------------------------------------------------- */

/* An open request (a pool slot). */
typedef struct obs_request {
    int64_t id;
    int64_t send_ns;
    int64_t first_ns;   /* -1: waiting for its first token */
    int64_t last_ns;    /* its last token event, -1 none */
    int64_t window_seq; /* its ended long window's place in the ring, -1 none */
    int32_t user;
    int32_t prompt;     /* as known now, -1 unknown */
    int32_t prev, next; /* on the waiting or the streaming list; next: the free list */
    bool named;         /* named a culprit while waiting (its kept window carries it on) */
} obs_request;

/* One table cell: an id and its pool slot (-1: empty). */
typedef struct obs_cell {
    int64_t id;
    int32_t slot;
} obs_cell;

typedef struct obs_list {
    int32_t head, tail; /* -1 when empty */
} obs_list;

/* An ended window [send, end] that lasted at least the keep threshold. */
typedef struct obs_window {
    int64_t send_ns, end_ns;
    int64_t max_end_ns; /* the latest end of this window and every one kept before it */
    int64_t request;
    int32_t prompt;
    bool named;
} obs_window;

/* A window that qualified for the stall being decided. */
typedef struct obs_candidate {
    int64_t send_ns, request;
    int32_t prompt;     /* as known (-1 unknown) */
    int32_t rank;       /* the prompt the rule compares: unknown counts as 0 */
    bool *named;
} obs_candidate;

struct pobs {
    pobs_config cfg;
    pobs_sink sink;

    obs_request *req;         /* (cap_req) the pool */
    int32_t n_req, cap_req;   /* slots ever used, allocated */
    int32_t free_slot;        /* the free list's head, -1 none */
    obs_cell *table;          /* (table_mask + 1) cells, a power of two */
    int64_t table_mask, table_used;
    obs_list waiting;         /* by send */
    obs_list streaming;       /* by last token */
    int64_t open;

    int64_t *ring;            /* (window_gaps) the last gaps */
    int64_t *scratch;         /* (window_gaps) the quickselect's copy */
    int64_t ring_filled, ring_pos;
    int64_t gaps_seen, recompute_every;
    int64_t rolling_ns;       /* factor x the p50 at the last recompute; 0 before min_gaps */

    obs_window *win;          /* (win_cap) the kept windows; seq s at win[s % win_cap] */
    int64_t win_cap, win_head, win_tail; /* seqs [win_head, win_tail) are held */
    int64_t windows_dropped;

    pobs_stall *pend;         /* (pend_cap) a ring; pend_n from pend_head */
    int64_t pend_cap, pend_head, pend_n;
    int64_t min_pending_start, min_pending_thr; /* over the pending (a bound: never above) */

    obs_candidate *cand;      /* (cap_cand) scratch for one decision */
    int64_t cap_cand;

    int64_t stalls;
    int64_t latest_ns;        /* the latest time seen (events and now) */
};

static void note_time(pobs *o, int64_t t)
{
    if (t > o->latest_ns)
        o->latest_ns = t;
}

/* ---- the request table --------------------------------------------------------------- */

static uint64_t hash_id(int64_t id)
{
    uint64_t x = (uint64_t)id; /* murmur3's finalizer: ids ascending spread over the cells */
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* The cell holding id, or the empty cell where it would go. */
static int64_t table_cell(const pobs *o, int64_t id)
{
    int64_t i = (int64_t)(hash_id(id) & (uint64_t)o->table_mask);
    while (o->table[i].slot >= 0 && o->table[i].id != id)
        i = (i + 1) & o->table_mask;
    return i;
}

static int32_t request_slot(const pobs *o, int64_t id)
{
    return o->table[table_cell(o, id)].slot;
}

/* Double the table (its load stays at most a half). 0, or -1 when out of memory. */
static int table_grow(pobs *o)
{
    const int64_t old_cells = o->table_mask + 1, cells = old_cells * 2;
    obs_cell *old = o->table, *table = malloc((size_t)cells * sizeof *table);
    if (!table)
        return -1;
    for (int64_t i = 0; i < cells; i++)
        table[i].slot = -1;
    o->table = table;
    o->table_mask = cells - 1;
    for (int64_t i = 0; i < old_cells; i++)
        if (old[i].slot >= 0)
            o->table[table_cell(o, old[i].id)] = old[i];
    free(old);
    return 0;
}

/* Empty cell i, moving back the entries after it whose probe passed through it. */
static void table_remove(pobs *o, int64_t i)
{
    const int64_t mask = o->table_mask;
    o->table[i].slot = -1;
    o->table_used--;
    for (int64_t j = (i + 1) & mask; o->table[j].slot >= 0; j = (j + 1) & mask) {
        const int64_t home = (int64_t)(hash_id(o->table[j].id) & (uint64_t)mask);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            o->table[i] = o->table[j];
            o->table[j].slot = -1;
            i = j;
        }
    }
}

/* ---- the lists ----------------------------------------------------------------------- */

static int64_t list_key(const obs_request *r, bool by_send)
{
    return by_send ? r->send_ns : r->last_ns;
}

/* Put slot k in l after the last entry whose key is not greater than its own: walking back
 * from the tail, so an entry in time order costs one comparison. */
static void list_insert(pobs *o, obs_list *l, int32_t k, bool by_send)
{
    obs_request *req = o->req;
    const int64_t key = list_key(&req[k], by_send);
    int32_t after = l->tail;
    while (after >= 0 && list_key(&req[after], by_send) > key)
        after = req[after].prev;
    req[k].prev = after;
    req[k].next = after >= 0 ? req[after].next : l->head;
    if (req[k].next >= 0)
        req[req[k].next].prev = k;
    else
        l->tail = k;
    if (after >= 0)
        req[after].next = k;
    else
        l->head = k;
}

static void list_unlink(pobs *o, obs_list *l, int32_t k)
{
    obs_request *r = &o->req[k];
    if (r->prev >= 0)
        o->req[r->prev].next = r->next;
    else
        l->head = r->next;
    if (r->next >= 0)
        o->req[r->next].prev = r->prev;
    else
        l->tail = r->prev;
    r->prev = r->next = -1;
}

/* ---- the rolling threshold ----------------------------------------------------------- */

static void swap_i64(int64_t *v, int64_t i, int64_t j)
{
    int64_t t = v[i];
    v[i] = v[j];
    v[j] = t;
}

/* The k-th smallest of v[0..n) (0-based), v reordered: Hoare's quickselect, median-of-three
 * pivot. Expected O(n). */
static int64_t select_kth(int64_t *v, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (v[mid] < v[lo])
            swap_i64(v, mid, lo);
        if (v[hi] < v[lo])
            swap_i64(v, hi, lo);
        if (v[hi] < v[mid])
            swap_i64(v, hi, mid);
        const int64_t pivot = v[mid];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j)
                swap_i64(v, i++, j--);
        }
        /* v[lo..j] <= pivot <= v[i..hi], and everything between equals the pivot. */
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return v[k];
    }
    return v[k];
}

/* The ring's nearest-rank p50 (rank ceil(n / 2)), times the factor. */
static void recompute_threshold(pobs *o)
{
    const int64_t n = o->ring_filled;
    memcpy(o->scratch, o->ring, (size_t)n * sizeof *o->scratch);
    const int64_t p50 = select_kth(o->scratch, n, (n + 1) / 2 - 1);
    o->rolling_ns = llround(o->cfg.stall_factor * (double)p50);
}

static void push_gap(pobs *o, int64_t gap_ns)
{
    const int64_t window = o->cfg.window_gaps;
    o->ring[o->ring_pos] = gap_ns;
    o->ring_pos = o->ring_pos + 1 == window ? 0 : o->ring_pos + 1;
    if (o->ring_filled < window)
        o->ring_filled++;
    o->gaps_seen++;
    const int64_t since = o->gaps_seen - o->cfg.min_gaps;
    if (o->cfg.stall_abs_ns <= 0 && since >= 0 && since % o->recompute_every == 0)
        recompute_threshold(o);
}

int64_t pobs_threshold_ns(const pobs *o)
{
    if (o->cfg.stall_abs_ns > 0)
        return o->cfg.stall_abs_ns;
    return o->gaps_seen >= o->cfg.min_gaps ? o->rolling_ns : 0;
}

/* A window ending now is kept if it lasted this: the threshold in force, or a pending
 * stall's if lower (that stall may still name it). */
static int64_t keep_threshold(const pobs *o)
{
    int64_t thr = pobs_threshold_ns(o);
    if (o->pend_n > 0 && o->min_pending_thr < thr)
        thr = o->min_pending_thr;
    return thr;
}

/* No gap still to end, nor a pending stall, can overlap a window ending at or before this. */
static int64_t horizon(const pobs *o)
{
    int64_t h = o->latest_ns;
    if (o->streaming.head >= 0 && o->req[o->streaming.head].last_ns < h)
        h = o->req[o->streaming.head].last_ns;
    if (o->pend_n > 0 && o->min_pending_start < h)
        h = o->min_pending_start;
    return h;
}

/* ---- the kept windows ---------------------------------------------------------------- */

static obs_window *window_at(const pobs *o, int64_t seq)
{
    return &o->win[seq % o->win_cap];
}

static void windows_prune(pobs *o)
{
    const int64_t h = horizon(o);
    while (o->win_head < o->win_tail && window_at(o, o->win_head)->end_ns <= h)
        o->win_head++;
}

/* Room for one more window: the ring grown (doubling up to max_windows), or its windows that
 * can no longer matter let go, or its oldest dropped (counted). false: out of memory with
 * an empty ring (the window is dropped, counted). */
static bool windows_room(pobs *o)
{
    const int64_t held = o->win_tail - o->win_head;
    if (held < o->win_cap)
        return true;
    if (o->win_cap < o->cfg.max_windows) {
        int64_t cap = o->win_cap ? o->win_cap * 2 : 64;
        if (cap > o->cfg.max_windows)
            cap = o->cfg.max_windows;
        obs_window *w = malloc((size_t)cap * sizeof *w);
        if (w) {
            for (int64_t s = o->win_head; s < o->win_tail; s++)
                w[s % cap] = *window_at(o, s);
            free(o->win);
            o->win = w;
            o->win_cap = cap;
            return true;
        }
    }
    windows_prune(o);
    if (o->win_tail - o->win_head < o->win_cap)
        return true;
    if (held == 0)
        return false;
    o->win_head++;
    o->windows_dropped++;
    return true;
}

/* Request r's window [send, end] ended: kept if it lasted the keep threshold. */
static void window_ended(pobs *o, obs_request *r, int64_t end_ns)
{
    if (end_ns - r->send_ns < keep_threshold(o))
        return;
    if (!windows_room(o)) {
        o->windows_dropped++;
        return;
    }
    const int64_t seq = o->win_tail++;
    obs_window *w = window_at(o, seq);
    int64_t max_end = end_ns;
    if (seq > o->win_head && window_at(o, seq - 1)->max_end_ns > max_end)
        max_end = window_at(o, seq - 1)->max_end_ns;
    *w = (obs_window){r->send_ns, end_ns, max_end, r->id, r->prompt, r->named};
    r->window_seq = seq;
}

/* ---- deciding stalls ----------------------------------------------------------------- */

/* Every window that may overlap st is known at now: no request still waiting was sent in
 * (now - threshold, gap end). The waiting list is in send order: walk back from its tail
 * over the requests that have not waited the threshold yet. */
static bool decidable(const pobs *o, const pobs_stall *st, int64_t now)
{
    const int64_t b = st->t_ns + st->gap_ns;
    for (int32_t k = o->waiting.tail; k >= 0; k = o->req[k].prev) {
        const obs_request *r = &o->req[k];
        if (now - r->send_ns >= st->threshold_ns)
            break;
        if (r->send_ns < b)
            return false;
    }
    return true;
}

static int add_candidate(pobs *o, int64_t *n, obs_candidate c)
{
    if (*n == o->cap_cand) {
        int64_t cap = o->cap_cand ? o->cap_cand * 2 : 64;
        obs_candidate *p = realloc(o->cand, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        o->cand = p;
        o->cap_cand = cap;
    }
    o->cand[(*n)++] = c;
    return 0;
}

/* Ahead in a stall's culprit list: the longer prompt; of equal prompts the later send, then
 * the larger id (the order run's name_culprits visits its windows in, sent last first). */
static bool ranks_before(const obs_candidate *x, const obs_candidate *y)
{
    if (x->rank != y->rank)
        return x->rank > y->rank;
    if (x->send_ns != y->send_ns)
        return x->send_ns > y->send_ns;
    return x->request > y->request;
}

/* Decide st with what is known at now, and report it. Its windows: the kept ones overlapping
 * the gap that lasted its threshold, and the requests still waiting, sent before the gap's
 * end, that have waited it (their first token, whenever it comes, is after now). Out of
 * memory for the scratch list, the candidates found so far count. */
static void decide(pobs *o, pobs_stall *st, int64_t now)
{
    const int64_t a = st->t_ns, b = st->t_ns + st->gap_ns, thr = st->threshold_ns;
    int64_t n = 0;
    bool full = false;
    for (int64_t s = o->win_tail - 1; !full && s >= o->win_head; s--) {
        obs_window *w = window_at(o, s);
        if (w->max_end_ns <= a)
            break;
        if (w->end_ns > a && w->send_ns < b && w->end_ns - w->send_ns >= thr &&
            w->request != st->request)
            full = add_candidate(o, &n, (obs_candidate){w->send_ns, w->request, w->prompt,
                                                        w->prompt > 0 ? w->prompt : 0,
                                                        &w->named}) != 0;
    }
    for (int32_t k = o->waiting.head; !full && k >= 0 && o->req[k].send_ns < b;
         k = o->req[k].next) {
        obs_request *r = &o->req[k];
        if (now - r->send_ns >= thr && r->id != st->request)
            full = add_candidate(o, &n, (obs_candidate){r->send_ns, r->id, r->prompt,
                                                        r->prompt > 0 ? r->prompt : 0,
                                                        &r->named}) != 0;
    }

    int32_t longest = 0;
    for (int64_t i = 0; i < n; i++)
        if (o->cand[i].rank > longest)
            longest = o->cand[i].rank;
    const obs_candidate *named[POBS_MAX_CULPRITS];
    st->n_culprits = 0;
    for (int64_t i = 0; i < n; i++) {
        const obs_candidate *c = &o->cand[i];
        if ((int64_t)c->rank * 4 < longest)
            continue;
        int held = st->n_culprits < POBS_MAX_CULPRITS ? st->n_culprits : POBS_MAX_CULPRITS;
        int slot = held;
        while (slot > 0 && ranks_before(c, named[slot - 1]))
            slot--;
        if (slot < POBS_MAX_CULPRITS) {
            for (int j = held < POBS_MAX_CULPRITS ? held : POBS_MAX_CULPRITS - 1; j > slot; j--)
                named[j] = named[j - 1];
            named[slot] = c;
        }
        st->n_culprits++;
    }
    const int n_named = st->n_culprits < POBS_MAX_CULPRITS ? st->n_culprits : POBS_MAX_CULPRITS;
    for (int j = 0; j < POBS_MAX_CULPRITS; j++) {
        st->culprit[j] = j < n_named ? named[j]->request : 0;
        st->culprit_prompt[j] = j < n_named ? named[j]->prompt : 0;
    }
    st->cause = st->n_culprits > 0 ? POBS_CAUSE_PREFILL : POBS_CAUSE_UNEXPLAINED;
    o->stalls++;
    if (o->sink.stall)
        o->sink.stall(o->sink.ctx, st);
    for (int j = 0; j < n_named; j++) {
        if (*named[j]->named)
            continue;
        *named[j]->named = true;
        if (o->sink.culprit)
            o->sink.culprit(o->sink.ctx, named[j]->request, named[j]->prompt);
    }
}

static pobs_stall *pending_at(const pobs *o, int64_t i)
{
    return &o->pend[(o->pend_head + i) % o->pend_cap];
}

/* A stall to decide once its windows are known. At POBS_MAX_PENDING, or out of memory, the
 * oldest is decided at once instead. */
static void pending_push(pobs *o, const pobs_stall *st)
{
    if (o->pend_n >= POBS_MAX_PENDING) {
        pobs_stall oldest = *pending_at(o, 0);
        o->pend_head = (o->pend_head + 1) % o->pend_cap;
        o->pend_n--;
        decide(o, &oldest, o->latest_ns);
    }
    if (o->pend_n == o->pend_cap) {
        int64_t cap = o->pend_cap ? o->pend_cap * 2 : 64;
        pobs_stall *p = malloc((size_t)cap * sizeof *p);
        if (!p) {
            pobs_stall now = *st;
            decide(o, &now, o->latest_ns);
            return;
        }
        for (int64_t i = 0; i < o->pend_n; i++)
            p[i] = *pending_at(o, i);
        free(o->pend);
        o->pend = p;
        o->pend_cap = cap;
        o->pend_head = 0;
    }
    *pending_at(o, o->pend_n++) = *st;
    if (o->pend_n == 1 || st->t_ns < o->min_pending_start)
        o->min_pending_start = st->t_ns;
    if (o->pend_n == 1 || st->threshold_ns < o->min_pending_thr)
        o->min_pending_thr = st->threshold_ns;
}

/* Decide the pending stalls that can be (all of them when forced), in the order they pend;
 * the rest stay, in order, and bound the horizon again. */
static void decide_pending(pobs *o, int64_t now, bool force)
{
    int64_t kept = 0;
    for (int64_t i = 0; i < o->pend_n; i++) {
        pobs_stall st = *pending_at(o, i);
        if (force || decidable(o, &st, now)) {
            decide(o, &st, now);
            continue;
        }
        if (kept == 0 || st.t_ns < o->min_pending_start)
            o->min_pending_start = st.t_ns;
        if (kept == 0 || st.threshold_ns < o->min_pending_thr)
            o->min_pending_thr = st.threshold_ns;
        *pending_at(o, kept++) = st;
    }
    o->pend_n = kept;
}

/* ---- the interface ------------------------------------------------------------------- */

pobs *pobs_new(const pobs_config *cfg, const pobs_sink *sink)
{
    pobs *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    if (cfg)
        o->cfg = *cfg;
    else
        pobs_config_default(&o->cfg);
    if (sink)
        o->sink = *sink;
    if (o->cfg.window_gaps < 1)
        o->cfg.window_gaps = 1;
    if (o->cfg.min_gaps < 1)
        o->cfg.min_gaps = 1;
    if (o->cfg.max_windows < 1)
        o->cfg.max_windows = 1;
    o->recompute_every = o->cfg.window_gaps / 16 > 0 ? o->cfg.window_gaps / 16 : 1;
    o->free_slot = -1;
    o->waiting = o->streaming = (obs_list){-1, -1};
    o->latest_ns = INT64_MIN;
    const int64_t cells = 64;
    o->table = malloc((size_t)cells * sizeof *o->table);
    o->ring = malloc((size_t)o->cfg.window_gaps * sizeof *o->ring);
    o->scratch = malloc((size_t)o->cfg.window_gaps * sizeof *o->scratch);
    if (!o->table || !o->ring || !o->scratch) {
        pobs_free(o);
        return NULL;
    }
    for (int64_t i = 0; i < cells; i++)
        o->table[i].slot = -1;
    o->table_mask = cells - 1;
    return o;
}

void pobs_free(pobs *o)
{
    if (!o)
        return;
    free(o->req);
    free(o->table);
    free(o->ring);
    free(o->scratch);
    free(o->win);
    free(o->pend);
    free(o->cand);
    free(o);
}

int pobs_request_start(pobs *o, int64_t request, int32_t user, int64_t t_send_ns,
                       int32_t prompt_tokens)
{
    const int64_t cell = table_cell(o, request);
    if (o->table[cell].slot >= 0)
        return -1;
    if ((o->table_used + 1) * 2 > o->table_mask + 1 && table_grow(o) != 0)
        return -1;
    int32_t k = o->free_slot;
    if (k >= 0) {
        o->free_slot = o->req[k].next;
    } else {
        if (o->n_req == o->cap_req) {
            if (o->cap_req >= INT32_MAX / 2)
                return -1;
            int32_t cap = o->cap_req ? o->cap_req * 2 : 64;
            obs_request *p = realloc(o->req, (size_t)cap * sizeof *p);
            if (!p)
                return -1;
            o->req = p;
            o->cap_req = cap;
        }
        k = o->n_req++;
    }
    o->req[k] = (obs_request){.id = request, .send_ns = t_send_ns, .first_ns = -1,
                              .last_ns = -1, .window_seq = -1, .user = user,
                              .prompt = prompt_tokens, .prev = -1, .next = -1};
    o->table[table_cell(o, request)] = (obs_cell){request, k};
    o->table_used++;
    list_insert(o, &o->waiting, k, true);
    o->open++;
    note_time(o, t_send_ns);
    return 0;
}

void pobs_request_prompt(pobs *o, int64_t request, int32_t prompt_tokens)
{
    const int32_t k = request_slot(o, request);
    if (k < 0)
        return;
    obs_request *r = &o->req[k];
    r->prompt = prompt_tokens;
    if (r->window_seq >= o->win_head && r->window_seq < o->win_tail &&
        window_at(o, r->window_seq)->request == request)
        window_at(o, r->window_seq)->prompt = prompt_tokens;
}

void pobs_tokens(pobs *o, int64_t request, int64_t t_ns, int32_t n_tokens)
{
    (void)n_tokens; /* one event, whatever it carried: the user sees one */
    const int32_t k = request_slot(o, request);
    if (k < 0)
        return;
    obs_request *r = &o->req[k];
    note_time(o, t_ns);
    if (r->first_ns < 0) {
        r->first_ns = r->last_ns = t_ns;
        list_unlink(o, &o->waiting, k);
        list_insert(o, &o->streaming, k, false);
        window_ended(o, r, t_ns);
        return;
    }
    if (t_ns < r->last_ns)
        return; /* an event earlier than the stream's last: no gap to speak of */
    const int64_t a = r->last_ns, gap_ns = t_ns - a;
    r->last_ns = t_ns;
    list_unlink(o, &o->streaming, k);
    list_insert(o, &o->streaming, k, false);
    const int64_t thr = pobs_threshold_ns(o); /* in force as the gap ends, before it counts */
    if (o->sink.gap)
        o->sink.gap(o->sink.ctx, request, gap_ns);
    push_gap(o, gap_ns);
    if (thr > 0 && gap_ns > thr)
        pending_push(o, &(pobs_stall){.t_ns = a, .gap_ns = gap_ns, .request = request,
                                      .user = r->user, .threshold_ns = thr});
}

void pobs_request_end(pobs *o, int64_t request, int64_t t_end_ns)
{
    const int64_t cell = table_cell(o, request);
    const int32_t k = o->table[cell].slot;
    if (k < 0)
        return;
    obs_request *r = &o->req[k];
    note_time(o, t_end_ns);
    if (r->first_ns < 0) {
        list_unlink(o, &o->waiting, k);
        window_ended(o, r, t_end_ns);
    } else {
        list_unlink(o, &o->streaming, k);
    }
    table_remove(o, cell);
    r->next = o->free_slot;
    o->free_slot = k;
    o->open--;
}

void pobs_advance(pobs *o, int64_t now_ns)
{
    note_time(o, now_ns);
    decide_pending(o, now_ns, false);
    windows_prune(o);
}

void pobs_flush(pobs *o, int64_t now_ns)
{
    note_time(o, now_ns);
    decide_pending(o, now_ns, true);
    windows_prune(o);
}

void pobs_get_stats(const pobs *o, pobs_stats *out)
{
    *out = (pobs_stats){.open = o->open, .windows_kept = o->win_tail - o->win_head,
                        .windows_dropped = o->windows_dropped, .pending = o->pend_n,
                        .gaps = o->gaps_seen, .stalls = o->stalls};
}
