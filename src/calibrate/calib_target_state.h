/* calib_target_state — what `calibrate --target` measures of a server's state (issue 24), as
 * pure functions over what the probes saw (calib_target.c sends them; calib_target_fit.c
 * records them in the profile):
 *   sentinel  one small fixed probe (a fresh CALIB_TARGET_SENTINEL_TOKENS-token prompt alone,
 *             CALIB_TARGET_SENTINEL_ANSWER tokens answered, CALIB_TARGET_SENTINEL_REPEATS
 *             times) at the start, after each stage and so at the end: its TTFT and decode
 *             step. Drift is either one's largest move from the start; the first sentinel
 *             past --max-drift names the stage after which the server moved.
 * Internal to src/calibrate/ (calib_target_fit.h gathers it). */
#ifndef STALLSCOPE_CALIB_TARGET_STATE_H
#define STALLSCOPE_CALIB_TARGET_STATE_H
#include <stdbool.h>

#define CALIB_TARGET_SENTINEL_TOKENS 512
#define CALIB_TARGET_SENTINEL_ANSWER 16
#define CALIB_TARGET_SENTINEL_REPEATS 3
#define CALIB_TARGET_MAX_SENTINELS 6

typedef struct calib_target_sentinel {
    char after[16];  /* "start", or the stage it followed: "decode", "prefill", "interference" */
    double ttft_ns;  /* the median TTFT of its repeats */
    double step_ns;  /* the median gap of their answers */
} calib_target_sentinel;

typedef struct calib_target_drift {
    double ttft, step; /* the largest |x / x at the start - 1| of each */
    int moved;         /* the first sentinel whose TTFT or step moved past max_drift; -1 none */
    bool moved_ttft;   /* at moved: the TTFT moved most (else the step) */
    double by;         /* at moved: that figure / its start - 1 */
} calib_target_drift;

/* The drift of n sentinels (the first the start) against max_drift. n < 2: none. */
void calib_target_drift_of(const calib_target_sentinel *s, int n, double max_drift,
                           calib_target_drift *out);

#endif
