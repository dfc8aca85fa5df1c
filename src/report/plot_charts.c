/* plot_charts — the report's charts built from run data: what goes on which axis, with
 * which unit and which legend. Drawing is plot.c's business. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "report/plot.h"

#define OOM(err) err_set(err, "out of memory building a chart")

typedef struct req_time {
    int64_t request;
    int64_t t_ns;
} req_time;

static int cmp_req_time(const void *a, const void *b)
{
    const req_time *x = a, *y = b;
    if (x->request != y->request)
        return x->request < y->request ? -1 : 1;
    return (x->t_ns > y->t_ns) - (x->t_ns < y->t_ns);
}

int plot_gaps_over_time(const tokenlog *log, double **t_s, double **gap_ms, int64_t *n,
                        char *err)
{
    *t_s = *gap_ms = NULL;
    *n = 0;
    int64_t m = 0;
    for (int64_t i = 0; i < log->n_events; i++)
        m += log->events[i].kind == TOKENLOG_BG;
    if (m < 2)
        return 0;
    req_time *rt = malloc((size_t)m * sizeof *rt);
    double *t = malloc((size_t)m * sizeof *t), *g = malloc((size_t)m * sizeof *g);
    if (!rt || !t || !g) {
        free(rt), free(t), free(g);
        return OOM(err);
    }
    int64_t k = 0;
    for (int64_t i = 0; i < log->n_events; i++)
        if (log->events[i].kind == TOKENLOG_BG)
            rt[k++] = (req_time){log->events[i].request, log->events[i].t_ns};
    qsort(rt, (size_t)m, sizeof *rt, cmp_req_time);
    int64_t out = 0;
    for (int64_t i = 1; i < m; i++) {
        if (rt[i].request != rt[i - 1].request)
            continue;
        /* Placed where the wait began: a stall then starts at the injection that caused it,
         * however long it lasts (a 3 s CPU prefill would otherwise sit 3 s to the right). */
        t[out] = (double)rt[i - 1].t_ns / 1e9;
        g[out] = (double)(rt[i].t_ns - rt[i - 1].t_ns) / 1e6;
        out++;
    }
    free(rt);
    *t_s = t;
    *gap_ms = g;
    *n = out;
    return 0;
}

static void format_ms(char *buf, size_t size, double ms)
{
    if (ms >= 100)
        snprintf(buf, size, "%.0f ms", ms);
    else if (ms >= 10)
        snprintf(buf, size, "%.1f ms", ms);
    else
        snprintf(buf, size, "%.2f ms", ms);
}

static void set_axis(plot_axis *a, const char *label, bool log)
{
    snprintf(a->label, sizeof a->label, "%s", label);
    a->log = log;
}

static void set_note(plot_chart *c, const char *note)
{
    snprintf(c->note, sizeof c->note, "%s", note ? note : "");
}

/* A shared log range for panels that must compare by eye. */
static void fixed_log_range(plot_axis *a, double lo, double hi)
{
    if (!(lo > 0) || !(hi > 0) || lo > hi)
        return;
    a->fixed = true;
    a->min = plot_nice(lo / 1.3, false);
    a->max = plot_nice(hi * 1.4, true);
}

/* ---- (a) timeline ------------------------------------------------------------------------- */

