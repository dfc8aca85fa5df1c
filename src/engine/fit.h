/* fit — the step model of a hardware profile, fitted by least squares to measured steps.
 *
 * A probe is one step shape and how long it took: a decode step (B sequences, one token
 * each, their contexts summing to C) or a one-shot prefill (a fresh prompt of n tokens). It
 * does not matter where the time came from: the cpu engine's own forward pass
 * (`stallscope calibrate`, cpu_calib.h) or a black-box server's ITL and TTFT (`calibrate
 * --target`): one fit for both, one profile format (profile.h).
 *
 * The model (cost.h, "fitted step model"), in two stages so the seconds of a long prefill do
 * not drown the milliseconds of a decode step:
 *   1. decode probes:  t = step + seq x B + ctx x C                     (step, seq, ctx)
 *   2. prefill probes: t - step - seq x 1 = token x n + pair x n (n + 1) / 2   (token, pair)
 * Each stage minimises the sum of squared *relative* residuals ((fitted - t) / t), so a
 * 2 ms step and a 20 ms step count alike. A term that comes out negative is not physical
 * (a step does not get shorter with more work): it is set to 0 and the others refitted. */
#ifndef STALLSCOPE_FIT_H
#define STALLSCOPE_FIT_H
#include <stdbool.h>

#include "engine/cost.h"

typedef struct fit_probe {
    int batch;          /* decode: sequences in the step; prefill: 1 */
    double context_sum; /* decode: sum of their contexts; prefill: the cells its attention
                           spans before it (a unified cache's occupied cells; 0 fresh) */
    int prompt_tokens;  /* prefill: the prompt's length; decode: 0 */
    double ns;          /* the measured step, > 0 */
} fit_probe;

typedef struct fit_result {
    cost_step_fit fit;     /* the terms (fit.model as given) */
    int n_decode, n_prefill;
    double decode_rms;     /* root mean square relative residual of each stage */
    double prefill_rms;
    double max_abs;        /* largest |relative residual| over all probes */
    bool dropped[5];       /* a term held at 0 (step, seq, ctx, token, pair) */
} fit_result;

/* The fitted model's features of a probe. */
void fit_probe_features(const fit_probe *p, cost_features *out);
/* The fitted model's time for a probe, ns. */
double fit_predict_ns(const cost_step_fit *fit, const fit_probe *p);

/* Weighted linear least squares: coef (k) minimising sum_i w_i^2 (a_i . coef - y_i)^2, with
 * a row-major (n, k) and w NULL for unit weights; Householder QR on scaled columns. Columns
 * whose `keep` entry is false (keep may be NULL) are held at 0. 0, or -1 with err (fewer
 * rows than free columns, or columns that do not separate: rank deficient). k <= 8. */
int fit_least_squares(const double *a, const double *y, const double *w, int n, int k,
                      const bool *keep, double *coef, char *err);

/* Fit the step model to the probes (at least 3 decode probes of different shapes and 2
 * prefill probes of different lengths). residual (may be NULL) gets each probe's relative
 * residual (fitted - measured) / measured. overlap: the model of cost.h's overlap (a prefill
 * probe's compute hides the step term: stage 2 fits t - seq, not t - step - seq; the
 * result's fit.overlap set). 0, or -1 with err. */
int fit_step_model(const fit_probe *probes, int n, const char *model, bool overlap,
                   fit_result *out, double *residual, char *err);

#endif
