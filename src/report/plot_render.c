/* plot_render — a chart to PNG and SVG, in memory or in files, each through the one drawing
 * path (plot_draw.c), so the two are the same picture by construction (plot.h). */
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