int plot_timeline(plot_chart *c, const plot_run *runs, int n_runs, const char *note, char *err)
{
    plot_chart_init(c, "Time between tokens: every background gap over time", 960,
                    150 + 210 * (n_runs > 0 ? n_runs : 1));
    set_note(c, note);
    c->share_x = true;
    double lo = INFINITY, hi = 0, duration = 0;
    for (int r = 0; r < n_runs; r++) {
        const plot_run *run = &runs[r];
        char title[160];
        double *t = NULL, *g = NULL;
        int64_t n = 0, n_gaps;
        /* A streamed run holds no events: its digest, one point per occupied cell. */
        const analysis_gap_digest *dg =
            (!run->log || run->log->n_events == 0) && run->summary ? run->summary->gap_digest : NULL;
        if (dg) {
            t = malloc((size_t)(dg->n_points + 1) * sizeof *t);
            g = malloc((size_t)(dg->n_points + 1) * sizeof *g);
            if (!t || !g) {
                free(t), free(g);
                return OOM(err);
            }
            memcpy(t, dg->t_s, (size_t)dg->n_points * sizeof *t);
            memcpy(g, dg->gap_ms, (size_t)dg->n_points * sizeof *g);
            n = dg->n_points;
            t[n] = dg->max_t_s; /* the longest gap, exact, where it began */
            g[n] = dg->max_gap_ms;
            n++;
            n_gaps = dg->gaps;
        } else {
            if (run->log && plot_gaps_over_time(run->log, &t, &g, &n, err) != 0)
                return -1;
            n_gaps = n;
        }
        snprintf(title, sizeof title, "%s: %lld gaps", run->name, (long long)n_gaps);
        plot_panel *p = plot_chart_add_panel(c, title);
        if (!p) {
            free(t), free(g);
            return OOM(err);
        }
        set_axis(&p->x, "time since the run's start (s)", false);
        set_axis(&p->y, "gap (ms, log scale)", true);
        char name[96];
        snprintf(name, sizeof name, "%s gap", run->name);
        plot_series *s = plot_panel_add_series(p, name, PLOT_DOTS, run->color);
        if (!s) {
            free(t), free(g);
            return OOM(err);
        }
        int64_t longest = -1;
        for (int64_t i = 0; i < n; i++) {
            if (plot_series_push(s, t[i], g[i]) != 0) {
                free(t), free(g);
                return OOM(err);
            }
            if (g[i] > 0)
                lo = fmin(lo, g[i]);
            hi = fmax(hi, g[i]);
            if (longest < 0 || g[i] > g[longest])
                longest = i;
        }
        if (longest >= 0) {
            /* The number people quote, on the picture: the longest gap, labelled. */
            plot_series *m = plot_panel_add_series(p, "", PLOT_POINTS, run->color);
            char label[48], ms[32];
            format_ms(ms, sizeof ms, g[longest]);
            snprintf(label, sizeof label, "max %s", ms);
            if (!m || plot_series_push_labelled(m, t[longest], g[longest], label) != 0) {
                free(t), free(g);
                return OOM(err);
            }
            m->mark = PLOT_MARK_DIAMOND;
            m->size = 8;
        }
        free(t), free(g);
        const analysis_summary *sum = run->summary;
        if (sum) {
            duration = fmax(duration, sum->duration_s);
            for (int i = 0; i < sum->n_injections; i++)
                if (plot_panel_add_vmark(p, sum->injections[i].t_send_s) != 0)
                    return OOM(err);
            snprintf(p->vmark_name, sizeof p->vmark_name, "long prompt sent");
            if (sum->stalls.threshold_ms > 0) {
                char label[64];
                snprintf(label, sizeof label, "stall threshold (%.3g ms)",
                         sum->stalls.threshold_ms);
                plot_panel_add_hline(p, sum->stalls.threshold_ms, label, PLOT_COLOR_THRESHOLD);
                hi = fmax(hi, sum->stalls.threshold_ms);
            }
        }
    }
    for (int i = 0; i < c->n_panels; i++) {
        plot_panel *p = &c->panels[i];
        fixed_log_range(&p->y, lo, hi);
        if (duration > 0) {
            p->x.fixed = true;
            p->x.min = 0;
            p->x.max = duration;
        }
    }
    return 0;
}

/* ---- (b) percentile bars -------------------------------------------------------------------- */

static const char *const PERCENTILE_NAMES[] = {"p50", "p90", "p99", "p99.9", "max"};

