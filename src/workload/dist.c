/* dist — length distributions and the gamma variate of the open-loop arrivals (workload.h).
 * Every draw is a function of the rng state it is given, so a draw keyed by (seed, stream,
 * index) is the same whatever the order or timing of the draws. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/rng.h"
#include "common/units.h"
#include "workload/workload.h"

/* The standard normal's 90th and 99.9th percentiles. */
#define Z90 1.2815515655446004
#define Z999 3.0902323061678132

static int parse_len(const char *text, const char *what, int *out, char *err)
{
    int64_t v;
    char why[ERR_LEN];
    if (units_parse_count(text, &v, why) != 0)
        return err_set(err, "%s: %s", what, why);
    if (v < 1 || v > WORKLOAD_MAX_LEN)
        return err_set(err, "%s: %lld is out of range [1, %d]", what, (long long)v,
                       WORKLOAD_MAX_LEN);
    *out = (int)v;
    return 0;
}

/* "A-B" or "A..B" into two numbers. */
static int parse_pair(const char *v, const char *sep_a, const char *sep_b, char *first,
                      size_t size, const char **second)
{
    const char *sep = strstr(v, sep_a);
    size_t skip = strlen(sep_a);
    if (!sep && sep_b) {
        sep = strstr(v, sep_b);
        skip = strlen(sep_b);
    }
    if (!sep || (size_t)(sep - v) >= size)
        return -1;
    memcpy(first, v, (size_t)(sep - v));
    first[sep - v] = '\0';
    *second = sep + skip;
    return 0;
}

static double lognormal_sigma(const workload_dist *d)
{
    return log((double)d->b / (double)d->a) / Z90;
}

int workload_dist_parse(const char *text, workload_dist *out, char *err)
{
    workload_dist d;
    memset(&d, 0, sizeof d);
    char a[32], b[64];
    const char *rest;
    const char *colon = strchr(text, ':');
    const char *kind = text;
    size_t kind_len = colon ? (size_t)(colon - text) : 0;
    const char *v = colon ? colon + 1 : text;
    if (!colon) { /* "A..B" or "N": the older flags' form, uniform */
        d.kind = WORKLOAD_DIST_UNIFORM;
        if (parse_pair(v, "..", NULL, a, sizeof a, &rest) == 0) {
            if (parse_len(a, "MIN", &d.a, err) != 0 || parse_len(rest, "MAX", &d.b, err) != 0)
                return -1;
        } else {
            if (parse_len(v, "N", &d.a, err) != 0)
                return -1;
            d.b = d.a;
        }
        if (d.b < d.a)
            return err_set(err, "'%s': MIN must not exceed MAX", text);
    } else if (kind_len == 5 && strncmp(kind, "fixed", 5) == 0) {
        d.kind = WORKLOAD_DIST_FIXED;
        if (parse_len(v, "fixed", &d.a, err) != 0)
            return -1;
        d.b = d.a;
    } else if (kind_len == 7 && strncmp(kind, "uniform", 7) == 0) {
        d.kind = WORKLOAD_DIST_UNIFORM;
        if (parse_pair(v, "..", "-", a, sizeof a, &rest) != 0)
            return err_set(err, "'%s': uniform:A-B", text);
        if (parse_len(a, "uniform A", &d.a, err) != 0 || parse_len(rest, "uniform B", &d.b, err) != 0)
            return -1;
        if (d.b < d.a)
            return err_set(err, "'%s': A must not exceed B", text);
    } else if (kind_len == 9 && strncmp(kind, "lognormal", 9) == 0) {
        d.kind = WORKLOAD_DIST_LOGNORMAL;
        if (parse_pair(v, ",", NULL, a, sizeof a, &rest) != 0)
            return err_set(err, "'%s': lognormal:MEDIAN,P90[,MAX]", text);
        const char *max_text = NULL;
        if (strchr(rest, ',')) {
            if (parse_pair(rest, ",", NULL, b, sizeof b, &max_text) != 0)
                return err_set(err, "'%s': lognormal:MEDIAN,P90[,MAX]", text);
        } else {
            if (strlen(rest) >= sizeof b)
                return err_set(err, "'%s' is too long", text);
            strcpy(b, rest);
        }
        if (parse_len(a, "lognormal MEDIAN", &d.a, err) != 0 ||
            parse_len(b, "lognormal P90", &d.b, err) != 0)
            return -1;
        if (d.b <= d.a)
            return err_set(err, "'%s': P90 must be above the median", text);
        if (max_text) {
            if (parse_len(max_text, "lognormal MAX", &d.max, err) != 0)
                return -1;
            if (d.max < d.a)
                return err_set(err, "'%s': MAX must not be below the median", text);
        } else {
            double p999 = ceil((double)d.a * exp(Z999 * lognormal_sigma(&d)));
            d.max = p999 > WORKLOAD_MAX_LEN ? WORKLOAD_MAX_LEN : (int)p999;
        }
    } else if (kind_len == 9 && strncmp(kind, "empirical", 9) == 0) {
        d.kind = WORKLOAD_DIST_EMPIRICAL;
        if (!v[0])
            return err_set(err, "'%s': empirical:FILE", text);
        if (strlen(v) >= sizeof d.file)
            return err_set(err, "'%s': the file name is longer than %zu bytes", text,
                           sizeof d.file - 1);
        strcpy(d.file, v);
    } else {
        return err_set(err, "'%s' is not a distribution (fixed:N, uniform:A-B, "
                            "lognormal:MEDIAN,P90[,MAX], empirical:FILE)",
                       text);
    }
    *out = d;
    return 0;
}

