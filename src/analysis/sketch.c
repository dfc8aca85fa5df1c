#include "analysis/sketch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/timeline.h"

void sketch_init(sketch *s, int64_t exact_max)
{
    memset(s, 0, sizeof *s);
    s->exact_max = exact_max;
}

void sketch_free(sketch *s)
{
    free(s->values);
    free(s->counts);
    free(s->buckets);
    sketch_init(s, s->exact_max);
}

void sketch_bucket_range(int bucket, int64_t *lo, int64_t *hi)
{
    if (bucket < SKETCH_EXACT_BUCKETS) {
        *lo = *hi = bucket;
        return;
    }
    int k = bucket - SKETCH_EXACT_BUCKETS;
    int e = SKETCH_MANTISSA_BITS + 1 + k / (1 << SKETCH_MANTISSA_BITS);
    int shift = e - SKETCH_MANTISSA_BITS;
    int64_t mant = (int64_t)(k % (1 << SKETCH_MANTISSA_BITS)) + (1 << SKETCH_MANTISSA_BITS);
    *lo = mant << shift;
    *hi = *lo + (((int64_t)1 << shift) - 1);
}

/* Held values into buckets; the values are freed. */
static int to_histogram(sketch *s)
{
    if (s->buckets)
        return 0;
    s->buckets = calloc(SKETCH_BUCKETS, sizeof *s->buckets);
    if (!s->buckets)
        return -1;
    for (int64_t i = 0; i < s->n_entries; i++)
        s->buckets[sketch_bucket(s->values[i])] += s->counts ? s->counts[i] : 1;
    free(s->values);
    free(s->counts);
    s->values = s->counts = NULL;
    s->n_entries = s->cap = 0;
    return 0;
}

/* Room for one more entry while exact (values, and counts when there are). */
static int grow_entries(sketch *s)
{
    if (s->n_entries < s->cap)
        return 0;
    int64_t cap = s->cap ? s->cap * 2 : 256;
    if (cap > s->exact_max)
        cap = s->exact_max;
    int64_t *p = realloc(s->values, (size_t)cap * sizeof *p);
    if (!p)
        return -1;
    s->values = p;
    if (s->counts) {
        int64_t *c = realloc(s->counts, (size_t)cap * sizeof *c);
        if (!c)
            return -1;
        s->counts = c;
    }
    s->cap = cap;
    return 0;
}

/* sum_ns after count more copies of ns, each added in turn as sketch_add does: one product
 * while every partial sum is an integer below 2^53 (exact either way), else one by one. */
static void add_to_sum(sketch *s, int64_t ns, int64_t count)
{
    if (s->sum_ns < 0x1p52 && (double)ns * (double)count < 0x1p52) {
        s->sum_ns += (double)ns * (double)count;
        return;
    }
    for (int64_t i = 0; i < count; i++)
        s->sum_ns += (double)ns;
}

int sketch_add_slow(sketch *s, int64_t ns)
{
    if (ns < 0)
        ns = 0;
    if (s->n == 0 || ns < s->min)
        s->min = ns;
    if (s->n == 0 || ns > s->max)
        s->max = ns;
    s->sum_ns += (double)ns;
    if (s->buckets) {
        s->buckets[sketch_bucket(ns)]++;
        s->n++;
        return 0;
    }
    if (s->n == s->exact_max) {
        if (to_histogram(s) != 0)
            return -1;
        s->buckets[sketch_bucket(ns)]++;
        s->n++;
        return 0;
    }
    if (grow_entries(s) != 0)
        return -1;
    if (s->counts)
        s->counts[s->n_entries] = 1;
    s->values[s->n_entries++] = ns;
    s->n++;
    return 0;
}

int sketch_add_n_slow(sketch *s, int64_t ns, int bucket, int64_t count)
{
    if (count == 1 || ns < 0) {
        for (int64_t i = 0; i < count; i++)
            if (sketch_add_slow(s, ns) != 0)
                return -1;
        return 0;
    }
    if (s->n == 0 || ns < s->min)
        s->min = ns;
    if (s->n == 0 || ns > s->max)
        s->max = ns;
    add_to_sum(s, ns, count);
    /* Copies past the exact budget make it a histogram, as they would one by one (the
     * values held are the same multiset either way). */
    if (!s->buckets && s->n + count > s->exact_max && to_histogram(s) != 0)
        return -1;
    if (s->buckets) {
        s->buckets[bucket] += count;
        s->n += count;
        return 0;
    }
    if (!s->counts) { /* the first run of several: every entry so far held once */
        s->counts = malloc((size_t)(s->cap ? s->cap : 1) * sizeof *s->counts);
        if (!s->counts)
            return -1;
        for (int64_t i = 0; i < s->n_entries; i++)
            s->counts[i] = 1;
    }
    if (s->n_entries > 0 && s->values[s->n_entries - 1] == ns) {
        s->counts[s->n_entries - 1] += count;
    } else {
        if (grow_entries(s) != 0)
            return -1;
        s->values[s->n_entries] = ns;
        s->counts[s->n_entries++] = count;
    }
    s->n += count;
    return 0;
}

