/* plot_draw — the one drawing path behind every PNG and SVG (plot.h's plot_draw): the
 * header and legend, the panels, their axes, series, markers and labels, laid out so that
 * no label covers another. */
#include "report/plot.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cairo.h>

#include "report/plot_axis.h"

#define FONT "DejaVu Sans"
#define TITLE_PT 16.0
#define NOTE_PT 11.0
#define LEGEND_PT 11.0
#define TICK_PT 11.0
#define LABEL_PT 12.0
#define PANEL_TITLE_PT 12.0
#define MIN_LABEL_PT 8.0
#define MARGIN 14.0
#define LABEL_GAP 6.0  /* between neighbouring labels, px */
#define MAX_PLACED 512 /* point and value labels remembered for collision checks */
#define MAX_SEGMENTS 4096 /* line segments labels must not cross */
#define VMARK_ALPHA 0.35  /* an injection marker's line: faint, so the spike on it shows */
#define FAINT(c) ((plot_color){(c).r, (c).g, (c).b, VMARK_ALPHA})
#define VMARK_HEAD 7.0    /* the width and height of its head at the top, px */

/* ---- text ------------------------------------------------------------------------------ */

typedef struct rect {
    double x, y, w, h;
} rect;

typedef struct draw_ctx {
    cairo_t *cr;
    rect placed[MAX_PLACED]; /* labels placed so far */
    int n_placed;
    double seg[MAX_SEGMENTS][4]; /* x0, y0, x1, y1 of the lines drawn in this panel */
    int n_seg;
} draw_ctx;

static void set_color(cairo_t *cr, plot_color c)
{
    cairo_set_source_rgba(cr, c.r, c.g, c.b, c.a);
}

/* A marker's head: a small triangle hanging from top at x (a path; the caller fills). */
static void vmark_head(cairo_t *cr, double x, double top)
{
    cairo_move_to(cr, x - VMARK_HEAD / 2, top);
    cairo_line_to(cr, x + VMARK_HEAD / 2, top);
    cairo_line_to(cr, x, top + VMARK_HEAD);
    cairo_close_path(cr);
}

static void set_font(cairo_t *cr, double pt, bool bold)
{
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, pt);
}

static double text_width(cairo_t *cr, const char *s, double pt, bool bold)
{
    cairo_text_extents_t e;
    set_font(cr, pt, bold);
    cairo_text_extents(cr, s, &e);
    return e.x_advance;
}

enum { LEFT, CENTER, RIGHT };

/* Draw s with its top at y (so boxes are easy to reason about); returns its box. */
static rect draw_text(cairo_t *cr, const char *s, double x, double y, double pt, bool bold,
                      int align, plot_color color)
{
    double w = text_width(cr, s, pt, bold);
    double left = align == LEFT ? x : align == CENTER ? x - w / 2 : x - w;
    set_color(cr, color);
    cairo_move_to(cr, left, y + pt * 0.8);
    cairo_show_text(cr, s);
    cairo_new_path(cr);
    return (rect){left, y, w, pt};
}

static bool overlaps(rect a, rect b)
{
    return a.x < b.x + b.w + 2 && b.x < a.x + a.w + 2 && a.y < b.y + b.h + 1 && b.y < a.y + a.h + 1;
}

static bool inside(rect a, rect area)
{
    return a.x >= area.x && a.y >= area.y && a.x + a.w <= area.x + area.w &&
           a.y + a.h <= area.y + area.h;
}

/* Does the segment cross the rectangle? Liang-Barsky clipping: some part of it is inside. */
static bool segment_hits(const double *sg, rect r)
{
    double x0 = sg[0], y0 = sg[1], dx = sg[2] - sg[0], dy = sg[3] - sg[1];
    double p[4] = {-dx, dx, -dy, dy};
    double q[4] = {x0 - r.x, r.x + r.w - x0, y0 - r.y, r.y + r.h - y0};
    double t0 = 0, t1 = 1;
    for (int i = 0; i < 4; i++) {
        if (p[i] == 0) {
            if (q[i] < 0)
                return false;
            continue;
        }
        double t = q[i] / p[i];
        if (p[i] < 0)
            t0 = t > t0 ? t : t0;
        else
            t1 = t < t1 ? t : t1;
        if (t0 > t1)
            return false;
    }
    return true;
}

