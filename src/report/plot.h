/* plot — the report's charts, drawn with cairo.
 *
 * A chart is a plain description (panels stacked top to bottom, each with axes, series,
 * vertical markers and reference lines) and ONE drawing function renders it onto any cairo
 * surface: plot_render_file() picks an image surface (PNG) or an SVG surface, so the PNG
 * and the SVG of a chart are the same picture by construction.
 *
 * Layout rules the drawing keeps: the title, a note line and the legend sit above the
 * panels (never over data); tick labels are thinned until no two overlap; point labels are
 * placed at the first of several offsets that collides with no label already placed, and
 * dropped when none fits; dense scatter series are reduced to one mark per device-pixel
 * cell so a 250,000-gap run stays a few thousand marks in the SVG with every outlier kept.
 *
 * Each injection marker is its own stroke in PLOT_COLOR_INJECTION (the legend swatch is a
 * fill), so a test can count a chart's injection markers in its SVG.
 *
 * The second half builds the report's charts from run data (plot_charts.c):
 * (a) timeline of background gaps, (b) percentile bars, (c) CCDF of gaps, (d) spike vs
 * prompt length with the cost model's line, (e) the step timeline, and the Sarathi-Serve
 * trade-off (max and p99.9 gap against the injections' TTFT per token budget). */
#ifndef STALLSCOPE_PLOT_H
#define STALLSCOPE_PLOT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "analysis/analysis.h"
#include "client/scrape.h"
#include "common/tokenlog.h"

typedef struct plot_color {
    double r, g, b, a;
} plot_color;

/* The report's palette: one meaning per color across every chart. */
#define PLOT_COLOR_BASELINE ((plot_color){0.20, 0.40, 0.70, 1.0})     /* blue */
#define PLOT_COLOR_INTERFERENCE ((plot_color){0.85, 0.33, 0.10, 1.0}) /* orange */
#define PLOT_COLOR_INJECTION ((plot_color){0.60, 0.00, 0.60, 1.0})    /* purple, markers only */
#define PLOT_COLOR_MODEL ((plot_color){0.25, 0.25, 0.25, 1.0})        /* the cost model's line */
#define PLOT_COLOR_THRESHOLD ((plot_color){0.50, 0.50, 0.50, 1.0})    /* reference lines */
/* The k-th color of a categorical palette (sweep points, budgets). */
plot_color plot_palette(int k);
/* 1, 2 or 5 x 10^k: the largest <= v (up false) or the smallest >= v (up true). */
double plot_nice(double v, bool up);

typedef enum {
    PLOT_DOTS,   /* small squares, one per occupied device-pixel cell (dense scatter) */
    PLOT_LINE,   /* polyline in data order */
    PLOT_POINTS, /* marker per point, optionally joined, optionally labelled */
    PLOT_BARS,   /* grouped bars over the x axis' categories: x[i] is the category index */
    PLOT_SPIKES, /* vertical lines from the axis' bottom to y (tallest kept per pixel column) */
} plot_series_kind;

typedef enum { PLOT_MARK_CIRCLE, PLOT_MARK_SQUARE, PLOT_MARK_DIAMOND, PLOT_MARK_TRIANGLE } plot_mark;

typedef enum {
    PLOT_TICKS_NUMBER,  /* 0.5, 5, 130, 2000 */
    PLOT_TICKS_TOKENS,  /* 512, 4k, 16k */
    PLOT_TICKS_PERCENT, /* a fraction shown as 10 %, 0.1 % */
} plot_tick_format;

typedef struct plot_series {
    char name[160]; /* legend entry; "" for none */
    plot_series_kind kind;
    plot_color color;
    double size;   /* line width, or marker / dot size in px */
    plot_mark mark;
    bool join;     /* PLOT_POINTS: draw a line through the points */
    bool dashed;   /* PLOT_LINE / joined points */
    bool value_labels; /* PLOT_BARS: the value above each bar when it fits */
    bool hollow;   /* PLOT_POINTS: each mark's outline (1.5 px), not filled: a ring around
                    * another series' marks */
    double *x, *y;  /* (n) owned */
    char **labels;  /* (n) owned, optional: PLOT_POINTS annotations */
    int64_t n, cap;
} plot_series;

