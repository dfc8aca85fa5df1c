/* plot_axis — numbers on the charts and the axes' ranges and ticks (plot_axis.h). */
#include "report/plot_axis.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- numbers ----------------------------------------------------------------------------- */

/* "0.5", "130", "2000", "12000"; never exponent notation for what people read as ms. */
static void format_number(char *buf, size_t size, double v, plot_tick_format f)
{
    double a = fabs(v);
    if (f == PLOT_TICKS_PERCENT) {
        double pct = v * 100;
        if (fabs(pct) >= 1 || pct == 0)
            snprintf(buf, size, "%.0f %%", pct);
        else
            snprintf(buf, size, "%.*f %%", (int)ceil(-log10(fabs(pct)) - 1e-9), pct);
        return;
    }
    if (f == PLOT_TICKS_TOKENS && a >= 1000) {
        long long n = llround(v);
        bool pow2 = n > 0 && (n & (n - 1)) == 0;
        if (pow2 || fabs(v - (double)n) > 1e-9 || n % 1000 != 0)
            snprintf(buf, size, "%lld", n);
        else
            snprintf(buf, size, "%lldk", n / 1000);
        return;
    }
    if (a == 0)
        snprintf(buf, size, "0");
    else if (a >= 100)
        snprintf(buf, size, "%.0f", v);
    else if (a >= 10)
        snprintf(buf, size, "%.4g", v);
    else if (a >= 0.01)
        snprintf(buf, size, "%.3g", v);
    else
        snprintf(buf, size, "%.2g", v);
}

/* A measured value on a bar: the precision the terminal table uses (4.78, 14.6, 152). */
void plot_format_value(char *buf, size_t size, double v, plot_tick_format f)
{
    if (f != PLOT_TICKS_NUMBER)
        format_number(buf, size, v, f);
    else if (fabs(v) < 10)
        snprintf(buf, size, "%.2f", v);
    else if (fabs(v) < 100)
        snprintf(buf, size, "%.1f", v);
    else
        snprintf(buf, size, "%.0f", v);
}

double plot_nice(double v, bool up)
{
    if (!(v > 0))
        return 1;
    double e = floor(log10(v));
    double base = pow(10, e);
    static const double steps[] = {1, 2, 5, 10};
    if (up) {
        for (int i = 0; i < 4; i++)
            if (steps[i] * base >= v * (1 - 1e-12))
                return steps[i] * base;
        return 10 * base;
    }
    for (int i = 3; i >= 0; i--)
        if (steps[i] * base <= v * (1 + 1e-12))
            return steps[i] * base;
    return base;
}

static double nice_step(double span, int target)
{
    if (!(span > 0))
        return 1;
    double raw = span / (target > 0 ? target : 5);
    return plot_nice(raw, true);
}

/* ---- axes --------------------------------------------------------------------------------- */

static double axis_t(const plot_axis_state *s, double v)
{
    return s->a->log ? log10(v) : v;
}

/* Position in [0, 1] along the axis; NAN when it cannot be placed (log of v <= 0). */
double plot_axis_frac(const plot_axis_state *s, double v)
{
    if (s->a->log && !(v > 0))
        return NAN;
    double t0 = axis_t(s, s->lo), t1 = axis_t(s, s->hi);
    if (t1 == t0)
        return 0.5;
    return (axis_t(s, v) - t0) / (t1 - t0);
}

void plot_data_extent(const plot_panel *p, bool is_x, bool log, double *lo, double *hi)
{
    *lo = DBL_MAX;
    *hi = -DBL_MAX;
    for (int i = 0; i < p->n_series; i++) {
        const plot_series *s = &p->series[i];
        for (int64_t k = 0; k < s->n; k++) {
            double v = is_x ? s->x[k] : s->y[k];
            if (!isfinite(v) || (log && !(v > 0)))
                continue;
            if (v < *lo)
                *lo = v;
            if (v > *hi)
                *hi = v;
        }
    }
    if (is_x) {
        for (int i = 0; i < p->n_vmarks; i++) {
            double v = p->vmarks[i];
            if (!isfinite(v) || (log && !(v > 0)))
                continue;
            *lo = fmin(*lo, v);
            *hi = fmax(*hi, v);
        }
    } else {
        for (int i = 0; i < p->n_hlines; i++) {
            double v = p->hlines[i].y;
            if (!isfinite(v) || (log && !(v > 0)))
                continue;
            *lo = fmin(*lo, v);
            *hi = fmax(*hi, v);
        }
    }
}

bool plot_has_bars(const plot_panel *p)
{
    for (int i = 0; i < p->n_series; i++)
        if (p->series[i].kind == PLOT_BARS || p->series[i].kind == PLOT_SPIKES)
            return true;
    return false;
}