void workload_dist_format(const workload_dist *d, char *buf, size_t size)
{
    switch (d->kind) {
    case WORKLOAD_DIST_FIXED:
        snprintf(buf, size, "fixed:%d", d->a);
        return;
    case WORKLOAD_DIST_LOGNORMAL:
        snprintf(buf, size, "lognormal:%d,%d,%d", d->a, d->b, d->max);
        return;
    case WORKLOAD_DIST_EMPIRICAL:
        snprintf(buf, size, "empirical:%s", d->file);
        return;
    default:
        snprintf(buf, size, "uniform:%d-%d", d->a, d->b);
        return;
    }
}

int workload_dist_max(const workload_dist *d)
{
    switch (d->kind) {
    case WORKLOAD_DIST_FIXED:
        return d->a;
    case WORKLOAD_DIST_LOGNORMAL:
    case WORKLOAD_DIST_EMPIRICAL:
        return d->max;
    default:
        return d->b;
    }
}

int workload_dist_median(const workload_dist *d)
{
    switch (d->kind) {
    case WORKLOAD_DIST_FIXED:
    case WORKLOAD_DIST_LOGNORMAL:
        return d->a;
    case WORKLOAD_DIST_EMPIRICAL:
        return d->a; /* set by workload_dist_load */
    default:
        return (d->a + d->b) / 2;
    }
}

/* A standard normal variate (Box-Muller, one of the pair). */
static double normal(uint64_t *state)
{
    double u1 = 1.0 - rng_uniform(state); /* (0, 1]: the log is finite */
    double u2 = rng_uniform(state);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

int workload_dist_draw(const workload_dist *d, const int32_t *values, int64_t n_values,
                       uint64_t *state)
{
    switch (d->kind) {
    case WORKLOAD_DIST_FIXED:
        return d->a;
    case WORKLOAD_DIST_LOGNORMAL: {
        double x = round((double)d->a * exp(lognormal_sigma(d) * normal(state)));
        if (x < 1)
            return 1;
        return x > d->max ? d->max : (int)x;
    }
    case WORKLOAD_DIST_EMPIRICAL:
        if (!values || n_values <= 0)
            return d->a > 0 ? d->a : 1; /* not loaded: a caller's bug, kept in range */
        return values[rng_next(state) % (uint64_t)n_values];
    default:
        return (int)rng_range(state, d->a, d->b);
    }
}

static int cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

int workload_dist_load(workload_dist *d, int32_t **values, int64_t *n_values, char *err)
{
    *values = NULL;
    *n_values = 0;
    if (d->kind != WORKLOAD_DIST_EMPIRICAL)
        return 0;
    char path[sizeof d->file];
    snprintf(path, sizeof path, "%s", d->file);
    const char *col = "";
    char *at = strrchr(path, '@');
    if (at) {
        *at = '\0';
        col = at + 1;
    }
    char *data;
    size_t len;
    if (trace_read_file(path, &data, &len, err) != 0)
        return -1;
    int rc = trace_load_values(path, data, len, col, values, n_values, err);
    free(data);
    if (rc != 0)
        return -1;
    /* max and median, for the checks and the typical-context arithmetic */
    int32_t *sorted = malloc((size_t)*n_values * sizeof *sorted);
    if (!sorted) {
        free(*values);
        *values = NULL;
        return err_set(err, "out of memory");
    }
    memcpy(sorted, *values, (size_t)*n_values * sizeof *sorted);
    qsort(sorted, (size_t)*n_values, sizeof *sorted, cmp_i32);
    d->max = sorted[*n_values - 1];
    d->a = sorted[(*n_values - 1) / 2];
    free(sorted);
    return 0;
}

/* Marsaglia and Tsang's method (ACM TOMS 26(3), 2000) for shape >= 1; below 1 a variate of
 * shape + 1 times U^(1/shape). Scaled to mean 1. The rejection loop accepts with probability
 * > 0.95; it is bounded all the same, and falls back to the mean. */
double workload_gamma_unit(double shape, uint64_t *state)
{
    if (shape == 1.0)
        return -log(1.0 - rng_uniform(state));
    double boost = 1.0, k = shape;
    if (k < 1.0) {
        double u = 1.0 - rng_uniform(state);
        boost = pow(u, 1.0 / k);
        k += 1.0;
    }
    const double dd = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * dd);
    for (int i = 0; i < 1000; i++) {
        double z = normal(state);
        double v = 1.0 + c * z;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = 1.0 - rng_uniform(state);
        if (log(u) < 0.5 * z * z + dd - dd * v + dd * log(v))
            return boost * dd * v / shape;
    }
    return 1.0;
}
