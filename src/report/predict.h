/* predict — the cost model beside a measured run: the run's configuration (read back by the
 * experiment's one reader) run as a pair by the simulator runner, in process, on the run's
 * own profile and on the reference (an H100 SXM running Llama 3.1 8B).
 *
 * The run's own profile: an emulated GPU's, the cpu engine's (--hardware: a calibrated
 * profile whose fitted step model prices its steps; else the catalog's nominal cpu), and for
 * a remote server (--target) only the profile the run was given with --hardware. A remote
 * server without one has no model, and never gets the reference in its place. */
#ifndef STALLSCOPE_REPORT_PREDICT_H
#define STALLSCOPE_REPORT_PREDICT_H
#include <stdbool.h>

#include "experiment/config.h"
#include "experiment/pair.h"
#include "report/load.h"

#define REPORT_REFERENCE_GPU EXPERIMENT_DEFAULT_GPU
#define REPORT_REFERENCE_MODEL EXPERIMENT_DEFAULT_MODEL

typedef struct report_prediction {
    bool ok;
    char profile[192]; /* "h100-sxm llama-3.1-8b mixed/16384" */
    char why[512];     /* when !ok: why there is no prediction */
    char caveat[512];  /* when ok: what the profile is not ("" nothing to say) */
    experiment_pair pair;
} report_prediction;

/* The simulator, in process, for the run's workload on its own profile (reference false)
 * or on the reference profile (true). Fills out->why and returns 0 when the run cannot be
 * predicted (a remote target without --hardware, a simulation, no readable config.json);
 * -1 only on a hard failure. A cpu-engine run without --hardware is predicted by the
 * catalog's nominal cpu, measured on another machine: out->caveat says so and how to
 * calibrate this one. */
int report_predict(const report_run *run, bool reference, report_prediction *out, char *err);
void report_prediction_free(report_prediction *p);

/* The error of a prediction as the report prints it: predicted / measured - 1 (0 when
 * nothing was measured). */
double report_relative_error(double measured, double predicted);

#endif
