/* plot: the charts' data, the SVG's structure for fixed tiny datasets, the PNG's size and
 * content, and the one-mark-per-cell reduction. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cairo.h>
#include <cmocka.h>

#include "common/err.h"
#include "report/plot.h"
#include "report/plot_axis.h"

#define MS 1000000LL

/* The injection marker's stroke as cairo writes it in SVG. */
#define MARKER_STROKE "stroke:rgb(60%,0%,60%)"

static void ev(tokenlog *log, int64_t t_ns, int user, int64_t request, int kind)
{
    tokenlog_event e = {.t_ns = t_ns, .request = request, .user = user, .n_tokens = 1, .kind = kind};
    assert_int_equal(tokenlog_add_event(log, &e), 0);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The d="..." of the index-th <path> whose style holds `style`; NULL past the last. */
static char *nth_path_d(const char *svg, const char *style, int index)
{
    const char *p = svg;
    int seen = 0;
    while ((p = strstr(p, "<path")) != NULL) {
        const char *end = strchr(p, '>');
        if (!end)
            return NULL;
        const char *s = strstr(p, style);
        if (s && s < end && seen++ == index) {
            const char *d = strstr(p, " d=\"");
            if (!d || d > end)
                return NULL;
            d += 4;
            const char *q = strchr(d, '"');
            char *out = strndup(d, (size_t)(q - d));
            return out;
        }
        p = end;
    }
    return NULL;
}

/* Two users every 10 ms for 1 s; at 300 and 700 ms everyone waits 150 ms. */
static void tiny_log(tokenlog *log, bool stalls)
{
    tokenlog_init(log);
    for (int user = 0; user < 2; user++) {
        int64_t t = 10 * MS + user * MS;
        while (t < 1000 * MS) {
            ev(log, t, user, user, TOKENLOG_BG);
            bool stall = stalls && (llabs(t - 300 * MS) < 6 * MS || llabs(t - 700 * MS) < 6 * MS);
            t += stall ? 150 * MS : 10 * MS;
        }
    }
}

static analysis_injection tiny_injections[3] = {
    {.t_send_s = 0.2, .ttft_ms = 20, .prompt_tokens = 100},
    {.t_send_s = 0.3, .ttft_ms = 150, .prompt_tokens = 8000},
    {.t_send_s = 0.7, .ttft_ms = 150, .prompt_tokens = 8000},
};

static analysis_summary tiny_summary(const char *label, int n_injections)
{
    analysis_summary s;
    memset(&s, 0, sizeof s);
    snprintf(s.label, sizeof s.label, "%s", label);
    s.duration_s = 1;
    s.users = 2;
    s.itl_ms = (analysis_dist){.count = 190, .mean = 11, .p50 = 10, .p90 = 10, .p99 = 150,
                               .p999 = 150, .max = 150};
    s.stalls.threshold_ms = 50;
    s.injections = tiny_injections;
    s.n_injections = n_injections;
    return s;
}

static void test_gaps_over_time(void **state)
{
    (void)state;
    tokenlog log;
    tokenlog_init(&log);
    /* Out of order on purpose; the inject event makes no gap. */
    ev(&log, 40 * MS, 0, 0, TOKENLOG_BG);
    ev(&log, 15 * MS, 1, 1, TOKENLOG_BG);
    ev(&log, 10 * MS, 0, 0, TOKENLOG_BG);
    ev(&log, 30 * MS, -1, 9, TOKENLOG_INJECT);
    ev(&log, 20 * MS, 0, 0, TOKENLOG_BG);
    ev(&log, 35 * MS, -1, 9, TOKENLOG_INJECT);
    ev(&log, 25 * MS, 1, 1, TOKENLOG_BG);
    double *t = NULL, *g = NULL;
    int64_t n = 0;
    char err[ERR_LEN];
    assert_int_equal(plot_gaps_over_time(&log, &t, &g, &n, err), 0);
    assert_int_equal(n, 3);
    /* Each gap sits where its wait began. Request 0: 10 ms from 10 ms, 20 ms from 20 ms;
     * request 1: 10 ms from 15 ms. */
    assert_float_equal(t[0], 0.010, 1e-12);
    assert_float_equal(g[0], 10.0, 1e-12);
    assert_float_equal(t[1], 0.020, 1e-12);
    assert_float_equal(g[1], 20.0, 1e-12);
    assert_float_equal(t[2], 0.015, 1e-12);
    assert_float_equal(g[2], 10.0, 1e-12);
    free(t);
    free(g);
    tokenlog_free(&log);
}

static void test_timeline_markers_in_svg(void **state)
{
    (void)state;
    tokenlog base_log, x_log;
    tiny_log(&base_log, false);
    tiny_log(&x_log, true);
    analysis_summary b = tiny_summary("baseline", 0), x = tiny_summary("interference", 3);
    plot_run runs[] = {{"baseline", PLOT_COLOR_BASELINE, &base_log, &b},
                       {"interference", PLOT_COLOR_INTERFERENCE, &x_log, &x}};
    plot_chart c;
    char err[ERR_LEN];
    assert_int_equal(plot_timeline(&c, runs, 2, "tiny", err), 0);
    assert_int_equal(c.n_panels, 2);
    char *svg = NULL;
    size_t len = 0;
    assert_int_equal(plot_render_svg(&c, &svg, &len, err), 0);
    assert_int_equal(strlen(svg), len);
    /* One marker per injection, each its own vertical stroke, in time order and to scale. */
    assert_int_equal(count(svg, MARKER_STROKE), 3);
    double xs[3];
    for (int i = 0; i < 3; i++) {
        char *d = nth_path_d(svg, MARKER_STROKE, i);
        assert_non_null(d);
        double x0, y0, x1, y1;
        assert_int_equal(sscanf(d, "M %lf %lf L %lf %lf", &x0, &y0, &x1, &y1), 4);
        assert_float_equal(x0, x1, 1e-6);
        assert_true(y1 > y0 + 50);
        xs[i] = x0;
        free(d);
    }
    assert_true(xs[0] < xs[1] && xs[1] < xs[2]);
    /* 0.2 -> 0.3 -> 0.7 s: the second interval is four times the first. */
    assert_float_equal((xs[2] - xs[1]) / (xs[1] - xs[0]), 4.0, 0.02);
    /* Both runs' dots are there, as one path each. */
    assert_non_null(strstr(svg, "fill:rgb(85%,33%,10%)"));
    assert_non_null(strstr(svg, "fill:rgb(20%,40%,70%)"));
    /* The text is drawn (glyphs), and the document is one SVG with its own size. */
    assert_true(count(svg, "<symbol") > 10);
    assert_int_equal(count(svg, "<svg"), 1);
    assert_non_null(strstr(svg, "viewBox=\"0 0 960 570\""));
    free(svg);
    plot_chart_free(&c);
    tokenlog_free(&base_log);
    tokenlog_free(&x_log);
    plot_release_caches();
}

/* server_metrics.csv under the timeline: one panel per kind of column the server gave, the
 * timeline's x range, the injections marked on each, generation as a rate per interval. */
static void test_server_metrics_chart(void **state)
{
    (void)state;
    scrape_row rows[4];
    memset(rows, 0, sizeof rows);
    for (int i = 0; i < 4; i++) {
        rows[i].t_ns = (int64_t)(i + 1) * 250 * MS;
        rows[i].t_sent_ns = rows[i].t_ns - MS;
        rows[i].has[SCRAPE_RUNNING] = rows[i].has[SCRAPE_WAITING] = true;
        rows[i].value[SCRAPE_RUNNING] = 6 + (i == 2);
        rows[i].has[SCRAPE_GENERATION_TOKENS] = true;
        rows[i].value[SCRAPE_GENERATION_TOKENS] = i == 2 ? 50 : 100;
    }
    rows[2].has[SCRAPE_PROMPT_TOKENS] = true;
    rows[2].value[SCRAPE_PROMPT_TOKENS] = 8000;
    rows[3].t_ns = 1000 * MS - 50 * MS; /* a scrape that came 50 ms early: 200 ms interval */
    scrape_series m = {.rows = rows, .n = 4, .cap = 4};
    m.has[SCRAPE_RUNNING] = m.has[SCRAPE_WAITING] = m.has[SCRAPE_PROMPT_TOKENS] = true;
    m.has[SCRAPE_GENERATION_TOKENS] = true;
    analysis_summary x = tiny_summary("interference", 3);
    plot_run run = {"interference", PLOT_COLOR_INTERFERENCE, NULL, &x};
    plot_chart c;
    char err[ERR_LEN];
    assert_int_equal(plot_server_metrics(&c, &run, &m, "tiny", err), 0);
    assert_int_equal(c.n_panels, 3);
    for (int k = 0; k < 3; k++) {
        assert_true(c.panels[k].x.fixed && c.panels[k].x.min == 0 && c.panels[k].x.max == 1);
        assert_int_equal(c.panels[k].n_vmarks, 3);
    }
    assert_int_equal(c.panels[0].n_series, 2); /* running, waiting */
    assert_true(c.panels[0].y.max > 7);        /* the line is not on the frame */
    assert_int_equal(c.panels[1].series[0].n, 1);
    assert_float_equal(c.panels[1].series[0].x[0], 0.625, 1e-9); /* the interval's middle */
    assert_float_equal(c.panels[1].series[0].y[0], 8000, 1e-9);
    /* Rates from the second row on: 100 / 0.25 s, 50 / 0.25 s, 100 / 0.2 s. */
    const plot_series *g = &c.panels[2].series[0];
    assert_int_equal(g->n, 3);
    assert_float_equal(g->y[0], 400, 1e-6);
    assert_float_equal(g->y[1], 200, 1e-6);
    assert_float_equal(g->y[2], 500, 1e-6);
    char *svg = NULL;
    size_t len = 0;
    assert_int_equal(plot_render_svg(&c, &svg, &len, err), 0);
    assert_int_equal(count(svg, MARKER_STROKE), 9);
    free(svg);
    /* Lined up with a chart whose y tick labels are wider: the same room for both puts the
     * markers at the same pixels. */
    plot_chart wide;
    plot_chart_init(&wide, "wide labels", 960, 400);
    plot_panel *wp = plot_chart_add_panel(&wide, "");
    assert_non_null(wp);
    plot_series *ws = plot_panel_add_series(wp, "", PLOT_LINE, PLOT_COLOR_BASELINE);
    assert_non_null(ws);
    assert_int_equal(plot_series_push(ws, 0, 123456789), 0);
    assert_int_equal(plot_series_push(ws, 1, 0), 0);
    assert_int_equal(plot_panel_add_vmark(wp, 0.2), 0);
    wp->x.fixed = true, wp->x.min = 0, wp->x.max = 1;
    double w_wide = plot_y_label_width(&wide), w_metrics = plot_y_label_width(&c);
    assert_true(w_wide > w_metrics);
    double x_before[2], x_after[2];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            wide.y_label_w = c.y_label_w = fmax(w_wide, w_metrics) + 2;
        const plot_chart *charts[2] = {&wide, &c};
        for (int k = 0; k < 2; k++) {
            assert_int_equal(plot_render_svg(charts[k], &svg, &len, err), 0);
            char *d = nth_path_d(svg, MARKER_STROKE, 0);
            assert_non_null(d);
            double *x_out = pass == 0 ? x_before : x_after;
            assert_int_equal(sscanf(d, "M %lf", &x_out[k]), 1);
            free(d);
            free(svg);
        }
    }
    assert_true(fabs(x_before[0] - x_before[1]) > 1); /* off by the labels' widths */
    assert_float_equal(x_after[0], x_after[1], 1e-6);
    plot_chart_free(&wide);
    plot_chart_free(&c);

    /* Only the queue: one panel. Nothing drawable: an error that says so. */
    m.has[SCRAPE_PROMPT_TOKENS] = m.has[SCRAPE_GENERATION_TOKENS] = false;
    assert_int_equal(plot_server_metrics(&c, &run, &m, "tiny", err), 0);
    assert_int_equal(c.n_panels, 1);
    plot_chart_free(&c);
    m.has[SCRAPE_RUNNING] = m.has[SCRAPE_WAITING] = false;
    assert_int_equal(plot_server_metrics(&c, &run, &m, "tiny", err), -1);
    assert_non_null(strstr(err, "no column to draw"));
    plot_chart_free(&c);
    plot_release_caches();
}

