/* calib_target_state — a server's state as the probes of calibrate --target saw it
 * (calib_target_state.h). Pure. */
#include "calibrate/calib_target_state.h"

#include <math.h>
#include <string.h>

void calib_target_drift_of(const calib_target_sentinel *s, int n, double max_drift,
                           calib_target_drift *out)
{
    memset(out, 0, sizeof *out);
    out->moved = -1;
    if (n < 2 || !(s[0].ttft_ns > 0) || !(s[0].step_ns > 0))
        return;
    for (int i = 1; i < n; i++) {
        const double ttft = s[i].ttft_ns / s[0].ttft_ns - 1, step = s[i].step_ns / s[0].step_ns - 1;
        out->ttft = fabs(ttft) > out->ttft ? fabs(ttft) : out->ttft;
        out->step = fabs(step) > out->step ? fabs(step) : out->step;
        if (out->moved < 0 && (fabs(ttft) > max_drift || fabs(step) > max_drift)) {
            out->moved = i;
            out->moved_ttft = fabs(ttft) >= fabs(step);
            out->by = out->moved_ttft ? ttft : step;
        }
    }
}

double calib_target_retained_ratio(const calib_target_kept *k)
{
    return k->after_fill_ns > 0 && k->quiet_ns > 0 ? k->after_fill_ns / k->quiet_ns : 0;
}

int calib_target_prefix_caching(const calib_target_kept *k)
{
    if (!(k->cache_first_ns > 0) || !(k->cache_second_ns > 0))
        return -1;
    return k->cache_second_ns < CALIB_TARGET_CACHED * k->cache_first_ns;
}

double calib_target_kv_spread(const calib_target_metrics *m, int n, double *lo_out, double *hi_out)
{
    double lo = 0, hi = 0;
    int said = 0;
    for (int i = 0; i < n; i++) {
        if (m[i].kv_usage < 0)
            continue;
        lo = said == 0 || m[i].kv_usage < lo ? m[i].kv_usage : lo;
        hi = said == 0 || m[i].kv_usage > hi ? m[i].kv_usage : hi;
        said++;
    }
    if (lo_out)
        *lo_out = lo;
    if (hi_out)
        *hi_out = hi;
    return said >= 2 ? hi - lo : -1;
}
