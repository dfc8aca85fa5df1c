#include "analysis/timeline.h"

#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* ---- sorting --------------------------------------------------------------------- */

/* qsort pays an indirect call per comparison; on 10^8 gaps that is most of the run time.
 * One introsort body, instantiated for the two element types we sort in bulk. */
#define DEFINE_INTROSORT(NAME, T)                                                        \
    static void NAME##_insertion(T *v, int64_t n)                                        \
    {                                                                                    \
        for (int64_t i = 1; i < n; i++) {                                                \
            T x = v[i];                                                                  \
            int64_t j = i;                                                               \
            while (j > 0 && v[j - 1] > x) {                                              \
                v[j] = v[j - 1];                                                         \
                j--;                                                                     \
            }                                                                            \
            v[j] = x;                                                                    \
        }                                                                                \
    }                                                                                    \
    static void NAME##_sift(T *v, int64_t root, int64_t n)                               \
    {                                                                                    \
        for (;;) {                                                                       \
            int64_t child = 2 * root + 1;                                                \
            if (child >= n)                                                              \
                return;                                                                  \
            if (child + 1 < n && v[child] < v[child + 1])                                \
                child++;                                                                 \
            if (!(v[root] < v[child]))                                                   \
                return;                                                                  \
            T tmp = v[root];                                                             \
            v[root] = v[child];                                                          \
            v[child] = tmp;                                                              \
            root = child;                                                                \
        }                                                                                \
    }                                                                                    \
    static void NAME##_heapsort(T *v, int64_t n)                                         \
    {                                                                                    \
        for (int64_t i = n / 2 - 1; i >= 0; i--)                                         \
            NAME##_sift(v, i, n);                                                        \
        for (int64_t end = n - 1; end > 0; end--) {                                      \
            T tmp = v[0];                                                                \
            v[0] = v[end];                                                               \
            v[end] = tmp;                                                                \
            NAME##_sift(v, 0, end);                                                      \
        }                                                                                \
    }                                                                                    \
    static void NAME##_intro(T *v, int64_t n, int depth)                                 \
    {                                                                                    \
        while (n > 24) {                                                                 \
            if (depth-- == 0) {                                                          \
                NAME##_heapsort(v, n);                                                   \
                return;                                                                  \
            }                                                                            \
            /* Median of three as pivot; Hoare partition splits runs of equal values    \
             * evenly, which matters: simulated gaps repeat the same step time. */      \
            T a = v[0], b = v[n / 2], c = v[n - 1];                                      \
            T pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b)); \
            int64_t i = -1, j = n;                                                       \
            for (;;) {                                                                   \
                do                                                                       \
                    i++;                                                                 \
                while (v[i] < pivot);                                                    \
                do                                                                       \
                    j--;                                                                 \
                while (pivot < v[j]);                                                    \
                if (i >= j)                                                              \
                    break;                                                               \
                T tmp = v[i];                                                            \
                v[i] = v[j];                                                             \
                v[j] = tmp;                                                              \
            }                                                                            \
            /* [0, j] <= pivot <= [j + 1, n): recurse on the smaller side. */            \
            int64_t left = j + 1;                                                        \
            if (left < n - left) {                                                       \
                NAME##_intro(v, left, depth);                                            \
                v += left;                                                               \
                n -= left;                                                               \
            } else {                                                                     \
                NAME##_intro(v + left, n - left, depth);                                 \
                n = left;                                                                \
            }                                                                            \
        }                                                                                \
        NAME##_insertion(v, n);                                                          \
    }

DEFINE_INTROSORT(sort_d, double)
DEFINE_INTROSORT(sort_i, int64_t)

static int depth_limit(int64_t n)
{
    int depth = 0;
    while (n > 1) {
        n >>= 1;
        depth++;
    }
    return 2 * depth + 2;
}

void analysis_sort_doubles(double *v, int64_t n)
{
    if (n > 1)
        sort_d_intro(v, n, depth_limit(n));
}

void analysis_sort_i64(int64_t *v, int64_t n)
{
    if (n > 1)
        sort_i_intro(v, n, depth_limit(n));
}

int analysis_cmp_pair(const void *x, const void *y)
{
    const analysis_pair *a = x, *b = y;
    if (a->first != b->first)
        return (a->first > b->first) - (a->first < b->first);
    return (a->second > b->second) - (a->second < b->second);
}

/* ---- request id -> dense index ---------------------------------------------------- */

/* Request ids are whatever the writer chose (not necessarily 0..n-1), so map them through
 * an open-addressing table: O(1) per event, where a binary search would be O(log n). */
static uint64_t hash_id(int64_t key)
{
    uint64_t x = (uint64_t)key;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

int analysis_idmap_init(analysis_idmap *m, uint64_t cap)
{
    m->cap = cap;
    m->n = 0;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        m->keys = NULL;
        m->vals = NULL;
        return -1;
    }
    memset(m->vals, 0xff, cap * sizeof *m->vals);
    return 0;
}

