/* plot_metrics — the server's Prometheus metrics under the timeline (plot.h, (h)). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "report/plot.h"

static void axis(plot_axis *a, const char *label)
{
    snprintf(a->label, sizeof a->label, "%s", label);
    a->log = false;
    a->from_zero = true;
}

/* A counter's increase belongs to the interval it was counted in: drawn at its middle. */
static double interval_mid_s(const scrape_series *m, int64_t i)
{
    const scrape_row *r = &m->rows[i];
    if (i == 0)
        return (double)r->t_ns / 1e9;
    return ((double)r->t_ns + (double)m->rows[i - 1].t_ns) / 2e9;
}

int plot_server_metrics(plot_chart *c, const plot_run *run, const scrape_series *m,
                        const char *note, char *err)
{
    plot_chart_init(c, "Inside the server: its queue and the tokens it processed", 960, 0);
    snprintf(c->note, sizeof c->note, "%s", note ? note : "");
    c->share_x = true;
    const bool queue = m->has[SCRAPE_RUNNING] || m->has[SCRAPE_WAITING];
    const bool prompt = m->has[SCRAPE_PROMPT_TOKENS];
    const bool gen = m->has[SCRAPE_GENERATION_TOKENS];
    if (!queue && !prompt && !gen)
        return err_set(err, "server_metrics.csv: no column to draw");
    double period_ms = m->n > 1 ? (double)(m->rows[m->n - 1].t_ns - m->rows[0].t_ns) / 1e6 /
                                      (double)(m->n - 1)
                                : 0;
    char title[160];
    if (queue) {
        plot_panel *p = plot_chart_add_panel(c, "requests the server holds");
        if (!p)
            return err_set(err, "out of memory");
        axis(&p->x, "time since the run's start (s)");
        axis(&p->y, "requests");
        struct {
            scrape_column col;
            const char *name;
            plot_color color;
        } lines[] = {{SCRAPE_RUNNING, "running (in the batch)", plot_palette(2)},
                     {SCRAPE_WAITING, "waiting (queued)", plot_palette(3)}};
        double most = 0;
        for (int64_t i = 0; i < m->n; i++)
            for (int k = 0; k < 2; k++)
                if (m->rows[i].has[lines[k].col])
                    most = fmax(most, m->rows[i].value[lines[k].col]);
        /* Headroom: a flat line at its maximum would hide in the frame. */
        p->y.fixed = true;
        p->y.min = 0;
        p->y.max = ceil(most * 1.25) + 1;
        for (int k = 0; k < 2; k++) {
            if (!m->has[lines[k].col])
                continue;
            plot_series *s = plot_panel_add_series(p, lines[k].name, PLOT_LINE, lines[k].color);
            if (!s)
                return err_set(err, "out of memory");
            s->size = 1.5;
            for (int64_t i = 0; i < m->n; i++)
                if (m->rows[i].has[lines[k].col] &&
                    plot_series_push(s, (double)m->rows[i].t_ns / 1e9,
                                     m->rows[i].value[lines[k].col]) != 0)
                    return err_set(err, "out of memory");
        }
    }
    if (prompt) {
        snprintf(title, sizeof title, "prompt tokens per scrape interval (%.0f ms)", period_ms);
        plot_panel *p = plot_chart_add_panel(c, title);
        if (!p)
            return err_set(err, "out of memory");
        axis(&p->x, "time since the run's start (s)");
        axis(&p->y, "prompt tokens");
        p->y.format = PLOT_TICKS_TOKENS;
        plot_series *s = plot_panel_add_series(p, "prompt tokens prefilled", PLOT_SPIKES,
                                               PLOT_COLOR_BASELINE);
        if (!s)
            return err_set(err, "out of memory");
        s->size = 3;
        for (int64_t i = 0; i < m->n; i++)
            if (m->rows[i].has[SCRAPE_PROMPT_TOKENS] &&
                plot_series_push(s, interval_mid_s(m, i), m->rows[i].value[SCRAPE_PROMPT_TOKENS]) != 0)
                return err_set(err, "out of memory");
    }
    if (gen) {
        /* A rate, not a count: a scrape that came late makes one interval longer and the
         * next shorter, and their counts would show it as a bump and a dip. */
        plot_panel *p = plot_chart_add_panel(c, "tokens generated per second, over each scrape "
                                                "interval: the dips are the stalls");
        if (!p)
            return err_set(err, "out of memory");
        axis(&p->x, "time since the run's start (s)");
        axis(&p->y, "tokens/s");
        p->y.format = PLOT_TICKS_TOKENS;
        plot_series *s = plot_panel_add_series(p, "generation tokens/s", PLOT_LINE, run->color);
        if (!s)
            return err_set(err, "out of memory");
        s->size = 1.5;
        for (int64_t i = 1; i < m->n; i++) {
            double dt = (double)(m->rows[i].t_ns - m->rows[i - 1].t_ns) / 1e9;
            if (m->rows[i].has[SCRAPE_GENERATION_TOKENS] && dt > 0 &&
                plot_series_push(s, interval_mid_s(m, i),
                                 m->rows[i].value[SCRAPE_GENERATION_TOKENS] / dt) != 0)
                return err_set(err, "out of memory");
        }
    }
    c->height = 150 + 190 * c->n_panels;
    const analysis_summary *sum = run->summary;
    for (int k = 0; k < c->n_panels; k++) {
        plot_panel *p = &c->panels[k];
        for (int i = 0; sum && i < sum->n_injections; i++)
            if (plot_panel_add_vmark(p, sum->injections[i].t_send_s) != 0)
                return err_set(err, "out of memory");
        snprintf(p->vmark_name, sizeof p->vmark_name, "long prompt sent");
        /* The timeline's x range, so the two charts line up. */
        if (sum && sum->duration_s > 0) {
            p->x.fixed = true;
            p->x.min = 0;
            p->x.max = sum->duration_s;
        }
    }
    return 0;
}