/* A fixed tiny chart: the SVG holds exactly the strokes the description asks for. */
static void test_svg_structure(void **state)
{
    (void)state;
    plot_chart c;
    plot_chart_init(&c, "tiny", 400, 300);
    plot_panel *p = plot_chart_add_panel(&c, "");
    assert_non_null(p);
    snprintf(p->x.label, sizeof p->x.label, "x (s)");
    snprintf(p->y.label, sizeof p->y.label, "y (ms)");
    plot_series *s = plot_panel_add_series(p, "line", PLOT_LINE, (plot_color){0, 0.5, 0, 1});
    assert_non_null(s);
    assert_int_equal(plot_series_push(s, 1, 1), 0);
    assert_int_equal(plot_series_push(s, 2, 4), 0);
    assert_int_equal(plot_series_push(s, 3, 2), 0);
    assert_int_equal(plot_panel_add_vmark(p, 2.5), 0);
    snprintf(p->vmark_name, sizeof p->vmark_name, "marker");
    plot_panel_add_hline(p, 3, "limit", (plot_color){0.5, 0.5, 0.5, 1});
    char *svg = NULL;
    char err[ERR_LEN];
    assert_int_equal(plot_render_svg(&c, &svg, NULL, err), 0);
    assert_non_null(strstr(svg, "width=\"400px\""));
    assert_non_null(strstr(svg, "height=\"300px\""));
    assert_non_null(strstr(svg, "viewBox=\"0 0 400 300\""));
    /* One marker (the legend's swatch and the markers' heads are fills: the swatch's line
     * and head, the heads one fill). */
    assert_int_equal(count(svg, MARKER_STROKE), 1);
    assert_int_equal(count(svg, "fill:rgb(60%,0%,60%)"), 3);
    /* The data line (three points) and its legend swatch (two). */
    const char *green = "stroke:rgb(0%,50%,0%)";
    assert_int_equal(count(svg, green), 2);
    int three = 0, two = 0;
    for (int i = 0; i < 2; i++) {
        char *d = nth_path_d(svg, green, i);
        assert_non_null(d);
        int l = count(d, "L ");
        three += l == 2;
        two += l == 1;
        free(d);
    }
    assert_int_equal(three, 1);
    assert_int_equal(two, 1);
    /* The data line rises then falls: y (px) goes up the page, then down. */
    for (int i = 0; i < 2; i++) {
        char *d = nth_path_d(svg, green, i);
        double x[3], y[3];
        if (sscanf(d, "M %lf %lf L %lf %lf L %lf %lf", &x[0], &y[0], &x[1], &y[1], &x[2], &y[2]) ==
            6) {
            assert_true(x[0] < x[1] && x[1] < x[2]);
            assert_true(y[1] < y[0] && y[2] > y[1]);
        }
        free(d);
    }
    /* The reference line: dashed, its legend swatch dashed too. */
    assert_int_equal(count(svg, "stroke:rgb(50%,50%,50%)"), 2);
    free(svg);
    plot_chart_free(&c);
    plot_release_caches();
}