int plot_percentiles(plot_chart *c, const char *title, const plot_run *runs, int n_runs,
                     const char *note, char *err)
{
    plot_chart_init(c, title ? title : "Tail of the time between tokens", 960, 440);
    set_note(c, note);
    plot_panel *p = plot_chart_add_panel(c, "");
    if (!p)
        return OOM(err);
    set_axis(&p->x, "percentile of all background gaps", false);
    for (int i = 0; i < 5; i++)
        p->x.categories[i] = PERCENTILE_NAMES[i];
    p->x.n_categories = 5;
    set_axis(&p->y, "gap between tokens (ms, log scale)", true);
    for (int r = 0; r < n_runs; r++) {
        const analysis_summary *s = runs[r].summary;
        if (!s)
            continue;
        plot_series *bars = plot_panel_add_series(p, runs[r].name, PLOT_BARS, runs[r].color);
        if (!bars)
            return OOM(err);
        bars->value_labels = true;
        double v[5] = {s->itl_ms.p50, s->itl_ms.p90, s->itl_ms.p99, s->itl_ms.p999, s->itl_ms.max};
        for (int i = 0; i < 5; i++)
            if (plot_series_push(bars, i, v[i]) != 0)
                return OOM(err);
    }
    return 0;
}

/* ---- (c) CCDF -------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int plot_ccdf(plot_chart *c, const plot_run *runs, int n_runs, const char *note, char *err)
{
    plot_chart_init(c, "How often a gap is at least this long (CCDF)", 960, 480);
    set_note(c, note);
    plot_panel *p = plot_chart_add_panel(c, "");
    if (!p)
        return OOM(err);
    set_axis(&p->x, "gap between tokens (ms, log scale)", true);
    set_axis(&p->y, "fraction of gaps at least this long (log scale)", true);
    p->y.format = PLOT_TICKS_PERCENT;
    double smallest = 1;
    for (int r = 0; r < n_runs; r++) {
        const analysis_gap_digest *dg = (!runs[r].log || runs[r].log->n_events == 0) && runs[r].summary
                                            ? runs[r].summary->gap_digest
                                            : NULL;
        if (dg) { /* a streamed run: the staircase over its histogram's buckets */
            plot_series *s = plot_panel_add_series(p, runs[r].name, PLOT_LINE, runs[r].color);
            if (!s)
                return OOM(err);
            s->size = 2;
            for (int64_t i = 0; i < dg->n_ccdf; i++)
                if (plot_series_push(s, dg->ccdf_ms[i], dg->ccdf_frac[i]) != 0)
                    return OOM(err);
            if (dg->gaps > 0)
                smallest = fmin(smallest, 1.0 / (double)dg->gaps);
            continue;
        }
        if (!runs[r].log)
            continue;
        double *gaps = NULL;
        int64_t n = 0;
        if (analysis_gaps_ms(runs[r].log, &gaps, &n, err) != 0)
            return -1;
        if (n > 1) /* no gaps (every answer one token) is a valid run: an empty curve */
            qsort(gaps, (size_t)n, sizeof *gaps, cmp_double);
        plot_series *s = plot_panel_add_series(p, runs[r].name, PLOT_LINE, runs[r].color);
        if (!s) {
            free(gaps);
            return OOM(err);
        }
        s->size = 2;
        /* P(gap >= g_i) = (n - i) / n at the first index of each value: a staircase
         * down to 1/n at the longest gap. */
        for (int64_t i = 0; i < n; i++) {
            if (i > 0 && gaps[i] == gaps[i - 1])
                continue;
            double frac = (double)(n - i) / (double)n;
            if (plot_series_push(s, gaps[i], frac) != 0) {
                free(gaps);
                return OOM(err);
            }
            if (i + 1 < n && gaps[i + 1] != gaps[i] &&
                plot_series_push(s, gaps[i + 1], frac) != 0) {
                free(gaps);
                return OOM(err);
            }
        }
        if (n > 0)
            smallest = fmin(smallest, 1.0 / (double)n);
        free(gaps);
    }
    /* Where p99 and p99.9 look: a spike that stays under a line cannot move that
     * percentile. */
    plot_panel_add_hline(p, 0.01, "1 % of gaps (what p99 sees)", PLOT_COLOR_THRESHOLD);
    plot_panel_add_hline(p, 0.001, "0.1 % of gaps (what p99.9 sees)", (plot_color){0.7, 0.7, 0.7, 1});
    p->y.fixed = true;
    p->y.max = 1;
    p->y.min = plot_nice(smallest / 1.5, false);
    return 0;
}

