#include "analysis/analysis.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- summary ----------------------------------------------------------------------- */

static void digest_free(analysis_gap_digest *d)
{
    if (!d)
        return;
    free(d->t_s);
    free(d->gap_ms);
    free(d->ccdf_ms);
    free(d->ccdf_frac);
    free(d);
}

void analysis_summary_free(analysis_summary *s)
{
    digest_free(s->gap_digest);
    s->gap_digest = NULL;
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

static void *dup_array(const void *src, int64_t n, size_t size, bool *ok)
{
    if (n <= 0 || !src)
        return NULL;
    void *p = malloc((size_t)n * size);
    if (!p) {
        *ok = false;
        return NULL;
    }
    memcpy(p, src, (size_t)n * size);
    return p;
}

int analysis_summary_copy(analysis_summary *dst, const analysis_summary *src)
{
    bool ok = true;
    *dst = *src;
    dst->injections = dup_array(src->injections, src->n_injections, sizeof *src->injections, &ok);
    dst->attribution.culprits = dup_array(src->attribution.culprits, src->attribution.n_culprits,
                                          sizeof *src->attribution.culprits, &ok);
    dst->stall_list = dup_array(src->stall_list, src->n_stall_list, sizeof *src->stall_list, &ok);
    dst->gap_digest = NULL;
    if (src->gap_digest) {
        analysis_gap_digest *d = malloc(sizeof *d);
        if (d) {
            const analysis_gap_digest *g = src->gap_digest;
            *d = *g;
            d->t_s = dup_array(g->t_s, g->n_points, sizeof *g->t_s, &ok);
            d->gap_ms = dup_array(g->gap_ms, g->n_points, sizeof *g->gap_ms, &ok);
            d->ccdf_ms = dup_array(g->ccdf_ms, g->n_ccdf, sizeof *g->ccdf_ms, &ok);
            d->ccdf_frac = dup_array(g->ccdf_frac, g->n_ccdf, sizeof *g->ccdf_frac, &ok);
            dst->gap_digest = d;
        } else {
            ok = false;
        }
    }
    if (ok)
        return 0;
    analysis_summary_free(dst);
    memset(dst, 0, sizeof *dst);
    return -1;
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

void analysis_failure_text(const analysis_summary *s, char *out, size_t size)
{
    if (!s->failed) {
        snprintf(out, size, "%s", "");
        return;
    }
    snprintf(out, size, "%lld of %lld requests failed; the most common error (%lld): %s",
             (long long)s->errors, (long long)s->requests, (long long)s->error_common_count,
             s->error_common);
}