int sketch_make_histogram(sketch *s)
{
    return to_histogram(s);
}

int sketch_finish(sketch *s)
{
    if (s->buckets)
        return 0;
    if (s->counts) {
        /* Each value as often as counted, written from the back so the entries are read
         * before they are overwritten. */
        int64_t *p = s->n > s->cap ? realloc(s->values, (size_t)s->n * sizeof *p) : s->values;
        if (!p)
            return -1;
        s->values = p;
        int64_t at = s->n;
        for (int64_t i = s->n_entries - 1; i >= 0; i--)
            for (int64_t k = 0; k < s->counts[i]; k++)
                p[--at] = p[i];
        free(s->counts);
        s->counts = NULL;
        s->n_entries = s->n;
        if (s->cap < s->n)
            s->cap = s->n;
    }
    analysis_sort_i64(s->values, s->n);
    return 0;
}

int64_t sketch_rank(int64_t n, double p)
{
    if (n <= 0)
        return 0;
    /* analysis_quantile's rule, with its guard against binary rounding of p x n. */
    double x = p * (double)n;
    int64_t rank = (int64_t)ceil(x - fabs(x) * 1e-12);
    return rank < 1 ? 1 : rank > n ? n : rank;
}

double sketch_quantile_ns(const sketch *s, double p)
{
    int64_t rank = sketch_rank(s->n, p);
    if (rank == 0)
        return 0;
    if (!s->buckets)
        return (double)s->values[rank - 1];
    if (rank == s->n) /* the extremes are known exactly */
        return (double)s->max;
    if (rank == 1)
        return (double)s->min;
    int64_t seen = 0;
    for (int b = 0; b < SKETCH_BUCKETS; b++) {
        seen += s->buckets[b];
        if (seen < rank)
            continue;
        int64_t lo, hi;
        sketch_bucket_range(b, &lo, &hi);
        double mid = ((double)lo + (double)hi) / 2;
        if (mid < (double)s->min)
            mid = (double)s->min;
        if (mid > (double)s->max)
            mid = (double)s->max;
        return mid;
    }
    return (double)s->max;
}

/* The value of 1-based rank k in the union of two sorted arrays, without merging them:
 * a binary search for how many of the k smallest come from a. */
static int64_t kth_of_two(const int64_t *a, int64_t na, const int64_t *b, int64_t nb, int64_t k)
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
    int64_t from_a = lo > 0 ? a[lo - 1] : INT64_MIN, from_b = k - lo > 0 ? b[k - lo - 1] : INT64_MIN;
    return from_a > from_b ? from_a : from_b;
}

double sketch_quantile2_ns(const sketch *a, const sketch *b, double p)
{
    if (a->n == 0)
        return sketch_quantile_ns(b, p);
    if (b->n == 0)
        return sketch_quantile_ns(a, p);
    int64_t rank = sketch_rank(a->n + b->n, p);
    if (!a->buckets && !b->buckets)
        return (double)kth_of_two(a->values, a->n, b->values, b->n, rank);
    int64_t min = a->min < b->min ? a->min : b->min, max = a->max > b->max ? a->max : b->max;
    if (rank == a->n + b->n)
        return (double)max;
    if (rank == 1)
        return (double)min;
    int64_t seen = 0;
    for (int k = 0; k < SKETCH_BUCKETS; k++) {
        seen += (a->buckets ? a->buckets[k] : 0) + (b->buckets ? b->buckets[k] : 0);
        if (seen < rank)
            continue;
        int64_t lo, hi;
        sketch_bucket_range(k, &lo, &hi);
        double mid = ((double)lo + (double)hi) / 2;
        return mid < (double)min ? (double)min : mid > (double)max ? (double)max : mid;
    }
    return (double)max;
}