/* ---- (f) stall lengths by cause, (g) stalls vs the culprit's prompt ------------------------- */

static const plot_color CAUSE_COLORS[ANALYSIS_N_CAUSES] = {
    {0.85, 0.33, 0.10, 1.0}, /* prefill: the interference run's orange */
    {0.55, 0.35, 0.65, 1.0}, /* server */
    {0.20, 0.55, 0.75, 1.0}, /* client */
    {0.50, 0.50, 0.50, 1.0}, /* unexplained */
    {0.80, 0.15, 0.35, 1.0}, /* preempted */
    {0.25, 0.60, 0.35, 1.0}, /* not scheduled */
};

int plot_stall_ccdf(plot_chart *c, const analysis_summary *s, const char *note, char *err)
{
    plot_chart_init(c, "How long the stalls were, by cause", 960, 420);
    set_note(c, note);
    plot_panel *p = plot_chart_add_panel(c, "");
    if (!p)
        return OOM(err);
    set_axis(&p->x, "stall length (ms, log scale)", true);
    set_axis(&p->y, "fraction of the cause's stalls at least this long (log scale)", true);
    p->y.format = PLOT_TICKS_PERCENT;
    double *len = malloc((size_t)(s->n_stall_list ? s->n_stall_list : 1) * sizeof *len);
    if (!len)
        return OOM(err);
    double smallest = 1;
    for (int cause = 0; cause < ANALYSIS_N_CAUSES; cause++) {
        int64_t n = 0;
        for (int64_t i = 0; i < s->n_stall_list; i++)
            if (s->stall_list[i].cause == cause)
                len[n++] = (double)s->stall_list[i].gap_ns / 1e6;
        if (n == 0)
            continue;
        if (n > 1)
            qsort(len, (size_t)n, sizeof *len, cmp_double);
        char name[64];
        snprintf(name, sizeof name, "%s (%lld)", analysis_cause_name((analysis_cause)cause),
                 (long long)n);
        /* A few stalls: marked points, so a cause whose stalls all last the same (one
         * staircase point) still shows; many: a line. */
        plot_series *ser = plot_panel_add_series(p, name, n <= 200 ? PLOT_POINTS : PLOT_LINE,
                                                 CAUSE_COLORS[cause]);
        if (!ser) {
            free(len);
            return OOM(err);
        }
        ser->size = n <= 200 ? 6 : 2;
        ser->join = true;
        ser->mark = (plot_mark)cause;
        for (int64_t i = 0; i < n; i++) {
            if (i > 0 && len[i] == len[i - 1])
                continue;
            double frac = (double)(n - i) / (double)n;
            if (plot_series_push(ser, len[i], frac) != 0 ||
                (i + 1 < n && len[i + 1] != len[i] && plot_series_push(ser, len[i + 1], frac) != 0)) {
                free(len);
                return OOM(err);
            }
        }
        smallest = fmin(smallest, 1.0 / (double)n);
    }
    free(len);
    p->y.fixed = true;
    p->y.max = 1.3; /* head room: the first point of every curve is at 100 % */
    p->y.min = plot_nice(smallest / 1.5, false);
    return 0;
}

/* The longest culprit's prompt of a prefill stall, 0 when it has none to plot. */
static int32_t stall_prompt(const analysis_stall *st)
{
    return st->cause == ANALYSIS_CAUSE_PREFILL && st->n_culprits > 0 && st->culprit_prompt[0] > 0
               ? st->culprit_prompt[0]
               : 0;
}