static bool collides(const draw_ctx *d, rect r)
{
    for (int i = 0; i < d->n_placed; i++)
        if (overlaps(r, d->placed[i]))
            return true;
    rect grown = {r.x - 2, r.y - 2, r.w + 4, r.h + 4};
    for (int i = 0; i < d->n_seg; i++)
        if (segment_hits(d->seg[i], grown))
            return true;
    return false;
}

static void remember_segment(draw_ctx *d, double x0, double y0, double x1, double y1)
{
    if (d && d->n_seg < MAX_SEGMENTS) {
        double *sg = d->seg[d->n_seg++];
        sg[0] = x0, sg[1] = y0, sg[2] = x1, sg[3] = y1;
    }
}

static void remember(draw_ctx *d, rect r)
{
    if (d->n_placed < MAX_PLACED)
        d->placed[d->n_placed++] = r;
}

static const plot_color BLACK = {0, 0, 0, 1};
static const plot_color DARK = {0.2, 0.2, 0.2, 1};
static const plot_color GRAY = {0.45, 0.45, 0.45, 1};
static const plot_color GRID = {0.88, 0.88, 0.88, 1};
static const plot_color WHITE = {1, 1, 1, 1};

/* Greedy in screen order: a label is kept when it clears the last kept one. Returns
 * whether every candidate label fitted. */
static bool thin_pass(const plot_axis_state *s, const double *pos, const double *extent, bool *keep)
{
    bool all = true;
    double last_end = -DBL_MAX;
    for (int i = 0; i < s->n_ticks; i++) {
        if (!keep[i])
            continue;
        double lo = pos[i] - extent[i] / 2;
        if (lo < last_end + LABEL_GAP) {
            keep[i] = false;
            all = false;
            continue;
        }
        last_end = lo + extent[i];
    }
    return all;
}

/* Which tick labels to draw so that no two overlap: on a log axis whose 2s and 5s do not
 * all fit, only the decades compete. keep[] gets the verdict per tick. */
static void thin_labels(cairo_t *cr, const plot_axis_state *s, bool horizontal, double origin,
                        double length, bool *keep)
{
    double pos[64], extent[64];
    for (int i = 0; i < s->n_ticks; i++) {
        char buf[64];
        plot_tick_label(s, i, buf, sizeof buf);
        double f = plot_axis_frac(s, s->ticks[i]);
        /* Screen order, ascending: x grows to the right, y labels run bottom to top. */
        pos[i] = horizontal ? origin + f * length : -(origin - f * length);
        extent[i] = horizontal ? text_width(cr, buf, TICK_PT, false) : TICK_PT;
        keep[i] = true;
    }
    if (s->a->log && s->a->n_ticks == 0 && s->a->n_categories == 0 && s->hi / s->lo >= 4) {
        bool trial[64];
        memcpy(trial, keep, sizeof trial);
        if (!thin_pass(s, pos, extent, trial))
            for (int i = 0; i < s->n_ticks; i++) {
                double m = s->ticks[i] / pow(10, floor(log10(s->ticks[i]) + 1e-9));
                if (fabs(m - 1) > 1e-6)
                    keep[i] = false;
            }
    }
    thin_pass(s, pos, extent, keep);
}

/* ---- the legend ------------------------------------------------------------------------- */

typedef enum { SW_SQUARE, SW_LINE, SW_DASH, SW_MARK, SW_MARK_LINE, SW_VMARK, SW_SPIKE } swatch_kind;

typedef struct legend_item {
    char text[160];
    plot_color color;
    swatch_kind swatch;
    plot_mark mark;
    bool hollow;
} legend_item;

static bool legend_has(const legend_item *items, int n, const char *text)
{
    for (int k = 0; k < n; k++)
        if (strcmp(items[k].text, text) == 0)
            return true;
    return false;
}

/* Series of every panel first, then the markers, then the reference lines; one entry per
 * name. */
