/* fit — least squares for the step model (fit.h). */
#include "engine/fit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define FIT_MAX_TERMS 8

void fit_probe_features(const fit_probe *p, cost_features *out)
{
    memset(out, 0, sizeof *out);
    if (p->prompt_tokens > 0) {
        const double n = p->prompt_tokens;
        out->samples = 1;
        out->prompt_tokens = n;
        out->prompt_pairs = n * p->context_sum + n * (n + 1) / 2;
    } else {
        out->samples = p->batch;
        out->decode_context = p->context_sum;
    }
}

double fit_predict_ns(const cost_step_fit *fit, const fit_probe *p)
{
    cost_features x;
    fit_probe_features(p, &x);
    return fit->step_ns + cost_fit_variable_ns(fit, &x);
}

int fit_least_squares(const double *a, const double *y, const double *w, int n, int k,
                      const bool *keep, double *coef, char *err)
{
    if (k < 1 || k > FIT_MAX_TERMS)
        return err_set(err, "least squares: %d terms (1 to %d)", k, FIT_MAX_TERMS);
    int cols[FIT_MAX_TERMS], kf = 0;
    for (int j = 0; j < k; j++) {
        coef[j] = 0;
        if (!keep || keep[j])
            cols[kf++] = j;
    }
    if (kf == 0)
        return err_set(err, "least squares: every term is held at 0");
    if (n < kf)
        return err_set(err, "least squares: %d measurements for %d terms", n, kf);
    double *m = malloc(sizeof(double) * (size_t)n * (size_t)kf); /* (n, kf) weighted, scaled */
    double *b = malloc(sizeof(double) * (size_t)n);
    if (!m || !b) {
        free(m);
        free(b);
        return err_set(err, "least squares: out of memory for %d rows", n);
    }
    double scale[FIT_MAX_TERMS];
    for (int c = 0; c < kf; c++) {
        scale[c] = 0;
        for (int i = 0; i < n; i++) {
            const double v = a[(size_t)i * k + cols[c]] * (w ? w[i] : 1);
            m[(size_t)i * kf + c] = v;
            scale[c] = fabs(v) > scale[c] ? fabs(v) : scale[c];
        }
        if (scale[c] > 0)
            for (int i = 0; i < n; i++)
                m[(size_t)i * kf + c] /= scale[c];
    }
    for (int i = 0; i < n; i++)
        b[i] = y[i] * (w ? w[i] : 1);

    /* Householder QR: column c of R lands on the diagonal, Q^T b in b. */
    double diag[FIT_MAX_TERMS];
    int rc = 0;
    for (int c = 0; c < kf && rc == 0; c++) {
        double norm = 0;
        for (int i = c; i < n; i++)
            norm += m[(size_t)i * kf + c] * m[(size_t)i * kf + c];
        norm = sqrt(norm);
        /* Columns are scaled to max 1: a column left this short is a combination of the
         * ones before it. */
        if (!(norm > 1e-9)) {
            rc = err_set(err, "least squares: the measurements do not separate term %d from "
                              "the others (vary the shapes)", cols[c]);
            break;
        }
        const double x0 = m[(size_t)c * kf + c];
        const double alpha = x0 > 0 ? -norm : norm;
        diag[c] = alpha;
        /* v = x - alpha e1, stored in place of column c (rows c..n-1) */
        m[(size_t)c * kf + c] = x0 - alpha;
        double vv = 0;
        for (int i = c; i < n; i++)
            vv += m[(size_t)i * kf + c] * m[(size_t)i * kf + c];
        for (int j = c + 1; j < kf; j++) {
            double dot = 0;
            for (int i = c; i < n; i++)
                dot += m[(size_t)i * kf + c] * m[(size_t)i * kf + j];
            const double f = 2 * dot / vv;
            for (int i = c; i < n; i++)
                m[(size_t)i * kf + j] -= f * m[(size_t)i * kf + c];
        }
        double dot = 0;
        for (int i = c; i < n; i++)
            dot += m[(size_t)i * kf + c] * b[i];
        const double f = 2 * dot / vv;
        for (int i = c; i < n; i++)
            b[i] -= f * m[(size_t)i * kf + c];
    }
    if (rc == 0) {
        double z[FIT_MAX_TERMS];
        for (int c = kf - 1; c >= 0; c--) { /* R z = Q^T b, R above the diagonal in m */
            double sum = b[c];
            for (int j = c + 1; j < kf; j++)
                sum -= m[(size_t)c * kf + j] * z[j];
            z[c] = sum / diag[c];
        }
        for (int c = 0; c < kf; c++)
            coef[cols[c]] = z[c] / scale[c];
    }
    free(m);
    free(b);
    return rc;
}

/* Least squares with no negative term: the most negative one is held at 0 and the rest
 * refitted, until none is negative. */
