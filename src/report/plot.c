/* plot — the chart description (plot.h); plot_draw.c draws it, plot_render.c renders it to
 * PNG and SVG. */
#include "report/plot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

plot_color plot_palette(int k)
{
    /* Tableau 10 without its purple: purple means "injection" in every chart. */
    static const plot_color palette[] = {
        {0.12, 0.47, 0.71, 1}, {1.00, 0.50, 0.05, 1}, {0.17, 0.63, 0.17, 1},
        {0.84, 0.15, 0.16, 1}, {0.55, 0.34, 0.29, 1}, {0.09, 0.75, 0.81, 1},
        {0.74, 0.74, 0.13, 1}, {0.89, 0.47, 0.76, 1}, {0.50, 0.50, 0.50, 1},
    };
    int n = (int)(sizeof palette / sizeof palette[0]);
    return palette[((k % n) + n) % n];
}

/* ---- the description ----------------------------------------------------------------- */

void plot_chart_init(plot_chart *c, const char *title, int width, int height)
{
    memset(c, 0, sizeof *c);
    snprintf(c->title, sizeof c->title, "%s", title ? title : "");
    c->width = width;
    c->height = height;
}

void plot_chart_free(plot_chart *c)
{
    for (int i = 0; i < c->n_panels; i++) {
        plot_panel *p = &c->panels[i];
        for (int j = 0; j < p->n_series; j++) {
            plot_series *s = &p->series[j];
            free(s->x);
            free(s->y);
            if (s->labels)
                for (int64_t k = 0; k < s->n; k++)
                    free(s->labels[k]);
            free(s->labels);
        }
        free(p->series);
        free(p->vmarks);
    }
    free(c->panels);
    c->panels = NULL;
    c->n_panels = c->cap_panels = 0;
}

plot_panel *plot_chart_add_panel(plot_chart *c, const char *title)
{
    if (c->n_panels == c->cap_panels) {
        int cap = c->cap_panels ? c->cap_panels * 2 : 4;
        plot_panel *p = realloc(c->panels, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        c->panels = p;
        c->cap_panels = cap;
    }
    plot_panel *p = &c->panels[c->n_panels++];
    memset(p, 0, sizeof *p);
    snprintf(p->title, sizeof p->title, "%s", title ? title : "");
    p->weight = 1;
    return p;
}

plot_series *plot_panel_add_series(plot_panel *p, const char *name, plot_series_kind kind,
                                   plot_color color)
{
    if (p->n_series == p->cap_series) {
        int cap = p->cap_series ? p->cap_series * 2 : 4;
        plot_series *s = realloc(p->series, (size_t)cap * sizeof *s);
        if (!s)
            return NULL;
        p->series = s;
        p->cap_series = cap;
    }
    plot_series *s = &p->series[p->n_series++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name ? name : "");
    s->kind = kind;
    s->color = color;
    s->size = kind == PLOT_DOTS ? 3.0 : kind == PLOT_POINTS ? 7.0 : 1.5;
    return s;
}

static int series_grow(plot_series *s)
{
    if (s->n < s->cap)
        return 0;
    int64_t cap = s->cap ? s->cap * 2 : 64;
    double *x = realloc(s->x, (size_t)cap * sizeof *x);
    if (!x)
        return -1;
    s->x = x;
    double *y = realloc(s->y, (size_t)cap * sizeof *y);
    if (!y)
        return -1;
    s->y = y;
    if (s->labels) {
        char **l = realloc(s->labels, (size_t)cap * sizeof *l);
        if (!l)
            return -1;
        s->labels = l;
    }
    s->cap = cap;
    return 0;
}

int plot_series_push(plot_series *s, double x, double y)
{
    if (series_grow(s) != 0)
        return -1;
    s->x[s->n] = x;
    s->y[s->n] = y;
    if (s->labels)
        s->labels[s->n] = NULL;
    s->n++;
    return 0;
}

int plot_series_push_labelled(plot_series *s, double x, double y, const char *label)
{
    if (series_grow(s) != 0)
        return -1;
    if (!s->labels) {
        /* First label: every earlier point gets none. */
        s->labels = calloc((size_t)s->cap, sizeof *s->labels);
        if (!s->labels)
            return -1;
    }
    char *copy = NULL;
    if (label && !(copy = strdup(label)))
        return -1;
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->labels[s->n] = copy;
    s->n++;
    return 0;
}

int plot_panel_add_vmark(plot_panel *p, double x)
{
    if (p->n_vmarks == p->cap_vmarks) {
        int cap = p->cap_vmarks ? p->cap_vmarks * 2 : 16;
        double *v = realloc(p->vmarks, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        p->vmarks = v;
        p->cap_vmarks = cap;
    }
    p->vmarks[p->n_vmarks++] = x;
    return 0;
}

void plot_panel_add_hline(plot_panel *p, double y, const char *label, plot_color color)
{
    if (p->n_hlines >= (int)(sizeof p->hlines / sizeof p->hlines[0]))
        return;
    plot_hline *h = &p->hlines[p->n_hlines++];
    h->y = y;
    snprintf(h->label, sizeof h->label, "%s", label ? label : "");
    h->color = color;
}