static int collect_legend(const plot_chart *c, legend_item *items, int max)
{
    int n = 0;
    for (int i = 0; i < c->n_panels; i++) {
        const plot_panel *p = &c->panels[i];
        for (int j = 0; j < p->n_series && n < max; j++) {
            const plot_series *s = &p->series[j];
            if (!s->name[0] || legend_has(items, n, s->name))
                continue;
            legend_item *it = &items[n++];
            snprintf(it->text, sizeof it->text, "%s", s->name);
            it->color = s->color;
            it->mark = s->mark;
            it->hollow = s->hollow;
            switch (s->kind) {
            case PLOT_DOTS:
            case PLOT_BARS:
                it->swatch = SW_SQUARE;
                break;
            case PLOT_LINE:
                it->swatch = s->dashed ? SW_DASH : SW_LINE;
                break;
            case PLOT_POINTS:
                it->swatch = s->join ? SW_MARK_LINE : SW_MARK;
                break;
            case PLOT_SPIKES:
                it->swatch = SW_SPIKE;
                break;
            }
        }
    }
    for (int i = 0; i < c->n_panels && n < max; i++) {
        const plot_panel *p = &c->panels[i];
        if (p->n_vmarks == 0 || !p->vmark_name[0] || legend_has(items, n, p->vmark_name))
            continue;
        legend_item *it = &items[n++];
        snprintf(it->text, sizeof it->text, "%s", p->vmark_name);
        it->color = PLOT_COLOR_INJECTION;
        it->swatch = SW_VMARK;
    }
    for (int i = 0; i < c->n_panels; i++) {
        const plot_panel *p = &c->panels[i];
        for (int h = 0; h < p->n_hlines && n < max; h++) {
            const plot_hline *hl = &p->hlines[h];
            if (!hl->label[0] || legend_has(items, n, hl->label))
                continue;
            legend_item *it = &items[n++];
            snprintf(it->text, sizeof it->text, "%s", hl->label);
            it->color = hl->color;
            it->swatch = SW_DASH;
        }
    }
    return n;
}

#define SWATCH_W 22.0
#define LEGEND_ROW 18.0

/* Rows the legend takes at this width (layout only, nothing drawn). */
static int legend_rows(cairo_t *cr, const legend_item *items, int n, double width)
{
    if (n == 0)
        return 0;
    int rows = 1;
    double x = 0;
    for (int i = 0; i < n; i++) {
        double w = SWATCH_W + 5 + text_width(cr, items[i].text, LEGEND_PT, false) + 16;
        if (x > 0 && x + w > width) {
            rows++;
            x = 0;
        }
        x += w;
    }
    return rows;
}

static void draw_mark(cairo_t *cr, plot_mark mark, double x, double y, double size)
{
    double r = size / 2;
    switch (mark) {
    case PLOT_MARK_CIRCLE:
        cairo_new_sub_path(cr);
        cairo_arc(cr, x, y, r, 0, 2 * M_PI);
        break;
    case PLOT_MARK_SQUARE:
        cairo_rectangle(cr, x - r * 0.9, y - r * 0.9, r * 1.8, r * 1.8);
        break;
    case PLOT_MARK_DIAMOND:
        cairo_move_to(cr, x, y - r * 1.2);
        cairo_line_to(cr, x + r * 1.2, y);
        cairo_line_to(cr, x, y + r * 1.2);
        cairo_line_to(cr, x - r * 1.2, y);
        cairo_close_path(cr);
        break;
    case PLOT_MARK_TRIANGLE:
        cairo_move_to(cr, x, y - r * 1.2);
        cairo_line_to(cr, x + r * 1.1, y + r * 0.8);
        cairo_line_to(cr, x - r * 1.1, y + r * 0.8);
        cairo_close_path(cr);
        break;
    }
}

/* Fill the marks drawn as the current path, or stroke their outlines. */
static void finish_marks(cairo_t *cr, bool hollow)
{
    if (!hollow) {
        cairo_fill(cr);
        return;
    }
    cairo_set_line_width(cr, 1.5);
    cairo_stroke(cr);
}