int plot_stall_prompt_lengths(const analysis_summary *s, int32_t *one)
{
    *one = 0;
    for (int64_t i = 0; i < s->n_stall_list; i++) {
        const int32_t tokens = stall_prompt(&s->stall_list[i]);
        if (tokens == 0 || tokens == *one)
            continue;
        if (*one)
            return 2;
        *one = tokens;
    }
    return *one ? 1 : 0;
}

int plot_stalls_vs_prompt(plot_chart *c, const analysis_summary *s, const char *note, char *err)
{
    plot_chart_init(c, "Each prefill stall against its culprit's prompt", 960, 420);
    set_note(c, note);
    plot_panel *p = plot_chart_add_panel(c, "");
    if (!p)
        return OOM(err);
    set_axis(&p->x, "prompt of the longest culprit (tokens, log scale)", true);
    p->x.format = PLOT_TICKS_TOKENS;
    set_axis(&p->y, "stall length (ms, log scale)", true);
    plot_series *ser = plot_panel_add_series(p, "a stall (one user, one gap)", PLOT_DOTS,
                                             CAUSE_COLORS[ANALYSIS_CAUSE_PREFILL]);
    if (!ser)
        return OOM(err);
    ser->size = 4;
    for (int64_t i = 0; i < s->n_stall_list; i++) {
        const int32_t tokens = stall_prompt(&s->stall_list[i]);
        if (tokens > 0 && plot_series_push(ser, tokens, (double)s->stall_list[i].gap_ns / 1e6) != 0)
            return OOM(err);
    }
    return 0;
}

/* ---- (e) steps --------------------------------------------------------------------------------- */

int plot_steps(plot_chart *c, const plot_run *run, const char *note, char *err)
{
    char title[160];
    snprintf(title, sizeof title, "Engine steps (%s): duration and prefill tokens", run->name);
    plot_chart_init(c, title, 960, 520);
    set_note(c, note);
    c->share_x = true;
    plot_panel *dur = plot_chart_add_panel(c, "step duration");
    if (!dur)
        return OOM(err);
    plot_panel *pre = plot_chart_add_panel(c, "prefill tokens in the step");
    if (!pre)
        return OOM(err);
    dur = &c->panels[0];
    dur->weight = 1.3;
    set_axis(&dur->x, "time since the run's start (s)", false);
    set_axis(&dur->y, "duration (ms, log scale)", true);
    set_axis(&pre->x, "time since the run's start (s)", false);
    set_axis(&pre->y, "prefill tokens", false);
    pre->y.from_zero = true;
    pre->y.format = PLOT_TICKS_TOKENS;
    /* Spikes (the longest step per pixel column, drawn from the axis up): a prefill step
     * reads as a spike, not as one lost dot among 8,000. */
    plot_series *d = plot_panel_add_series(dur, "step duration", PLOT_SPIKES, run->color);
    plot_series *t = plot_panel_add_series(pre, "prefill tokens", PLOT_SPIKES, PLOT_COLOR_BASELINE);
    if (!d || !t)
        return OOM(err);
    t->size = 2;
    const tokenlog *log = run->log;
    for (int64_t i = 0; log && i < log->n_steps; i++) {
        const tokenlog_step *st = &log->steps[i];
        double t0 = (double)st->t_start_ns / 1e9;
        if (plot_series_push(d, t0, (double)(st->t_end_ns - st->t_start_ns) / 1e6) != 0)
            return OOM(err);
        if (st->prefill_tokens > 0 && plot_series_push(t, t0, st->prefill_tokens) != 0)
            return OOM(err);
    }
    const analysis_summary *sum = run->summary;
    for (int i = 0; sum && i < sum->n_injections; i++)
        if (plot_panel_add_vmark(dur, sum->injections[i].t_send_s) != 0 ||
            plot_panel_add_vmark(pre, sum->injections[i].t_send_s) != 0)
            return OOM(err);
    snprintf(dur->vmark_name, sizeof dur->vmark_name, "long prompt sent");
    snprintf(pre->vmark_name, sizeof pre->vmark_name, "long prompt sent");
    if (sum && sum->duration_s > 0)
        for (int i = 0; i < 2; i++) {
            c->panels[i].x.fixed = true;
            c->panels[i].x.min = 0;
            c->panels[i].x.max = sum->duration_s;
        }
    return 0;
}

