/* sweep — the figures a sweep quotes per point: the typical spike, its step from the
 * previous point along the first axis, and the cost model's step beside it. */
#include <stdlib.h>
#include <string.h>

#include "analysis/analysis.h"

double analysis_typical_spike(const analysis_summary *s)
{
    double *v = malloc((size_t)(s->n_injections > 0 ? s->n_injections : 1) * sizeof *v);
    if (!v)
        return 0;
    int n = 0;
    for (int i = 0; i < s->n_injections; i++)
        if (s->injections[i].max_gap_ms > 0)
            v[n++] = s->injections[i].max_gap_ms;
    analysis_dist d;
    analysis_dist_from(v, n, &d);
    free(v);
    return n > 0 ? d.p50 : 0;
}

static bool same_line(const analysis_sweep_point *a, const analysis_sweep_point *b)
{
    return strcmp(a->line ? a->line : "", b->line ? b->line : "") == 0;
}

void analysis_sweep(analysis_sweep_point *pts, int n)
{
    for (int i = 0; i < n; i++) {
        analysis_sweep_point *r = &pts[i];
        memset(&r->ttft_ms, 0, sizeof r->ttft_ms);
        r->spike_ms = r->step = r->model_step = 0;
        r->prev = -1;
        if (!r->x)
            continue;
        analysis_injection_ttft(r->x, &r->ttft_ms);
        r->spike_ms = analysis_typical_spike(r->x);
        for (int j = i - 1; j >= 0; j--)
            if (pts[j].x && same_line(&pts[j], r)) {
                r->prev = j;
                break;
            }
        if (r->prev < 0)
            continue;
        const analysis_sweep_point *p = &pts[r->prev];
        if (p->spike_ms > 0 && r->spike_ms > 0)
            r->step = r->spike_ms / p->spike_ms;
        if (p->model_spike_ms > 0 && r->model_spike_ms > 0)
            r->model_step = r->model_spike_ms / p->model_spike_ms;
    }
}
