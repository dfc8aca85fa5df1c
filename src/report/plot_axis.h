/* plot_axis — inside plot: what the drawing (plot_draw.c) asks of an axis before it draws
 * one: its range from the data, its ticks and their labels, and the numbers on bars. No
 * cairo here: nothing is measured or drawn. Not part of the module's interface (plot.h). */
#ifndef STALLSCOPE_PLOT_AXIS_H
#define STALLSCOPE_PLOT_AXIS_H
#include <stdbool.h>
#include <stddef.h>

#include "report/plot.h"

/* An axis as drawn: its description, the range in data units and the ticks in it. */
typedef struct plot_axis_state {
    const plot_axis *a;
    double lo, hi;          /* range in data units */
    double ticks[64];
    int n_ticks;
} plot_axis_state;

/* Position in [0, 1] along the axis; NAN when it cannot be placed (log of v <= 0). */
double plot_axis_frac(const plot_axis_state *s, double v);
/* The data's extent along x (is_x) or y in panel p, markers and reference lines included;
 * lo > hi when there is none. Values a log axis cannot show are skipped. */
void plot_data_extent(const plot_panel *p, bool is_x, bool log, double *lo, double *hi);
/* Whether p holds bars or spikes (they stand on the axis: its range reaches down to them). */
bool plot_has_bars(const plot_panel *p);
/* The range an axis shows for data in [lo, hi]: categories, fixed, or rounded out. */
void plot_axis_range(const plot_axis *a, double lo, double hi, bool bars_from_axis,
                     double *out_lo, double *out_hi);
/* s->ticks from s->a and s->lo .. s->hi. */
void plot_axis_ticks(plot_axis_state *s);
/* The label of tick i. */
void plot_tick_label(const plot_axis_state *s, int i, char *buf, size_t size);
/* A measured value on a bar, at the precision the terminal table uses (4.78, 14.6, 152). */
void plot_format_value(char *buf, size_t size, double v, plot_tick_format f);

#endif