/* ---- sweeps -------------------------------------------------------------------------------------- */

/* Distinct group names in first-seen order. */
static int groups_of(const plot_sweep_point *pts, int n, const char **out, int max)
{
    int g = 0;
    for (int i = 0; i < n; i++) {
        const char *name = pts[i].group ? pts[i].group : "";
        bool seen = false;
        for (int k = 0; k < g; k++)
            seen = seen || strcmp(out[k], name) == 0;
        if (!seen && g < max)
            out[g++] = name;
    }
    return g;
}

static bool in_group(const plot_sweep_point *p, const char *group)
{
    return strcmp(p->group ? p->group : "", group) == 0;
}

static void format_tokens(char *buf, size_t size, double v)
{
    long long n = llround(v);
    if (n >= 1000 && n % 1000 == 0)
        snprintf(buf, size, "%lldk", n / 1000);
    else
        snprintf(buf, size, "%lld", n);
}

static void add_tick(plot_axis *a, double v)
{
    for (int i = 0; i < a->n_ticks; i++)
        if (a->ticks[i] == v)
            return;
    if (a->n_ticks < (int)(sizeof a->ticks / sizeof a->ticks[0]))
        a->ticks[a->n_ticks++] = v;
    /* Keep them ascending: labels are thinned in screen order. */
    for (int i = a->n_ticks - 1; i > 0 && a->ticks[i] < a->ticks[i - 1]; i--) {
        double t = a->ticks[i];
        a->ticks[i] = a->ticks[i - 1];
        a->ticks[i - 1] = t;
    }
}

int plot_spike_vs_prompt(plot_chart *c, const plot_sweep_point *pts, int n,
                         const double *model_x, const double *model_ms, int n_model,
                         const char *model_name, const char *note, char *err)
{
    plot_chart_init(c, "Spike vs prompt length: the gap one long prompt causes", 960, 480);
    set_note(c, note);
    plot_panel *p = plot_chart_add_panel(c, "");
    if (!p)
        return OOM(err);
    set_axis(&p->x, "injected prompt (tokens, log scale)", true);
    p->x.format = PLOT_TICKS_TOKENS;
    set_axis(&p->y, "longest gap per injection, median (ms, log scale)", true);
    if (n_model > 0) {
        plot_series *m = plot_panel_add_series(p, model_name ? model_name : "cost model",
                                               PLOT_LINE, PLOT_COLOR_MODEL);
        if (!m)
            return OOM(err);
        m->dashed = true;
        for (int i = 0; i < n_model; i++)
            if (model_ms[i] > 0 && plot_series_push(m, model_x[i], model_ms[i]) != 0)
                return OOM(err);
    }
    /* The measured lengths with room on both sides; the model's line is clipped to it. */
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < n; i++)
        if (pts[i].prompt_tokens > 0) {
            lo = fmin(lo, pts[i].prompt_tokens);
            hi = fmax(hi, pts[i].prompt_tokens);
        }
    if (hi > 0) {
        p->x.fixed = true;
        p->x.min = lo / 1.35;
        p->x.max = hi * 1.35;
    }
    const char *groups[16];
    int ng = groups_of(pts, n, groups, 16);
    for (int g = 0; g < ng; g++) {
        char name[96];
        snprintf(name, sizeof name, "measured spike%s%s", groups[g][0] ? ": " : "", groups[g]);
        plot_series *s = plot_panel_add_series(p, name, PLOT_POINTS,
                                               ng == 1 ? PLOT_COLOR_INTERFERENCE : plot_palette(g));
        if (!s)
            return OOM(err);
        s->join = true;
        s->mark = (plot_mark)(g % 4);
        /* In prompt order, each labelled with its value and the step from the last. */
        double prev_x = 0, prev_y = 0;
        for (;;) {
            int best = -1;
            for (int i = 0; i < n; i++)
                if (in_group(&pts[i], groups[g]) && pts[i].prompt_tokens > prev_x &&
                    (pts[i].spike_ms > 0 || pts[i].max_gap_ms > 0) &&
                    (best < 0 || pts[i].prompt_tokens < pts[best].prompt_tokens))
                    best = i;
            if (best < 0)
                break;
            double y = pts[best].spike_ms > 0 ? pts[best].spike_ms : pts[best].max_gap_ms;
            char label[64], ms[32];
            format_ms(ms, sizeof ms, y);
            if (prev_y > 0)
                snprintf(label, sizeof label, "%s (\xc3\x97%.2f)", ms, y / prev_y);
            else
                snprintf(label, sizeof label, "%s", ms);
            if (plot_series_push_labelled(s, pts[best].prompt_tokens, y, label) != 0)
                return OOM(err);
            add_tick(&p->x, pts[best].prompt_tokens);
            prev_x = pts[best].prompt_tokens;
            prev_y = y;
        }
    }
    return 0;
}