static void draw_legend(draw_ctx *d, const legend_item *items, int n, double x0, double y0,
                        double width)
{
    cairo_t *cr = d->cr;
    double x = x0, y = y0;
    for (int i = 0; i < n; i++) {
        const legend_item *it = &items[i];
        double tw = text_width(cr, it->text, LEGEND_PT, false);
        double w = SWATCH_W + 5 + tw + 16;
        if (x > x0 && x + w > x0 + width) {
            x = x0;
            y += LEGEND_ROW;
        }
        double cy = y + LEGEND_PT / 2 + 1;
        set_color(cr, it->color);
        switch (it->swatch) {
        case SW_SQUARE:
            cairo_rectangle(cr, x + 5, cy - 5, 12, 10);
            cairo_fill(cr);
            break;
        case SW_LINE:
        case SW_DASH:
        case SW_MARK_LINE:
            cairo_set_line_width(cr, 2);
            if (it->swatch == SW_DASH) {
                double dash[] = {4, 3};
                cairo_set_dash(cr, dash, 2, 0);
            }
            cairo_move_to(cr, x, cy);
            cairo_line_to(cr, x + SWATCH_W, cy);
            cairo_stroke(cr);
            cairo_set_dash(cr, NULL, 0, 0);
            if (it->swatch == SW_MARK_LINE) {
                draw_mark(cr, it->mark, x + SWATCH_W / 2, cy, 7);
                finish_marks(cr, it->hollow);
            }
            break;
        case SW_MARK:
            draw_mark(cr, it->mark, x + SWATCH_W / 2, cy, it->hollow ? 10 : 7);
            finish_marks(cr, it->hollow);
            break;
        case SW_VMARK: /* as drawn, in fills (the SVG's injection strokes are the markers) */
            set_color(cr, FAINT(it->color));
            cairo_rectangle(cr, x + SWATCH_W / 2 - 0.5, cy - 7, 1, 14);
            cairo_fill(cr);
            set_color(cr, it->color);
            vmark_head(cr, x + SWATCH_W / 2, cy - 7);
            cairo_fill(cr);
            break;
        case SW_SPIKE:
            cairo_rectangle(cr, x + SWATCH_W / 2 - 1.5, cy - 6, 3, 12);
            cairo_fill(cr);
            break;
        }
        remember(d, draw_text(cr, it->text, x + SWATCH_W + 5, y, LEGEND_PT, false, LEFT, DARK));
        x += w;
    }
}

/* ---- series ------------------------------------------------------------------------------ */

typedef struct panel_geom {
    rect area; /* the plot area in px */
    plot_axis_state x, y;
} panel_geom;

static bool to_px(const panel_geom *g, double x, double y, double *px, double *py)
{
    double fx = plot_axis_frac(&g->x, x), fy = plot_axis_frac(&g->y, y);
    if (!isfinite(fx) || !isfinite(fy))
        return false;
    *px = g->area.x + fx * g->area.w;
    *py = g->area.y + g->area.h - fy * g->area.h;
    return true;
}

static void draw_dots(cairo_t *cr, const panel_geom *g, const plot_series *s)
{
    double cell = s->size > 0.5 ? s->size : 0.5;
    int cols = (int)ceil(g->area.w / cell) + 1, rows = (int)ceil(g->area.h / cell) + 1;
    unsigned char *seen = calloc((size_t)cols * (size_t)rows, 1);
    if (!seen)
        return;
    for (int64_t k = 0; k < s->n; k++) {
        double px, py;
        if (!to_px(g, s->x[k], s->y[k], &px, &py))
            continue;
        int cx = (int)floor((px - g->area.x) / cell), cy = (int)floor((py - g->area.y) / cell);
        if (cx < 0 || cy < 0 || cx >= cols || cy >= rows || seen[(size_t)cy * cols + cx])
            continue;
        seen[(size_t)cy * cols + cx] = 1;
        cairo_rectangle(cr, g->area.x + cx * cell, g->area.y + cy * cell, cell, cell);
    }
    free(seen);
    set_color(cr, s->color);
    cairo_fill(cr);
}

static void draw_line(draw_ctx *d, cairo_t *cr, const panel_geom *g, const plot_series *s)
{
    bool pen = false;
    double lx = 0, ly = 0;
    for (int64_t k = 0; k < s->n; k++) {
        double px, py;
        if (!to_px(g, s->x[k], s->y[k], &px, &py)) {
            pen = false;
            continue;
        }
        if (!pen) {
            cairo_move_to(cr, px, py);
            pen = true;
            lx = px, ly = py;
            continue;
        }
        /* Sub-pixel moves add bytes to the SVG and nothing to the picture. */
        if (fabs(px - lx) < 0.5 && fabs(py - ly) < 0.5 && k != s->n - 1)
            continue;
        cairo_line_to(cr, px, py);
        remember_segment(d, lx, ly, px, py);
        lx = px, ly = py;
    }
    set_color(cr, s->color);
    cairo_set_line_width(cr, s->size);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    if (s->dashed) {
        double dash[] = {6, 4};
        cairo_set_dash(cr, dash, 2, 0);
    }
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
}

