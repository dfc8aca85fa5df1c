/* timeline — internal to analysis: the background token times regrouped per request, in
 * time order, so every later pass (gaps, stalls, attribution) is a linear sweep over
 * contiguous memory instead of chasing 32-byte events across the log. */
#ifndef STALLSCOPE_ANALYSIS_TIMELINE_H
#define STALLSCOPE_ANALYSIS_TIMELINE_H
#include <stdint.h>

#include "common/tokenlog.h"

typedef struct analysis_segment {
    int64_t request;
    int64_t start; /* index of its first time in timeline.times */
    int64_t len;   /* events; len - 1 gaps */
    int32_t user;  /* of its first event */
} analysis_segment;

typedef struct analysis_timeline {
    int64_t *times;         /* (n_times) ns; grouped by request, ascending within a group */
    int64_t n_times;
    analysis_segment *segs; /* (n_segs) ascending request id */
    int64_t n_segs;
} analysis_timeline;

/* Background events only (kind bg); inject events never make gaps. 0, or -1 with err. */
int analysis_timeline_build(const tokenlog *log, analysis_timeline *tl, char *err);
void analysis_timeline_free(analysis_timeline *tl);

/* Request id -> dense index: open addressing, O(1) per lookup (request ids are whatever the
 * writer chose, not necessarily 0..n-1). */
typedef struct analysis_idmap {
    int64_t *keys;
    int64_t *vals; /* -1: empty slot */
    uint64_t cap;  /* power of two */
    int64_t n;
} analysis_idmap;
/* cap: a power of two. 0, or -1 on out-of-memory. */
int analysis_idmap_init(analysis_idmap *m, uint64_t cap);
void analysis_idmap_free(analysis_idmap *m);
/* The index of key, inserting next_val when absent; -2 on out-of-memory. */
int64_t analysis_idmap_get_or_add(analysis_idmap *m, int64_t key, int64_t next_val);
/* The index of key, -1 when absent. */
int64_t analysis_idmap_get(const analysis_idmap *m, int64_t key);

/* ns -> ms, the one conversion every pass uses so a gap compares the same everywhere. */
static inline double analysis_ns_to_ms(int64_t ns)
{
    return (double)ns / 1e6;
}

/* In-place ascending sort (quicksort, median of three, insertion sort for short runs,
 * heapsort when the recursion degenerates): O(n log n) worst case, no allocation. */
void analysis_sort_doubles(double *v, int64_t n);
void analysis_sort_i64(int64_t *v, int64_t n);

/* Two int64 ordered by first, then second (analysis_cmp_pair, qsort's comparator): an
 * interval (start, end), an (injection, user) or a (window, user) to count distinct users. */
typedef struct analysis_pair {
    int64_t first, second;
} analysis_pair;
int analysis_cmp_pair(const void *x, const void *y);

#endif