int plot_tradeoff(plot_chart *c, const plot_sweep_point *pts, int n, const char *note,
                  char *err)
{
    plot_chart_init(c, "Chunked-prefill trade-off: tail gap vs the long prompt's TTFT, per token "
                       "budget", 960, 500);
    set_note(c, note);
    plot_panel *p = plot_chart_add_panel(c, "");
    if (!p)
        return OOM(err);
    set_axis(&p->x, "long prompt's time to first token, p50 (ms, log scale)", true);
    set_axis(&p->y, "gap between tokens (ms, log scale)", true);
    const char *groups[8];
    int ng = groups_of(pts, n, groups, 8);
    for (int g = 0; g < ng; g++) {
        for (int which = 0; which < 2; which++) {
            char name[96];
            snprintf(name, sizeof name, "%s gap%s%s", which == 0 ? "max" : "p99.9",
                     groups[g][0] ? ": " : "", groups[g]);
            plot_color color = ng == 1 ? (which == 0 ? PLOT_COLOR_INTERFERENCE : plot_palette(0))
                                       : plot_palette(2 * g + which);
            plot_series *s = plot_panel_add_series(p, name, PLOT_POINTS, color);
            if (!s)
                return OOM(err);
            s->join = true;
            s->dashed = which == 1;
            s->mark = which == 0 ? PLOT_MARK_CIRCLE : PLOT_MARK_SQUARE;
            /* By budget, so the line walks from small chunks to one-step prefill. */
            double prev = 0;
            for (;;) {
                int best = -1;
                for (int i = 0; i < n; i++)
                    if (in_group(&pts[i], groups[g]) && pts[i].budget > prev &&
                        pts[i].ttft_ms > 0 &&
                        (best < 0 || pts[i].budget < pts[best].budget))
                        best = i;
                if (best < 0)
                    break;
                char label[48], tok[24];
                format_tokens(tok, sizeof tok, pts[best].budget);
                snprintf(label, sizeof label, "B=%s", tok);
                double y = which == 0 ? pts[best].max_gap_ms : pts[best].p999_gap_ms;
                /* The budget labels the max-gap point; its p99.9 sits straight under it. */
                if (plot_series_push_labelled(s, pts[best].ttft_ms, y, which == 0 ? label : NULL) != 0)
                    return OOM(err);
                prev = pts[best].budget;
            }
        }
    }
    return 0;
}