static void draw_spikes(cairo_t *cr, const panel_geom *g, const plot_series *s)
{
    int cols = (int)ceil(g->area.w) + 1;
    double *top = malloc((size_t)cols * sizeof *top);
    if (!top)
        return;
    for (int i = 0; i < cols; i++)
        top[i] = DBL_MAX;
    for (int64_t k = 0; k < s->n; k++) {
        double px, py;
        if (!to_px(g, s->x[k], s->y[k], &px, &py))
            continue;
        int c = (int)floor(px - g->area.x);
        if (c >= 0 && c < cols && py < top[c])
            top[c] = py;
    }
    double bottom = g->area.y + g->area.h;
    for (int c = 0; c < cols; c++)
        if (top[c] < bottom) {
            cairo_move_to(cr, g->area.x + c + 0.5, bottom);
            cairo_line_to(cr, g->area.x + c + 0.5, fmax(top[c], g->area.y));
        }
    free(top);
    set_color(cr, s->color);
    cairo_set_line_width(cr, s->size > 0 ? s->size : 1);
    cairo_stroke(cr);
}

static void draw_bars(draw_ctx *d, const panel_geom *g, const plot_panel *p, int index)
{
    cairo_t *cr = d->cr;
    const plot_series *s = &p->series[index];
    int n_bar_series = 0, slot = 0;
    for (int i = 0; i < p->n_series; i++)
        if (p->series[i].kind == PLOT_BARS) {
            if (i == index)
                slot = n_bar_series;
            n_bar_series++;
        }
    double cat_w = g->area.w / (g->x.hi - g->x.lo);
    double bar_w = cat_w * 0.8 / n_bar_series;
    double bottom = g->area.y + g->area.h;
    set_color(cr, s->color);
    for (int64_t k = 0; k < s->n; k++) {
        double cx = g->area.x + plot_axis_frac(&g->x, s->x[k]) * g->area.w;
        double left = cx - cat_w * 0.4 + slot * bar_w;
        double fy = plot_axis_frac(&g->y, s->y[k]);
        if (!isfinite(fy))
            continue;
        double top = g->area.y + g->area.h - fmin(fmax(fy, 0), 1) * g->area.h;
        cairo_rectangle(cr, left + 0.5, top, bar_w - 1, bottom - top);
    }
    cairo_fill(cr);
    if (!s->value_labels)
        return;
    for (int64_t k = 0; k < s->n; k++) {
        double fy = plot_axis_frac(&g->y, s->y[k]);
        if (!isfinite(fy))
            continue;
        char buf[32];
        plot_format_value(buf, sizeof buf, s->y[k], g->y.a->format);
        double cx = g->area.x + plot_axis_frac(&g->x, s->x[k]) * g->area.w - cat_w * 0.4 +
                    (slot + 0.5) * bar_w;
        double top = g->area.y + g->area.h - fmin(fmax(fy, 0), 1) * g->area.h;
        double pt = 10;
        double w = text_width(cr, buf, pt, false);
        rect r = {cx - w / 2, top - pt - 3, w, pt};
        if (w > bar_w + 4 || !inside(r, g->area) || collides(d, r))
            continue;
        draw_text(cr, buf, cx, top - pt - 3, pt, false, CENTER, DARK);
        remember(d, r);
    }
}

static void draw_points(draw_ctx *d, const panel_geom *g, const plot_series *s)
{
    cairo_t *cr = d->cr;
    if (s->join)
        draw_line(d, cr, g, &(plot_series){.kind = PLOT_LINE, .color = s->color, .size = 1.5,
                                        .dashed = s->dashed, .x = s->x, .y = s->y, .n = s->n});
    set_color(cr, s->color);
    for (int64_t k = 0; k < s->n; k++) {
        double px, py;
        if (to_px(g, s->x[k], s->y[k], &px, &py))
            draw_mark(cr, s->mark, px, py, s->size);
    }
    finish_marks(cr, s->hollow);
}

/* Point labels after every series is drawn, so each can dodge the others. */
static void draw_point_labels(draw_ctx *d, const panel_geom *g, const plot_series *s)
{
    if (!s->labels)
        return;
    cairo_t *cr = d->cr;
    const double pt = 10;
    for (int64_t k = 0; k < s->n; k++) {
        double px, py;
        if (!s->labels[k] || !s->labels[k][0] || !to_px(g, s->x[k], s->y[k], &px, &py))
            continue;
        double w = text_width(cr, s->labels[k], pt, false), off = s->size / 2 + 4;
        /* Upper right first: clear of a line or a band of dots running through the point. */
        rect cand[] = {
            {px + off, py - off - pt, w, pt},        /* upper right */
            {px + off, py - pt / 2, w, pt},          /* right */
            {px - w / 2, py - off - pt, w, pt},      /* above */
            {px - off - w, py - off - pt, w, pt},    /* upper left */
            {px + off, py + off, w, pt},             /* lower right */
            {px - w / 2, py + off, w, pt},           /* below */
            {px - off - w, py - pt / 2, w, pt},      /* left */
            {px - off - w, py + off, w, pt},         /* lower left */
        };
        for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
            if (!inside(cand[i], g->area) || collides(d, cand[i]))
                continue;
            /* A light backing keeps the label readable where it crosses a marker or dots. */
            cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
            cairo_rectangle(cr, cand[i].x - 2, cand[i].y - 1, cand[i].w + 4, cand[i].h + 3);
            cairo_fill(cr);
            draw_text(cr, s->labels[k], cand[i].x, cand[i].y, pt, false, LEFT, DARK);
            remember(d, cand[i]);
            break;
        }
    }
}