void plot_axis_range(const plot_axis *a, double lo, double hi, bool bars_from_axis,
                       double *out_lo, double *out_hi)
{
    if (a->n_categories > 0) {
        *out_lo = -0.5;
        *out_hi = a->n_categories - 0.5;
        return;
    }
    if (a->fixed) {
        *out_lo = a->min;
        *out_hi = a->max;
        return;
    }
    if (lo > hi) { /* no data */
        lo = a->log ? 1 : 0;
        hi = a->log ? 10 : 1;
    }
    if (a->log) {
        if (lo == hi) {
            lo /= 2;
            hi *= 2;
        }
        if (!bars_from_axis && hi / lo < 4) {
            /* Under a decade of data: 1-2-5 bounds would leave most of the axis empty. */
            *out_lo = lo / 1.12;
            *out_hi = hi * 1.12;
            return;
        }
        /* Bars need room under their shortest top to be seen as bars. */
        *out_lo = plot_nice(lo / (bars_from_axis ? 2.0 : 1.15), false);
        *out_hi = plot_nice(hi * 1.25, true);
        return;
    }
    if (a->from_zero || bars_from_axis) {
        if (lo > 0)
            lo = 0;
        if (hi < 0)
            hi = 0;
    }
    if (lo == hi) {
        double d = fabs(lo) > 0 ? fabs(lo) * 0.5 : 1;
        lo -= d;
        hi += d;
    }
    double step = nice_step(hi - lo, 5);
    *out_lo = floor(lo / step + 1e-9) * step;
    *out_hi = ceil(hi / step - 1e-9) * step;
    if (*out_hi == *out_lo)
        *out_hi = *out_lo + step;
}

void plot_axis_ticks(plot_axis_state *s)
{
    const plot_axis *a = s->a;
    s->n_ticks = 0;
    int cap = (int)(sizeof s->ticks / sizeof s->ticks[0]);
    double eps = (s->hi - s->lo) * 1e-9;
    if (a->n_categories > 0) {
        for (int i = 0; i < a->n_categories && s->n_ticks < cap; i++)
            s->ticks[s->n_ticks++] = i;
        return;
    }
    if (a->n_ticks > 0) {
        for (int i = 0; i < a->n_ticks && s->n_ticks < cap; i++)
            if (a->ticks[i] >= s->lo * (1 - 1e-9) - eps && a->ticks[i] <= s->hi * (1 + 1e-9) + eps)
                s->ticks[s->n_ticks++] = a->ticks[i];
        return;
    }
    if (a->log && s->hi / s->lo < 4) {
        /* A narrow log axis reads best with evenly stepped round values. */
        double step = nice_step(s->hi - s->lo, 5);
        for (double v = ceil(s->lo / step - 1e-9) * step; v <= s->hi * (1 + 1e-9) && s->n_ticks < cap;
             v += step)
            if (v > 0)
                s->ticks[s->n_ticks++] = v;
        return;
    }
    if (a->log) {
        int e0 = (int)floor(log10(s->lo) - 1e-9), e1 = (int)ceil(log10(s->hi) + 1e-9);
        int decades = 0;
        for (int e = e0; e <= e1; e++) {
            double v = pow(10, e);
            if (v >= s->lo * (1 - 1e-9) && v <= s->hi * (1 + 1e-9))
                decades++;
        }
        /* Fewer than three decades in view: 2 and 5 too, or the axis says nothing. */
        static const double mult_all[] = {1, 2, 5};
        int n_mult = decades < 3 ? 3 : 1;
        for (int e = e0; e <= e1; e++)
            for (int m = 0; m < n_mult; m++) {
                double v = mult_all[m] * pow(10, e);
                if (v >= s->lo * (1 - 1e-9) && v <= s->hi * (1 + 1e-9) && s->n_ticks < cap)
                    s->ticks[s->n_ticks++] = v;
            }
        /* Sorted ascending (1, 2, 5 per decade already are). */
        return;
    }
    double step = nice_step(s->hi - s->lo, 6);
    for (double v = ceil(s->lo / step - 1e-9) * step; v <= s->hi + eps && s->n_ticks < cap;
         v += step)
        s->ticks[s->n_ticks++] = fabs(v) < step * 1e-9 ? 0 : v;
}

void plot_tick_label(const plot_axis_state *s, int i, char *buf, size_t size)
{
    if (s->a->n_categories > 0) {
        int k = (int)s->ticks[i];
        snprintf(buf, size, "%s", k >= 0 && k < s->a->n_categories && s->a->categories[k]
                                      ? s->a->categories[k] : "");
        return;
    }
    format_number(buf, size, s->ticks[i], s->a->format);
}
