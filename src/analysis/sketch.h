/* sketch — internal to analysis: a distribution of non-negative integer durations (ns) that
 * is exact while it holds at most `exact_max` values and a log-bucketed histogram after.
 *
 * Exact: the values themselves; sorted at the end, nearest-rank percentiles are observed
 * values (analysis.h), byte for byte what the in-memory analysis always gave.
 * Histogram: counts per bucket. Values below 2^(SKETCH_MANTISSA_BITS + 1) ns have a bucket
 * each (exact); above, a bucket spans the values sharing their leading
 * SKETCH_MANTISSA_BITS + 1 bits, so a value v in [2^e, 2^(e+1)) lies in a bucket
 * 2^(e - SKETCH_MANTISSA_BITS) wide. A percentile is read as the midpoint of the bucket that
 * holds its nearest rank (the counts are exact, so the rank is right), clamped to the
 * observed min and max: |midpoint - v| <= (width - 1) / 2 < 2^(e - SKETCH_MANTISSA_BITS - 1)
 * <= v x 2^-(SKETCH_MANTISSA_BITS + 1). Relative error < SKETCH_RELATIVE_ERROR. Count, max
 * and min stay exact; the mean is the sum over the count (summed in arrival order). */
#ifndef STALLSCOPE_ANALYSIS_SKETCH_H
#define STALLSCOPE_ANALYSIS_SKETCH_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SKETCH_MANTISSA_BITS 7
#define SKETCH_RELATIVE_ERROR (1.0 / (double)(1 << (SKETCH_MANTISSA_BITS + 1))) /* 0.39 % */
#define SKETCH_EXACT_BUCKETS (1 << (SKETCH_MANTISSA_BITS + 1)) /* 256: one per value */
#define SKETCH_BUCKETS (SKETCH_EXACT_BUCKETS + (63 - (SKETCH_MANTISSA_BITS + 1)) * (1 << SKETCH_MANTISSA_BITS))

typedef struct sketch {
    int64_t exact_max; /* values held before switching to the histogram */
    /* While exact: values[0..n_entries), each held counts[i] times (1 while counts is NULL:
     * counts appear with the first sketch_add_n of several copies, so a simulator's batch of
     * equal gaps is one entry, and a live run's distinct gaps cost no more than before).
     * After sketch_finish: values[0..n), sorted, each value as often as it was added. */
    int64_t *values;
    int64_t *counts;
    int64_t n_entries;
    int64_t cap;       /* of values and counts */
    int64_t *buckets;  /* (SKETCH_BUCKETS) once a histogram, else NULL */
    int64_t n;
    int64_t min, max;  /* ns, valid when n > 0 */
    double sum_ns;     /* sum of the values, arrival order (the histogram's mean) */
} sketch;

void sketch_init(sketch *s, int64_t exact_max);
void sketch_free(sketch *s);
/* Bucket of a value, and the bucket's lowest and highest value (for tests). */
static inline int sketch_bucket(int64_t ns)
{
    uint64_t v = (uint64_t)ns;
    if (v < SKETCH_EXACT_BUCKETS)
        return (int)v;
    int e = 63 - __builtin_clzll(v); /* v in [2^e, 2^(e+1)), e >= MANTISSA_BITS + 1 */
    int shift = e - SKETCH_MANTISSA_BITS;
    int mant = (int)(v >> shift) - (1 << SKETCH_MANTISSA_BITS); /* [0, 2^MANTISSA_BITS) */
    return SKETCH_EXACT_BUCKETS + (e - (SKETCH_MANTISSA_BITS + 1)) * (1 << SKETCH_MANTISSA_BITS) + mant;
}
void sketch_bucket_range(int bucket, int64_t *lo, int64_t *hi);

/* Add one value (ns, >= 0). -1 on out-of-memory. The histogram's case inline: it is the
 * one that runs 10^8 times. */
int sketch_add_slow(sketch *s, int64_t ns);
static inline int sketch_add(sketch *s, int64_t ns)
{
    if (s->buckets && ns >= s->min && ns <= s->max) {
        s->sum_ns += (double)ns;
        s->buckets[sketch_bucket(ns)]++;
        s->n++;
        return 0;
    }
    return sketch_add_slow(s, ns);
}
/* The same with the value's bucket known already (bucket == sketch_bucket(ns)). */
static inline int sketch_add_in(sketch *s, int64_t ns, int bucket)
{
    if (s->buckets && ns >= s->min && ns <= s->max) {
        s->sum_ns += (double)ns;
        s->buckets[bucket]++;
        s->n++;
        return 0;
    }
    return sketch_add_slow(s, ns);
}
/* Add count copies of one value (bucket == sketch_bucket(ns), count >= 1): what count
 * sketch_add calls would do, to the bit (the sum too: a product of integers below 2^53
 * is the sum of its copies, added one by one otherwise). -1 on out-of-memory. */
int sketch_add_n_slow(sketch *s, int64_t ns, int bucket, int64_t count);
static inline int sketch_add_n(sketch *s, int64_t ns, int bucket, int64_t count)
{
    if (s->buckets && ns >= s->min && ns <= s->max && s->sum_ns < 0x1p52 &&
        (double)ns * (double)count < 0x1p52) {
        s->sum_ns += (double)ns * (double)count;
        s->buckets[bucket] += count;
        s->n += count;
        return 0;
    }
    return sketch_add_n_slow(s, ns, bucket, count);
}
static inline bool sketch_exact(const sketch *s)
{
    return s->buckets == NULL;
}
/* Switch to the histogram now (no-op when one already). -1 on out-of-memory. */
int sketch_make_histogram(sketch *s);
/* Sort the exact values in place, each as often as added (no-op for a histogram); call
 * before reading ranks or values. -1 on out-of-memory (the sketch unchanged). */
int sketch_finish(sketch *s);
/* Nearest-rank p-quantile in ns (analysis_quantile's rule): the observed value when exact,
 * the bucket's midpoint (clamped to [min, max]; the first and last rank are min and max
 * exactly) otherwise; 0 when empty. After finish. */
double sketch_quantile_ns(const sketch *s, double p);
/* The same rule over the union of a and b, both finished and both exact or both
 * histograms (the exact union is read off the two sorted arrays without merging them). */
double sketch_quantile2_ns(const sketch *a, const sketch *b, double p);
/* The nearest rank of p among n values, 1-based (0 when n == 0). */
int64_t sketch_rank(int64_t n, double p);

#endif