typedef struct plot_axis {
    char label[128]; /* with the unit: "gap between tokens (ms, log scale)" */
    bool log;
    bool fixed;      /* use min/max as given; otherwise from the data */
    double min, max;
    bool from_zero;  /* linear auto range starts at 0 */
    plot_tick_format format;
    double ticks[32]; /* explicit ticks (e.g. the prompt lengths of a sweep); 0: automatic */
    int n_ticks;
    const char *categories[32]; /* categorical x axis (bars); borrowed */
    int n_categories;
} plot_axis;

typedef struct plot_hline {
    double y;
    char label[64];
    plot_color color;
} plot_hline;

typedef struct plot_panel {
    char title[160];
    plot_axis x, y;
    plot_series *series;
    int n_series, cap_series;
    double *vmarks; /* x of each injection marker */
    int n_vmarks, cap_vmarks;
    char vmark_name[64]; /* legend entry of the markers */
    plot_hline hlines[4];
    int n_hlines;
    double weight; /* share of the height (default 1) */
} plot_panel;

typedef struct plot_chart {
    char title[160];
    char note[256]; /* one small line under the title: the workload, the engine */
    int width, height; /* px (SVG user units) */
    bool share_x;      /* stacked panels share one x range and one x label at the bottom */
    plot_panel *panels;
    int n_panels, cap_panels;
    /* px kept for the y tick labels at least (0: the widest label's). Two charts of one
     * width given the same value (plot_y_label_width of each, the larger) have their plot
     * areas, and so their x axes, at the same pixels: the server's metrics under the
     * timeline. */
    double y_label_w;
} plot_chart;

typedef enum { PLOT_PNG, PLOT_SVG } plot_format;

void plot_chart_init(plot_chart *c, const char *title, int width, int height);
void plot_chart_free(plot_chart *c);
/* NULL on out-of-memory. Pointers stay valid until the next add on the same parent. */
plot_panel *plot_chart_add_panel(plot_chart *c, const char *title);
plot_series *plot_panel_add_series(plot_panel *p, const char *name, plot_series_kind kind,
                                   plot_color color);
int plot_series_push(plot_series *s, double x, double y);
int plot_series_push_labelled(plot_series *s, double x, double y, const char *label);
int plot_panel_add_vmark(plot_panel *p, double x);
void plot_panel_add_hline(plot_panel *p, double y, const char *label, plot_color color);

/* Draw the chart into a cairo context already sized width x height (the one drawing path).
 * The context is a void * so this header does not pull in cairo. */
void plot_draw(void *cairo_context, const plot_chart *c);

/* Render to a file (written beside and renamed). 0, or -1 with err. */
int plot_render_file(const plot_chart *c, plot_format format, const char *path, char *err);
/* Render the SVG into a malloc'ed, NUL-terminated buffer. 0, or -1 with err. */
int plot_render_svg(const plot_chart *c, char **out, size_t *len, char *err);
/* Both files: <dir>/<name>.png and <dir>/<name>.svg; also hands back the SVG text when
 * svg_out is not NULL (the HTML report inlines it). */
int plot_render_both(const plot_chart *c, const char *dir, const char *name, char **svg_out,
                     char *err);

/* The width the widest y tick label of c takes as plot_draw lays it out (px). */
double plot_y_label_width(const plot_chart *c);

/* Drop cairo's font caches (fontconfig patterns) once nothing is being drawn: without it
 * leak checkers report them at exit. Not thread-safe against concurrent drawing. */
void plot_release_caches(void);

/* ---- the report's charts (plot_charts.c) ------------------------------------------- */