static int fit_nonnegative(const double *a, const double *y, const double *w, int n, int k,
                           bool *keep, double *coef, char *err)
{
    for (;;) {
        if (fit_least_squares(a, y, w, n, k, keep, coef, err) != 0)
            return -1;
        int worst = -1;
        for (int j = 0; j < k; j++)
            if (keep[j] && coef[j] < 0 && (worst < 0 || coef[j] < coef[worst]))
                worst = j;
        if (worst < 0)
            return 0;
        keep[worst] = false;
        coef[worst] = 0;
        int left = 0;
        for (int j = 0; j < k; j++)
            left += keep[j];
        if (left == 0)
            return err_set(err, "no term of the step model stays positive");
    }
}

int fit_step_model(const fit_probe *probes, int n, const char *model, bool overlap,
                   fit_result *out, double *residual, char *err)
{
    memset(out, 0, sizeof *out);
    out->fit.overlap = overlap;
    snprintf(out->fit.model, sizeof out->fit.model, "%s", model ? model : "");
    for (int i = 0; i < n; i++) {
        if (!(probes[i].ns > 0) || !isfinite(probes[i].ns))
            return err_set(err, "probe %d: a step of %g ns", i, probes[i].ns);
        if (probes[i].prompt_tokens > 0)
            out->n_prefill++;
        else if (probes[i].batch > 0 && probes[i].context_sum >= 0)
            out->n_decode++;
        else
            return err_set(err, "probe %d: neither a decode step (batch > 0) nor a prefill", i);
    }
    if (out->n_decode < 3)
        return err_set(err, "%d decode probes: the step, per-sequence and per-context terms "
                            "need at least 3 of different shapes", out->n_decode);
    if (out->n_prefill < 2)
        return err_set(err, "%d prefill probes: the per-token and attention terms need at "
                            "least 2 prompt lengths", out->n_prefill);
    const int rows = out->n_decode > out->n_prefill ? out->n_decode : out->n_prefill;
    double *a = malloc(sizeof(double) * (size_t)rows * 3);
    double *y = malloc(sizeof(double) * (size_t)rows);
    double *w = malloc(sizeof(double) * (size_t)rows);
    int rc = -1;
    if (!a || !y || !w) {
        err_set(err, "out of memory for %d probes", n);
        goto done;
    }
    char why[ERR_LEN];

    /* 1. decode: t = step + seq B + ctx C */
    int r = 0;
    for (int i = 0; i < n; i++) {
        if (probes[i].prompt_tokens > 0)
            continue;
        a[r * 3 + 0] = 1;
        a[r * 3 + 1] = probes[i].batch;
        a[r * 3 + 2] = probes[i].context_sum;
        y[r] = probes[i].ns;
        w[r] = 1 / probes[i].ns;
        r++;
    }
    bool keep_d[3] = {true, true, true};
    double cd[3];
    if (fit_nonnegative(a, y, w, r, 3, keep_d, cd, why) != 0) {
        err_set(err, "decode probes: %s", why);
        goto done;
    }
    out->fit.step_ns = cd[0];
    out->fit.seq_ns = cd[1];
    out->fit.ctx_ns = cd[2];

    /* 2. prefill: t - step - seq = token n + pair (n c + n (n + 1) / 2), c the cells it
     *    attends over before it (overlap: t - seq, the step hidden under the prompt's
     *    compute) */
    r = 0;
    for (int i = 0; i < n; i++) {
        if (probes[i].prompt_tokens <= 0)
            continue;
        cost_features x;
        fit_probe_features(&probes[i], &x);
        a[r * 2 + 0] = x.prompt_tokens;
        a[r * 2 + 1] = x.prompt_pairs;
        y[r] = probes[i].ns - (overlap ? 0 : out->fit.step_ns) - out->fit.seq_ns;
        w[r] = 1 / probes[i].ns;
        r++;
    }
    bool keep_p[2] = {true, true};
    double cp[2];
    if (fit_nonnegative(a, y, w, r, 2, keep_p, cp, why) != 0) {
        err_set(err, "prefill probes: %s", why);
        goto done;
    }
    out->fit.token_ns = cp[0];
    out->fit.pair_ns = cp[1];
    for (int j = 0; j < 3; j++)
        out->dropped[j] = !keep_d[j];
    for (int j = 0; j < 2; j++)
        out->dropped[3 + j] = !keep_p[j];

    double sum_d = 0, sum_p = 0;
    for (int i = 0; i < n; i++) {
        const double rel = (fit_predict_ns(&out->fit, &probes[i]) - probes[i].ns) / probes[i].ns;
        if (residual)
            residual[i] = rel;
        if (probes[i].prompt_tokens > 0)
            sum_p += rel * rel;
        else
            sum_d += rel * rel;
        out->max_abs = fabs(rel) > out->max_abs ? fabs(rel) : out->max_abs;
    }
    out->decode_rms = sqrt(sum_d / out->n_decode);
    out->prefill_rms = sqrt(sum_p / out->n_prefill);
    rc = 0;
done:
    free(a);
    free(y);
    free(w);
    return rc;
}