/* ---- the chart ----------------------------------------------------------------------------- */

static double fit_label_pt(cairo_t *cr, const char *s, double room)
{
    double pt = LABEL_PT;
    while (pt > MIN_LABEL_PT && text_width(cr, s, pt, false) > room)
        pt -= 0.5;
    return pt;
}

/* The x (px, on a pixel: one crisp pixel wide) of the marker at v; false outside g. */
static bool vmark_x(const panel_geom *g, double v, double *x)
{
    const double f = plot_axis_frac(&g->x, v);
    *x = round(g->area.x + f * g->area.w) + 0.5;
    return isfinite(f) && f >= -1e-9 && f <= 1 + 1e-9;
}

/* The injection markers, beneath the data: each a thin faint line the plot area's height
 * (its own stroke: tests count them in the SVG) under a solid head at the top edge. A
 * full-strength dashed line hid the very spike it marked. */
static void draw_vmarks(cairo_t *cr, const panel_geom *g, const plot_panel *p)
{
    double x;
    cairo_set_line_width(cr, 1);
    for (int i = 0; i < p->n_vmarks; i++) {
        if (!vmark_x(g, p->vmarks[i], &x))
            continue;
        set_color(cr, FAINT(PLOT_COLOR_INJECTION));
        cairo_move_to(cr, x, g->area.y);
        cairo_line_to(cr, x, g->area.y + g->area.h);
        cairo_stroke(cr);
        set_color(cr, PLOT_COLOR_INJECTION);
        vmark_head(cr, x, g->area.y);
        cairo_fill(cr);
    }
}