/* Background gaps over time: for each request and each pair of consecutive token events,
 * the time of the earlier one (s from t = 0: where the wait began) and the gap (ms). Same grouping as analysis (kind bg,
 * one event = one gap however many tokens it carried). Caller frees both arrays. */
int plot_gaps_over_time(const tokenlog *log, double **t_s, double **gap_ms, int64_t *n,
                        char *err);

typedef struct plot_run {
    const char *name;       /* "baseline", "interference", "point-2 (16k)" */
    plot_color color;
    const tokenlog *log;    /* for the timeline, CCDF and steps; may be NULL */
    const analysis_summary *summary; /* for percentiles, markers, threshold */
} plot_run;

/* (a) one panel per run, stacked, shared x (s) and log y (ms); each run's injections as
 * markers; the stall threshold as a reference line. */
int plot_timeline(plot_chart *c, const plot_run *runs, int n_runs, const char *note, char *err);
/* (b) grouped bars p50, p90, p99, p99.9, max per run, log y. */
int plot_percentiles(plot_chart *c, const char *title, const plot_run *runs, int n_runs,
                     const char *note, char *err);
/* (c) fraction of gaps longer than x, log-log, one line per run. */
int plot_ccdf(plot_chart *c, const plot_run *runs, int n_runs, const char *note, char *err);
/* (e) step duration (ms, log) and prefill tokens per step over time, injections marked. */
int plot_steps(plot_chart *c, const plot_run *run, const char *note, char *err);

/* (f) the stalls' lengths: the fraction of stalls at least x long (log-log), one line per
 * cause that has stalls (analysis.h's causes). */
int plot_stall_ccdf(plot_chart *c, const analysis_summary *s, const char *note, char *err);
/* (g) each prefill stall's length (ms, log) against its longest culprit's prompt (tokens,
 * log): who stalled whom, and how the stall grows with the prompt. */
int plot_stalls_vs_prompt(plot_chart *c, const analysis_summary *s, const char *note, char *err);
/* The prompt lengths (g) would spread its stalls over: 0 (no prefill stall with a culprit),
 * 1 (then *one is that length: a column of dots at one x, nothing to read a growth from) or
 * 2 (two or more). */
int plot_stall_prompt_lengths(const analysis_summary *s, int32_t *one);

/* (h) the server's own metrics over the run (server_metrics.csv, plot_metrics.c), on the
 * timeline's time axis: requests running and waiting, prompt tokens per scrape interval
 * (spikes), generation tokens per interval; the injections marked. Panels for columns the
 * server did not give are left out; -1 with err "no column to draw" when none is left. */
int plot_server_metrics(plot_chart *c, const plot_run *run, const scrape_series *m,
                        const char *note, char *err);

typedef struct plot_sweep_point {
    const char *group;  /* series this point belongs to ("" when one series) */
    double prompt_tokens;
    double budget;      /* max_num_batched_tokens */
    double max_gap_ms;
    double spike_ms;    /* longest gap per injection, median over injections; 0 unknown */
    double p999_gap_ms;
    double p50_gap_ms;
    double ttft_ms;     /* the injections' TTFT, p50; < 0 when none */
    double model_ms;    /* the cost model's spike for this point's config; <= 0 unknown */
} plot_sweep_point;

/* (d) the spike (spike_ms, else max_gap_ms) against prompt length (log-log), measured
 * points per group, the cost model's line, and the ratio between consecutive lengths. */
int plot_spike_vs_prompt(plot_chart *c, const plot_sweep_point *pts, int n,
                         const double *model_x, const double *model_ms, int n_model,
                         const char *model_name, const char *note, char *err);
/* Sarathi-Serve's trade-off: max and p99.9 gap (ms, log) against the injections' TTFT
 * (ms, log), one point per token budget, labelled with the budget, per group. */
int plot_tradeoff(plot_chart *c, const plot_sweep_point *pts, int n, const char *note,
                  char *err);

#endif