void analysis_idmap_free(analysis_idmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static int64_t *idmap_slot(const analysis_idmap *m, int64_t key, uint64_t *slot)
{
    uint64_t i = hash_id(key) & (m->cap - 1);
    while (m->vals[i] >= 0 && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    *slot = i;
    return &m->vals[i];
}

/* The dense index of key, inserting next_val when absent; -2 on out-of-memory. */
int64_t analysis_idmap_get_or_add(analysis_idmap *m, int64_t key, int64_t next_val)
{
    uint64_t slot;
    int64_t *val = idmap_slot(m, key, &slot);
    if (*val >= 0)
        return *val;
    if ((uint64_t)(m->n + 1) * 2 > m->cap) {
        analysis_idmap bigger;
        if (analysis_idmap_init(&bigger, m->cap * 2) != 0)
            return -2;
        for (uint64_t i = 0; i < m->cap; i++)
            if (m->vals[i] >= 0) {
                uint64_t s;
                *idmap_slot(&bigger, m->keys[i], &s) = m->vals[i];
                bigger.keys[s] = m->keys[i];
            }
        bigger.n = m->n;
        analysis_idmap_free(m);
        *m = bigger;
        val = idmap_slot(m, key, &slot);
    }
    m->keys[slot] = key;
    *val = next_val;
    m->n++;
    return next_val;
}

int64_t analysis_idmap_get(const analysis_idmap *m, int64_t key)
{
    uint64_t slot;
    return *idmap_slot(m, key, &slot);
}

/* ---- timeline ---------------------------------------------------------------------- */

typedef struct seg_key {
    int64_t request;
    int64_t idx; /* dense index, in order of first appearance */
} seg_key;

static int cmp_seg_key(const void *a, const void *b)
{
    int64_t ra = ((const seg_key *)a)->request, rb = ((const seg_key *)b)->request;
    return (ra > rb) - (ra < rb);
}

void analysis_timeline_free(analysis_timeline *tl)
{
    free(tl->times);
    free(tl->segs);
    memset(tl, 0, sizeof *tl);
}

int analysis_timeline_build(const tokenlog *log, analysis_timeline *tl, char *err)
{
    memset(tl, 0, sizeof *tl);
    analysis_idmap map;
    memset(&map, 0, sizeof map);
    analysis_segment *segs = NULL; /* in order of first appearance */
    int64_t n_segs = 0, cap_segs = 0;
    seg_key *order = NULL;
    int64_t *fill = NULL;

    if (analysis_idmap_init(&map, 1024) != 0)
        goto oom;

    /* Pass 1: count events per request (a counting sort's histogram). */
    int64_t n_bg = 0;
    for (int64_t i = 0; i < log->n_events; i++) {
        const tokenlog_event *ev = &log->events[i];
        if (ev->kind != TOKENLOG_BG)
            continue;
        int64_t idx = analysis_idmap_get_or_add(&map, ev->request, n_segs);
        if (idx == -2)
            goto oom;
        if (idx == n_segs) {
            if (n_segs == cap_segs) {
                int64_t cap = cap_segs ? cap_segs * 2 : 256;
                analysis_segment *p = realloc(segs, (size_t)cap * sizeof *p);
                if (!p)
                    goto oom;
                segs = p;
                cap_segs = cap;
            }
            segs[n_segs].request = ev->request;
            segs[n_segs].user = ev->user;
            segs[n_segs].len = 0;
            segs[n_segs].start = 0;
            n_segs++;
        }
        segs[idx].len++;
        n_bg++;
    }

    /* Groups in ascending request id, so analysis_gaps_ms is in (request, time) order. */
    order = malloc((size_t)(n_segs ? n_segs : 1) * sizeof *order);
    fill = malloc((size_t)(n_segs ? n_segs : 1) * sizeof *fill);
    tl->times = malloc((size_t)(n_bg ? n_bg : 1) * sizeof *tl->times);
    tl->segs = malloc((size_t)(n_segs ? n_segs : 1) * sizeof *tl->segs);
    if (!order || !fill || !tl->times || !tl->segs)
        goto oom;
    for (int64_t s = 0; s < n_segs; s++) {
        order[s].request = segs[s].request;
        order[s].idx = s;
    }
    qsort(order, (size_t)n_segs, sizeof *order, cmp_seg_key);
    int64_t start = 0;
    for (int64_t k = 0; k < n_segs; k++) {
        analysis_segment *s = &segs[order[k].idx];
        s->start = start;
        start += s->len;
        fill[order[k].idx] = s->start;
        tl->segs[k] = *s;
    }

    /* Pass 2: scatter times into their groups; the scatter is stable, so a log written in
     * time order (the normal case) needs no further sorting. */
    int64_t last_request = 0, last_idx = -1;
    for (int64_t i = 0; i < log->n_events; i++) {
        const tokenlog_event *ev = &log->events[i];
        if (ev->kind != TOKENLOG_BG)
            continue;
        if (last_idx < 0 || ev->request != last_request) {
            last_idx = analysis_idmap_get(&map, ev->request);
            last_request = ev->request;
        }
        tl->times[fill[last_idx]++] = ev->t_ns;
    }
    tl->n_times = n_bg;
    tl->n_segs = n_segs;

    for (int64_t k = 0; k < n_segs; k++) {
        int64_t *t = tl->times + tl->segs[k].start;
        int64_t len = tl->segs[k].len;
        for (int64_t i = 1; i < len; i++)
            if (t[i] < t[i - 1]) {
                analysis_sort_i64(t, len);
                break;
            }
    }

    analysis_idmap_free(&map);
    free(segs);
    free(order);
    free(fill);
    return 0;

oom:
    analysis_idmap_free(&map);
    free(segs);
    free(order);
    free(fill);
    analysis_timeline_free(tl);
    return err_set(err, "analysis: out of memory for %lld token events",
                   (long long)log->n_events);
}