static void draw_panel(draw_ctx *d, const plot_chart *c, const plot_panel *p, panel_geom *g,
                       bool x_labels, bool x_title)
{
    cairo_t *cr = d->cr;
    rect a = g->area;
    (void)c;
    d->n_seg = 0; /* a panel's labels dodge its own lines */

    /* Grid and ticks. */
    cairo_set_line_width(cr, 1);
    set_color(cr, GRID);
    for (int i = 0; i < g->y.n_ticks; i++) {
        double f = plot_axis_frac(&g->y, g->y.ticks[i]);
        double y = round(a.y + a.h - f * a.h) + 0.5;
        cairo_move_to(cr, a.x, y);
        cairo_line_to(cr, a.x + a.w, y);
    }
    if (g->x.a->n_categories == 0)
        for (int i = 0; i < g->x.n_ticks; i++) {
            double x = round(a.x + plot_axis_frac(&g->x, g->x.ticks[i]) * a.w) + 0.5;
            cairo_move_to(cr, x, a.y);
            cairo_line_to(cr, x, a.y + a.h);
        }
    cairo_stroke(cr);

    /* Data, clipped to the plot area. */
    cairo_save(cr);
    cairo_rectangle(cr, a.x, a.y, a.w, a.h);
    cairo_clip(cr);
    draw_vmarks(cr, g, p);
    bool any_data = false;
    for (int i = 0; i < p->n_series; i++) {
        const plot_series *s = &p->series[i];
        any_data = any_data || s->n > 0;
        switch (s->kind) {
        case PLOT_DOTS:
            draw_dots(cr, g, s);
            break;
        case PLOT_LINE:
            draw_line(d, cr, g, s);
            break;
        case PLOT_SPIKES:
            draw_spikes(cr, g, s);
            break;
        case PLOT_BARS:
        case PLOT_POINTS:
            break; /* after the markers, below */
        }
    }
    for (int i = 0; i < p->n_hlines; i++) {
        double f = plot_axis_frac(&g->y, p->hlines[i].y);
        if (!isfinite(f) || f < 0 || f > 1)
            continue;
        double y = a.y + a.h - f * a.h;
        double hdash[] = {3, 3};
        cairo_set_dash(cr, hdash, 2, 0);
        set_color(cr, p->hlines[i].color);
        cairo_set_line_width(cr, 1.2);
        cairo_move_to(cr, a.x, y);
        cairo_line_to(cr, a.x + a.w, y);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
    }
    for (int i = 0; i < p->n_series; i++) {
        if (p->series[i].kind == PLOT_BARS)
            draw_bars(d, g, p, i);
        else if (p->series[i].kind == PLOT_POINTS)
            draw_points(d, g, &p->series[i]);
    }
    for (int i = 0; i < p->n_series; i++)
        if (p->series[i].kind == PLOT_POINTS)
            draw_point_labels(d, g, &p->series[i]);
    cairo_restore(cr);
    if (!any_data)
        draw_text(cr, "no data", a.x + a.w / 2, a.y + a.h / 2 - 6, LABEL_PT, false, CENTER, GRAY);

    /* Frame. */
    set_color(cr, GRAY);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, round(a.x) + 0.5, round(a.y) + 0.5, round(a.w), round(a.h));
    cairo_stroke(cr);

    /* Tick marks and labels. */
    bool keep[64];
    thin_labels(cr, &g->y, false, a.y + a.h, a.h, keep);
    for (int i = 0; i < g->y.n_ticks; i++) {
        double y = a.y + a.h - plot_axis_frac(&g->y, g->y.ticks[i]) * a.h;
        set_color(cr, GRAY);
        cairo_move_to(cr, a.x - 4, round(y) + 0.5);
        cairo_line_to(cr, a.x, round(y) + 0.5);
        cairo_stroke(cr);
        if (!keep[i])
            continue;
        char buf[64];
        plot_tick_label(&g->y, i, buf, sizeof buf);
        draw_text(cr, buf, a.x - 7, y - TICK_PT / 2, TICK_PT, false, RIGHT, DARK);
    }
    thin_labels(cr, &g->x, true, a.x, a.w, keep);
    for (int i = 0; i < g->x.n_ticks; i++) {
        double x = a.x + plot_axis_frac(&g->x, g->x.ticks[i]) * a.w;
        set_color(cr, GRAY);
        cairo_move_to(cr, round(x) + 0.5, a.y + a.h);
        cairo_line_to(cr, round(x) + 0.5, a.y + a.h + 4);
        cairo_stroke(cr);
        if (!x_labels || !keep[i])
            continue;
        char buf[64];
        plot_tick_label(&g->x, i, buf, sizeof buf);
        draw_text(cr, buf, x, a.y + a.h + 6, TICK_PT, false, CENTER, DARK);
    }

    /* Axis titles: x under its tick labels, y rotated and shrunk to fit the panel. */
    if (x_title && g->x.a->label[0])
        draw_text(cr, g->x.a->label, a.x + a.w / 2, a.y + a.h + 8 + TICK_PT + 4, LABEL_PT, false,
                  CENTER, BLACK);
    if (g->y.a->label[0]) {
        double pt = fit_label_pt(cr, g->y.a->label, a.h + 20);
        cairo_save(cr);
        cairo_translate(cr, MARGIN, a.y + a.h / 2);
        cairo_rotate(cr, -M_PI / 2);
        draw_text(cr, g->y.a->label, 0, 0, pt, false, CENTER, BLACK);
        cairo_restore(cr);
    }
    if (p->title[0])
        draw_text(cr, p->title, a.x, a.y - PANEL_TITLE_PT - 5, PANEL_TITLE_PT, true, LEFT, DARK);
}

/* The widest y tick label of c's panels (px): the left margin is built on it. */
static double widest_y_tick(cairo_t *cr, const plot_chart *c)
{
    double widest = 0;
    for (int i = 0; i < c->n_panels; i++) {
        const plot_panel *p = &c->panels[i];
        plot_axis_state y;
        memset(&y, 0, sizeof y);
        y.a = &p->y;
        double lo, hi;
        plot_data_extent(p, false, p->y.log, &lo, &hi);
        plot_axis_range(&p->y, lo, hi, plot_has_bars(p), &y.lo, &y.hi);
        plot_axis_ticks(&y);
        for (int k = 0; k < y.n_ticks; k++) {
            char buf[64];
            plot_tick_label(&y, k, buf, sizeof buf);
            widest = fmax(widest, text_width(cr, buf, TICK_PT, false));
        }
    }
    return widest;
}

double plot_y_label_width(const plot_chart *c)
{
    cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1);
    cairo_t *cr = cairo_create(surface);
    double widest = widest_y_tick(cr, c);
    cairo_destroy(cr);
    cairo_surface_destroy(surface);
    return widest;
}

