/* sweep — the experiment over one or two varied parameters (sweep.c). */
#ifndef STALLSCOPE_EXPERIMENT_SWEEP_H
#define STALLSCOPE_EXPERIMENT_SWEEP_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "experiment/config.h"
#include "experiment/pair.h"
#include "experiment/runner.h"

#define EXPERIMENT_SWEEP_MAX_AXES 2
#define EXPERIMENT_SWEEP_MAX_VALUES 16
#define EXPERIMENT_SWEEP_MAX_POINTS 64

typedef struct experiment_axis {
    char name[48];        /* the option: "prompt-tokens", "policy" ... */
    bool server_side;     /* the server must apply it (a --target needs --server-cmd) */
    char values[EXPERIMENT_SWEEP_MAX_VALUES][64]; /* as typed: "8k", "10s", "chunked" */
    int n_values;
} experiment_axis;

/* The options a sweep may vary. */
bool experiment_axis_known(const char *name, size_t len, bool *server_side);
/* Their names as --help and errors list them: "--prompt-tokens, --inject-every, ...". */
void experiment_axes_names(char *buf, size_t size);
/* Split "--name=A,B,C" (or "--name A,B") lists out of argv: the axes, and argv without them
 * in rest (rest[] holds pointers into argv, n_rest its count; sized argc). A sweepable
 * option with a single value stays in rest. 0, or -1 with err (too many axes, values). */
int experiment_axes_from_argv(int argc, char **argv, experiment_axis *axes, int *n_axes,
                              char **rest, int *n_rest, char *err);

typedef struct experiment_sweep_point {
    char label[32];      /* "point-3": OUT/point-3/ */
    int index[EXPERIMENT_SWEEP_MAX_AXES]; /* value index per axis */
    char status[16];     /* "ok", "refused", "failed" */
    char reason[256];
    char summary[160];   /* one line of figures when ok */
    double request_throughput; /* the background requests completed per second, when ok */
} experiment_sweep_point;

typedef struct experiment_sweep {
    experiment_config base;      /* every point starts from it */
    experiment_axis axes[EXPERIMENT_SWEEP_MAX_AXES];
    int n_axes;
    bool zip;                    /* pairwise instead of every combination */
    /* --rate-search K (guidellm's sweep profile): the first point sends every request at
     * once (--request-rate max), the throughput it reaches sets the K rates that follow,
     * evenly spaced up to it (R/K, 2R/K ... R); 0: off. */
    int rate_search;
    char server_cmd[2048];       /* a --target's server, started per point */
    int64_t server_timeout_ns;
    experiment_sweep_point points[EXPERIMENT_SWEEP_MAX_POINTS];
    int n_points;
} experiment_sweep;

/* Plan the points (every combination, the first axis varying fastest, or pairwise with
 * zip; with rate_search the request-rate axis: max, then K points whose rates the first
 * point's throughput sets), checking every value through its option's parser and every
 * point's configuration.
 * Refused points (a budget under the prompt with one-step prefill, say) are marked, not
 * errors. 0, or -1 with err (bad input). */
int experiment_sweep_plan(experiment_sweep *sw, char *err);
/* A point's configuration: the base with the point's values, resolved. 0, or -1 with err. */
int experiment_sweep_point_config(const experiment_sweep *sw, const experiment_sweep_point *pt,
                                  experiment_config *cfg, char *err);
/* "prompt-tokens=8k policy=chunked" */
void experiment_sweep_point_desc(const experiment_sweep *sw, const experiment_sweep_point *pt,
                                 char *buf, size_t size);
/* Run every planned point as a whole pair in OUT/point-k/ (a point whose run fails is
 * marked and the sweep goes on; a --server-cmd server is started before and stopped after
 * each point), then write OUT/sweep.json (the plan, each point's status and reason).
 * Returns the number of failed points, or -1 with err when the sweep itself failed. */
int experiment_sweep_run(experiment_sweep *sw, const experiment_runner *runner,
                         const experiment_io *io, char *err);
/* Each point's server flags (for a --target without --server-cmd). */
void experiment_sweep_print_flags(FILE *out, const experiment_sweep *sw);

#endif
