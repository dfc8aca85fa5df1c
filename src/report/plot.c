/* plot — the chart description, and its rendering to PNG and SVG through the one drawing
 * path (plot_draw.c). */
#include "report/plot.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cairo-svg.h>
#include <cairo.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/fsio.h"

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

/* ---- rendering ------------------------------------------------------------------------------ */

/* cairo's write callback: the SVG or PNG goes into a buf. */
static cairo_status_t svg_write(void *closure, const unsigned char *data, unsigned int length)
{
    return buf_append(closure, data, length) == 0 ? CAIRO_STATUS_SUCCESS
                                                  : CAIRO_STATUS_WRITE_ERROR;
}

static int check_size(const plot_chart *c, char *err)
{
    if (c->width < 100 || c->height < 80 || c->width > 8000 || c->height > 8000)
        return err_set(err, "chart '%s': size %dx%d out of range", c->title, c->width, c->height);
    return 0;
}

int plot_render_svg(const plot_chart *c, char **out, size_t *len, char *err)
{
    *out = NULL;
    if (check_size(c, err) != 0)
        return -1;
    buf svg = {0};
    cairo_surface_t *surface =
        cairo_svg_surface_create_for_stream(svg_write, &svg, c->width, c->height);
    cairo_svg_surface_set_document_unit(surface, CAIRO_SVG_UNIT_PX);
    cairo_t *cr = cairo_create(surface);
    plot_draw(cr, c);
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    cairo_surface_finish(surface);
    if (st == CAIRO_STATUS_SUCCESS)
        st = cairo_surface_status(surface);
    cairo_surface_destroy(surface);
    if (st != CAIRO_STATUS_SUCCESS || svg.failed || !svg.data) {
        const bool oom = svg.failed;
        buf_free(&svg);
        return err_set(err, "chart '%s': SVG rendering failed: %s", c->title,
                       oom ? "out of memory" : cairo_status_to_string(st));
    }
    if (len)
        *len = svg.len;
    *out = buf_detach(&svg);
    return 0;
}

/* The PNG goes into memory and lands with one atomic write, like every other artifact. */
static int render_png(const plot_chart *c, const char *path, char *err)
{
    if (check_size(c, err) != 0)
        return -1;
    cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, c->width, c->height);
    cairo_t *cr = cairo_create(surface);
    plot_draw(cr, c);
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    buf png = {0};
    if (st == CAIRO_STATUS_SUCCESS)
        st = cairo_surface_write_to_png_stream(surface, svg_write, &png);
    cairo_surface_destroy(surface);
    int rc = st == CAIRO_STATUS_SUCCESS && !png.failed
                 ? fsio_write_atomic(path, png.data, png.len, err)
                 : err_set(err, "cannot write %s: %s", path,
                           png.failed ? "out of memory" : cairo_status_to_string(st));
    buf_free(&png);
    return rc;
}

int plot_render_file(const plot_chart *c, plot_format format, const char *path, char *err)
{
    if (format == PLOT_PNG)
        return render_png(c, path, err);
    char *svg = NULL;
    size_t len = 0;
    if (plot_render_svg(c, &svg, &len, err) != 0)
        return -1;
    int rc = fsio_write_atomic(path, svg, len, err);
    free(svg);
    return rc;
}

int plot_render_both(const plot_chart *c, const char *dir, const char *name, char **svg_out,
                     char *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.png", dir, name);
    if (render_png(c, path, err) != 0)
        return -1;
    char *svg = NULL;
    size_t len = 0;
    if (plot_render_svg(c, &svg, &len, err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/%s.svg", dir, name);
    if (fsio_write_atomic(path, svg, len, err) != 0) {
        free(svg);
        return -1;
    }
    if (svg_out)
        *svg_out = svg;
    else
        free(svg);
    return 0;
}

void plot_release_caches(void)
{
    cairo_debug_reset_static_data();
    /* fontconfig keeps its parsed configuration until FcFini. cairo loads fontconfig, we
     * do not link it, so look the symbol up; the next drawing initialises it again. */
    void *sym = dlsym(RTLD_DEFAULT, "FcFini");
    if (sym) {
        void (*fc_fini)(void);
        memcpy(&fc_fini, &sym, sizeof fc_fini);
        fc_fini();
    }
}