void plot_draw(void *cairo_context, const plot_chart *c)
{
    cairo_t *cr = cairo_context;
    draw_ctx *d = calloc(1, sizeof *d);
    if (!d)
        return;
    d->cr = cr;
    double W = c->width, H = c->height;
    set_color(cr, WHITE);
    cairo_rectangle(cr, 0, 0, W, H);
    cairo_fill(cr);

    /* Header: title, note, legend. */
    double y = MARGIN - 4;
    if (c->title[0]) {
        draw_text(cr, c->title, MARGIN, y, TITLE_PT, true, LEFT, BLACK);
        y += TITLE_PT + 6;
    }
    if (c->note[0]) {
        draw_text(cr, c->note, MARGIN, y, NOTE_PT, false, LEFT, GRAY);
        y += NOTE_PT + 6;
    }
    legend_item items[32];
    int n_items = collect_legend(c, items, 32);
    int rows = legend_rows(cr, items, n_items, W - 2 * MARGIN);
    if (rows > 0) {
        draw_legend(d, items, n_items, MARGIN, y + 2, W - 2 * MARGIN);
        y += rows * LEGEND_ROW + 4;
    }

    /* Axes: ranges (shared x when asked), ticks, then the left margin from the widest
     * y tick label. */
    int np = c->n_panels;
    if (np == 0) {
        free(d);
        return;
    }
    panel_geom *geo = calloc((size_t)np, sizeof *geo);
    if (!geo) {
        free(d);
        return;
    }
    double shared_lo = DBL_MAX, shared_hi = -DBL_MAX;
    if (c->share_x)
        for (int i = 0; i < np; i++) {
            double lo, hi;
            plot_data_extent(&c->panels[i], true, c->panels[i].x.log, &lo, &hi);
            shared_lo = fmin(shared_lo, lo);
            shared_hi = fmax(shared_hi, hi);
        }
    double max_tick_w = 0, weight_sum = 0;
    for (int i = 0; i < np; i++) {
        const plot_panel *p = &c->panels[i];
        panel_geom *g = &geo[i];
        g->x.a = &p->x;
        g->y.a = &p->y;
        double lo, hi;
        if (c->share_x) {
            lo = shared_lo, hi = shared_hi;
        } else {
            plot_data_extent(p, true, p->x.log, &lo, &hi);
        }
        plot_axis_range(&p->x, lo, hi, false, &g->x.lo, &g->x.hi);
        plot_data_extent(p, false, p->y.log, &lo, &hi);
        plot_axis_range(&p->y, lo, hi, plot_has_bars(p), &g->y.lo, &g->y.hi);
        plot_axis_ticks(&g->x);
        plot_axis_ticks(&g->y);
        for (int k = 0; k < g->y.n_ticks; k++) {
            char buf[64];
            plot_tick_label(&g->y, k, buf, sizeof buf);
            max_tick_w = fmax(max_tick_w, text_width(cr, buf, TICK_PT, false));
        }
        weight_sum += p->weight > 0 ? p->weight : 1;
    }
    max_tick_w = fmax(max_tick_w, c->y_label_w);
    double left = MARGIN + LABEL_PT + 8 + max_tick_w + 8;
    double right = MARGIN + 6;
    double x_axis_h = 6 + TICK_PT + 6 + LABEL_PT + 6; /* tick labels + axis title */
    double panel_title_h = PANEL_TITLE_PT + 9;
    double fixed = 0;
    for (int i = 0; i < np; i++) {
        bool last = i == np - 1;
        fixed += (c->panels[i].title[0] ? panel_title_h : 6);
        fixed += (!c->share_x || last) ? x_axis_h : 10;
    }
    double avail = H - y - fixed - MARGIN + 4;
    if (avail < 40 * np)
        avail = 40 * np;
    for (int i = 0; i < np; i++) {
        const plot_panel *p = &c->panels[i];
        bool last = i == np - 1;
        y += p->title[0] ? panel_title_h : 6;
        double h = avail * (p->weight > 0 ? p->weight : 1) / weight_sum;
        geo[i].area = (rect){left, y, W - left - right, h};
        y += h;
        y += (!c->share_x || last) ? x_axis_h : 10;
    }
    for (int i = 0; i < np; i++) {
        bool last = i == np - 1;
        bool labels = !c->share_x || last;
        draw_panel(d, c, &c->panels[i], &geo[i], labels, labels);
    }
    free(geo);
    free(d);
}