/* Hollow marks (a ring around another series' marks): their outlines stroked, nothing of
 * their colour filled; filled marks the other way round. */
static void test_hollow_marks(void **state)
{
    (void)state;
    plot_chart c;
    plot_chart_init(&c, "rings", 400, 300);
    plot_panel *p = plot_chart_add_panel(&c, "");
    assert_non_null(p);
    plot_series *dots = plot_panel_add_series(p, "dots", PLOT_POINTS, (plot_color){0, 0, 1, 1});
    plot_series *rings = plot_panel_add_series(p, "rings", PLOT_POINTS, (plot_color){1, 0, 0, 1});
    assert_non_null(dots);
    assert_non_null(rings);
    rings->hollow = true;
    rings->size = 16;
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(plot_series_push(dots, i, i), 0);
        assert_int_equal(plot_series_push(rings, i, i), 0);
    }
    char *svg = NULL;
    char err[ERR_LEN];
    assert_int_equal(plot_render_svg(&c, &svg, NULL, err), 0);
    /* The three rings in one stroke, and the legend's swatch. */
    assert_int_equal(count(svg, "stroke:rgb(100%,0%,0%)"), 2);
    assert_int_equal(count(svg, "fill:rgb(100%,0%,0%)"), 0);
    assert_int_equal(count(svg, "fill:rgb(0%,0%,100%)"), 2);
    assert_int_equal(count(svg, "stroke:rgb(0%,0%,100%)"), 0);
    free(svg);
    plot_chart_free(&c);
    plot_release_caches();
}

static int pixels_near(cairo_surface_t *img, int r, int g, int b, int y_from)
{
    int w = cairo_image_surface_get_width(img), h = cairo_image_surface_get_height(img);
    int stride = cairo_image_surface_get_stride(img);
    const unsigned char *data = cairo_image_surface_get_data(img);
    int n = 0;
    for (int y = y_from; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint32_t px;
            memcpy(&px, data + (size_t)y * stride + (size_t)x * 4, 4);
            int pr = (px >> 16) & 0xff, pg = (px >> 8) & 0xff, pb = px & 0xff;
            n += abs(pr - r) <= 3 && abs(pg - g) <= 3 && abs(pb - b) <= 3;
        }
    return n;
}

static void test_png_size_and_data(void **state)
{
    (void)state;
    tokenlog x_log;
    tiny_log(&x_log, true);
    analysis_summary x = tiny_summary("interference", 3);
    plot_run run = {"interference", PLOT_COLOR_INTERFERENCE, &x_log, &x};
    plot_chart c;
    char err[ERR_LEN];
    assert_int_equal(plot_timeline(&c, &run, 1, "tiny", err), 0);
    char dir[] = "/tmp/test_plot_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *svg = NULL;
    assert_int_equal(plot_render_both(&c, dir, "timeline", &svg, err), 0);
    assert_non_null(svg);
    char path[128];
    snprintf(path, sizeof path, "%s/timeline.png", dir);
    cairo_surface_t *img = cairo_image_surface_create_from_png(path);
    assert_int_equal(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
    assert_int_equal(cairo_image_surface_get_width(img), c.width);
    assert_int_equal(cairo_image_surface_get_height(img), c.height);
    /* The corner is the white background; below the legend there are data dots and
     * markers. */
    const unsigned char *data = cairo_image_surface_get_data(img);
    assert_int_equal(data[0], 255);
    assert_int_equal(data[1], 255);
    assert_int_equal(data[2], 255);
    assert_true(pixels_near(img, 217, 84, 26, 90) > 50); /* interference dots */
    /* three markers: faint lines (35 % purple on white) under solid heads */
    assert_true(pixels_near(img, 219, 166, 219, 90) > 100);
    assert_true(pixels_near(img, 153, 0, 153, 90) > 30);
    cairo_surface_destroy(img);
    /* The SVG file is the buffer handed back. */
    snprintf(path, sizeof path, "%s/timeline.svg", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    assert_int_equal((size_t)ftell(f), strlen(svg));
    fclose(f);
    unlink(path);
    snprintf(path, sizeof path, "%s/timeline.png", dir);
    unlink(path);
    rmdir(dir);
    free(svg);
    plot_chart_free(&c);
    tokenlog_free(&x_log);
    plot_release_caches();
}

/* Issue 28, point 13: an injection marker must not hide the spike it marks (a full-strength
 * dashed purple line did, on the timeline and the steps). The marker lies beneath the data
 * (its stroke first in the SVG), faint (a 1 px line at 35 %), and only its head at the top is
 * solid: across the middle of the plot no pixel is strongly purple, neither beside the spike
 * nor where a marker stands over nothing, and the spike's own colour stands there. */
static void test_marker_lets_spike_show(void **state)
{
    (void)state;
    plot_chart c;
    plot_chart_init(&c, "spike on a marker", 400, 300);
    plot_panel *p = plot_chart_add_panel(&c, "");
    assert_non_null(p);
    plot_series *s = plot_panel_add_series(p, "step", PLOT_SPIKES, PLOT_COLOR_INTERFERENCE);
    assert_non_null(s);
    for (int i = 1; i <= 9; i++)
        assert_int_equal(plot_series_push(s, i, i == 5 ? 100 : 5), 0);
    assert_int_equal(plot_panel_add_vmark(p, 5), 0);   /* under the spike */
    assert_int_equal(plot_panel_add_vmark(p, 7.5), 0); /* over nothing: the line alone */
    snprintf(p->vmark_name, sizeof p->vmark_name, "injection");
    char *svg = NULL;
    char err[ERR_LEN];
    assert_int_equal(plot_render_svg(&c, &svg, NULL, err), 0);
    const char *marker = strstr(svg, MARKER_STROKE), *spike = strstr(svg, "stroke:rgb(85%,33%,10%)");
    assert_non_null(marker);
    assert_non_null(spike);
    assert_true(marker < spike); /* beneath */
    char *style_end = strchr(marker, '"');
    assert_non_null(style_end);
    char style[256];
    snprintf(style, sizeof style, "%.*s", (int)(style_end - marker), marker);
    assert_non_null(strstr(style, "stroke-opacity:0.35"));
    free(svg);

    char dir[] = "/tmp/test_plot_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/m.png", dir);
    assert_int_equal(plot_render_file(&c, PLOT_PNG, path, err), 0);
    cairo_surface_t *img = cairo_image_surface_create_from_png(path);
    assert_int_equal(cairo_surface_status(img), CAIRO_STATUS_SUCCESS);
    const int w = cairo_image_surface_get_width(img), h = cairo_image_surface_get_height(img);
    const int stride = cairo_image_surface_get_stride(img);
    const unsigned char *data = cairo_image_surface_get_data(img);
    int strong_purple = 0, spike_px = 0;
    for (int y = h / 2 - 40; y < h / 2 + 40; y++)
        for (int x = 0; x < w; x++) {
            uint32_t px;
            memcpy(&px, data + (size_t)y * stride + (size_t)x * 4, 4);
            const int r = (px >> 16) & 0xff, g = (px >> 8) & 0xff, b = px & 0xff;
            strong_purple += g < 120 && r > g + 60 && b > g + 60;
            spike_px += abs(r - 217) <= 3 && abs(g - 84) <= 3 && abs(b - 26) <= 3;
        }
    assert_int_equal(strong_purple, 0);
    assert_true(spike_px >= 40); /* the spike's column, whole, across the band */
    cairo_surface_destroy(img);
    unlink(path);
    rmdir(dir);
    plot_chart_free(&c);
    plot_release_caches();
}

/* The stalls against their culprits' prompt lengths: a chart only when there are two
 * lengths or more (issue 28, point 13: with one it was a column of dots in an empty frame). */
static void test_stall_prompt_lengths(void **state)
{
    (void)state;
    analysis_stall st[4];
    memset(st, 0, sizeof st);
    for (int i = 0; i < 4; i++) {
        st[i].cause = ANALYSIS_CAUSE_PREFILL;
        st[i].n_culprits = 1;
        st[i].culprit_prompt[0] = 8000;
        st[i].gap_ns = 130 * MS;
    }
    st[3].cause = ANALYSIS_CAUSE_CLIENT; /* not a prefill: its culprit does not count */
    st[3].culprit_prompt[0] = 2000;
    analysis_summary s;
    memset(&s, 0, sizeof s);
    s.stall_list = st;
    int32_t one = -1;
    assert_int_equal(plot_stall_prompt_lengths(&s, &one), 0);
    assert_int_equal(one, 0);
    s.n_stall_list = 4;
    assert_int_equal(plot_stall_prompt_lengths(&s, &one), 1);
    assert_int_equal(one, 8000);
    st[1].culprit_prompt[0] = 16000;
    assert_int_equal(plot_stall_prompt_lengths(&s, &one), 2);
    plot_chart c;
    char err[ERR_LEN];
    assert_int_equal(plot_stalls_vs_prompt(&c, &s, "tiny", err), 0);
    assert_int_equal(c.panels[0].series[0].n, 3);
    plot_chart_free(&c);
}

/* 100,000 gaps on one spot and one outlier: two marks in the SVG, the outlier kept. */
static void test_dots_one_mark_per_cell(void **state)
{
    (void)state;
    plot_chart c;
    plot_chart_init(&c, "dots", 400, 300);
    plot_panel *p = plot_chart_add_panel(&c, "");
    plot_series *s = plot_panel_add_series(p, "", PLOT_DOTS, (plot_color){0, 0, 1, 1});
    for (int i = 0; i < 100000; i++)
        assert_int_equal(plot_series_push(s, 5.0, 5.0), 0);
    assert_int_equal(plot_series_push(s, 9.0, 90.0), 0);
    p->y.log = true;
    char *svg = NULL;
    char err[ERR_LEN];
    assert_int_equal(plot_render_svg(&c, &svg, NULL, err), 0);
    char *d = nth_path_d(svg, "fill:rgb(0%,0%,100%)", 0);
    assert_non_null(d);
    assert_int_equal(count(d, "Z"), 2);
    free(d);
    free(svg);
    plot_chart_free(&c);
    plot_release_caches();
}

static void test_spike_chart(void **state)
{
    (void)state;
    plot_sweep_point pts[] = {
        {.group = "", .prompt_tokens = 16000, .spike_ms = 327.2, .max_gap_ms = 328},
        {.group = "", .prompt_tokens = 4000, .spike_ms = 69.5, .max_gap_ms = 70},
        {.group = "", .prompt_tokens = 8000, .spike_ms = 146.9, .max_gap_ms = 148},
    };
    double mx[] = {3000, 20000}, my[] = {50, 400};
    plot_chart c;
    char err[ERR_LEN];
    assert_int_equal(plot_spike_vs_prompt(&c, pts, 3, mx, my, 2, "model", "", err), 0);
    plot_panel *p = &c.panels[0];
    assert_true(p->x.log && p->y.log);
    assert_int_equal(p->n_series, 2);
    assert_true(p->series[0].dashed);
    plot_series *m = &p->series[1];
    /* In prompt order, each labelled with the step from the previous length. */
    assert_int_equal(m->n, 3);
    assert_float_equal(m->x[0], 4000, 0);
    assert_float_equal(m->x[2], 16000, 0);
    assert_string_equal(m->labels[0], "69.5 ms");
    assert_string_equal(m->labels[1], "147 ms (\xc3\x97" "2.11)");
    assert_string_equal(m->labels[2], "327 ms (\xc3\x97" "2.23)");
    assert_int_equal(p->x.n_ticks, 3);
    assert_float_equal(p->x.ticks[1], 8000, 0);
    char *svg = NULL;
    assert_int_equal(plot_render_svg(&c, &svg, NULL, err), 0);
    free(svg);
    plot_chart_free(&c);
    plot_release_caches();
}

static void test_tradeoff_chart(void **state)
{
    (void)state;
    plot_sweep_point pts[] = {
        {.group = "", .budget = 16384, .ttft_ms = 134, .max_gap_ms = 130, .p999_gap_ms = 5.4},
        {.group = "", .budget = 512, .ttft_ms = 141, .max_gap_ms = 9.2, .p999_gap_ms = 8.9},
        {.group = "", .budget = 2048, .ttft_ms = 133, .max_gap_ms = 35, .p999_gap_ms = 34},
        {.group = "", .budget = 1024, .ttft_ms = -1, .max_gap_ms = 18, .p999_gap_ms = 17},
    };
    plot_chart c;
    char err[ERR_LEN];
    assert_int_equal(plot_tradeoff(&c, pts, 4, "", err), 0);
    plot_panel *p = &c.panels[0];
    assert_int_equal(p->n_series, 2);
    plot_series *mx = &p->series[0], *p999 = &p->series[1];
    assert_string_equal(mx->name, "max gap");
    assert_string_equal(p999->name, "p99.9 gap");
    /* By budget, the point without a TTFT left out; the budget labels the max points. */
    assert_int_equal(mx->n, 3);
    assert_string_equal(mx->labels[0], "B=512");
    assert_string_equal(mx->labels[1], "B=2048");
    assert_string_equal(mx->labels[2], "B=16384");
    assert_float_equal(mx->y[2], 130, 0);
    assert_float_equal(p999->y[0], 8.9, 0);
    assert_true(p999->dashed);
    plot_chart_free(&c);
}

static void test_render_error(void **state)
{
    (void)state;
    plot_chart c;
    plot_chart_init(&c, "x", 400, 300);
    char err[ERR_LEN] = "";
    assert_int_equal(plot_render_file(&c, PLOT_PNG, "/nonexistent/dir/x.png", err), -1);
    assert_non_null(strstr(err, "/nonexistent/dir/x.png"));
    assert_int_equal(plot_render_file(&c, PLOT_SVG, "/nonexistent/dir/x.svg", err), -1);
    assert_non_null(strstr(err, "/nonexistent/dir/x.svg"));
    plot_chart_init(&c, "too small", 10, 10);
    assert_int_equal(plot_render_file(&c, PLOT_SVG, "/tmp/never.svg", err), -1);
    plot_chart_free(&c);
    plot_release_caches();
}

/* Issue 28, point 13: tune's front once labelled its y axis at its ends and quarters
 * ("2888", "3751"). Every automatic tick is a round number: a multiple of 1, 2 or 5 x 10^k,
 * never an end of the range where that is not round. */
static void test_round_ticks(void **state)
{
    (void)state;
    static const struct {
        double lo, hi;
        bool log;
    } data[] = {{3234.56, 3349.1, false}, {2580, 3350, false}, {3000, 3100, false},
                {3000, 3100, true},        {3234.56, 3349.1, true}, {5.39, 61.2, true},
                {3126, 6103, false},       {0.37, 0.52, false}};
    for (size_t i = 0; i < sizeof data / sizeof data[0]; i++) {
        plot_axis a;
        memset(&a, 0, sizeof a);
        a.log = data[i].log;
        plot_axis_state st = {.a = &a};
        plot_axis_range(&a, data[i].lo, data[i].hi, false, &st.lo, &st.hi);
        plot_axis_ticks(&st);
        assert_true(st.n_ticks >= 2);
        /* Evenly spaced by a 1-2-5 step, each a multiple of it; or (a wide log axis) each
         * 1, 2 or 5 x 10^k. */
        const double step = st.ticks[1] - st.ticks[0];
        bool even = st.n_ticks >= 2;
        for (int k = 1; k < st.n_ticks && even; k++)
            even = fabs(st.ticks[k] - st.ticks[k - 1] - step) < step * 1e-6;
        for (int k = 0; k < st.n_ticks; k++) {
            const double t = st.ticks[k];
            const double m = t / pow(10, floor(log10(t) + 1e-9));
            const bool round_tick = even ? fabs(plot_nice(step, true) - step) < step * 1e-9 &&
                                               fabs(t / step - round(t / step)) < 1e-6
                                         : fabs(m - 1) < 1e-9 || fabs(m - 2) < 1e-9 ||
                                               fabs(m - 5) < 1e-9;
            if (!round_tick)
                fail_msg("data %g..%g (%s): tick %g is not round", data[i].lo, data[i].hi,
                         data[i].log ? "log" : "linear", t);
        }
    }
}

static void test_nice(void **state)
{
    (void)state;
    assert_float_equal(plot_nice(130, true), 200, 1e-9);
    assert_float_equal(plot_nice(130, false), 100, 1e-9);
    assert_float_equal(plot_nice(4.2, false), 2, 1e-9);
    assert_float_equal(plot_nice(0.03, true), 0.05, 1e-12);
    assert_float_equal(plot_nice(500, true), 500, 1e-9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gaps_over_time),
        cmocka_unit_test(test_timeline_markers_in_svg),
        cmocka_unit_test(test_server_metrics_chart),
        cmocka_unit_test(test_svg_structure),
        cmocka_unit_test(test_hollow_marks),
        cmocka_unit_test(test_png_size_and_data),
        cmocka_unit_test(test_dots_one_mark_per_cell),
        cmocka_unit_test(test_marker_lets_spike_show),
        cmocka_unit_test(test_stall_prompt_lengths),
        cmocka_unit_test(test_spike_chart),
        cmocka_unit_test(test_tradeoff_chart),
        cmocka_unit_test(test_render_error),
        cmocka_unit_test(test_nice),
        cmocka_unit_test(test_round_ticks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
