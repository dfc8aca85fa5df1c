/* runner — one run as the pair hands it to a runner, and the runners: the simulator
 * (runner_sim.c) and HTTP (runner_http.c). */
#ifndef STALLSCOPE_EXPERIMENT_RUNNER_H
#define STALLSCOPE_EXPERIMENT_RUNNER_H
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/analysis.h"
#include "common/tokenlog.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "workload/workload.h"

/* One run as the pair hands it to a runner. */
typedef struct experiment_phase {
    const experiment_config *cfg;
    const workload_config *wl;  /* cfg->wl with the injector on (interference) or off */
    const char *label;
    const char *dir;            /* OUT/<label>/ (exists, holds config.json); NULL: in memory */
    FILE *notes;                /* warnings, and progress unless quiet; NULL: nothing */
    bool quiet;                 /* no progress lines (--json): warnings only */
    const volatile sig_atomic_t *interrupted; /* non-zero: stop now (SIGINT); may be NULL */
    int64_t stall_threshold_ns; /* progress lines count gaps above it; 0: not known yet */
    /* A runner that streams (experiment_runner.streams) hands the run's rows to this
     * analysis as they come and leaves the log empty; the HTTP runner reads its limit on the
     * events held and says when it kept them on disk only. NULL: fill the log, keep all. */
    struct experiment_streaming *streaming;
} experiment_phase;

/* A streamed run: where its rows go, and what became of tokens.csv (the simulator writes it
 * as it goes, up to a limit: an hour of 256 users is 10^8 rows, 2.9 GB, and most of the
 * run's time). */
typedef struct experiment_streaming {
    analysis_stream *stream;       /* in: the run's analysis, begun */
    int64_t tokens_csv_max_events; /* in: keep tokens.csv up to this many events (0: default) */
    int64_t events;                /* out: token events of the run */
    bool tokens_csv_dropped;       /* out: more events than that: no tokens.csv */
    /* A live run (HTTP) holds at most this many token events in memory (0: the default);
     * past it the events leave as they are written (driver_phase.log_events_max) and the
     * run's tokens.csv and requests.csv, as written during the run, are its record. */
    int64_t log_events_max;        /* in */
    bool events_on_disk;           /* out: so the log has no events: summarize the files */
} experiment_streaming;

#define EXPERIMENT_LOG_EVENTS_MAX_DEFAULT ((int64_t)5000000) /* ~160 MB held */

#define EXPERIMENT_TOKENS_CSV_MAX_DEFAULT ((int64_t)5000000) /* ~140 MB of tokens.csv */

/* A runner (a small vtable, like exec and transport). run() fills log (times from
 * the run's t = 0) and meta (complete, engine name, target, what the client learned), and
 * leaves tokens.csv, requests.csv and (where the engine is ours) steps.csv in phase->dir —
 * as it goes where it can, so a run that dies keeps what it received. It returns 0 when
 * the run took place, also when cut short (meta->complete false, err says why), and -1
 * with err when it could not take place at all. */
typedef struct experiment_runner {
    void *impl;
    const char *name; /* "sim", "http" */
    bool streams;     /* run() honours phase->streaming (else it always fills the log) */
    int (*run)(void *impl, const experiment_phase *phase, tokenlog *log, experiment_meta *meta,
               char *err);
    void (*destroy)(void *impl);
} experiment_runner;

/* The simulator. 0, or -1 with err. */
int experiment_runner_sim(experiment_runner *out, char *err);
/* HTTP: a fresh embedded server per run (this binary's `serve --config DIR/config.json` on a
 * free loopback port; needs phase->dir), or cfg->client.target. secrets are borrowed and
 * must outlive the runner. The first run probes the server (token-id prompts or calibrated
 * text); later runs reuse what it found. A load generator that stamps tokens in ms wants
 * the CPU when bytes arrive: the runner asks for nice -10 (root only; the embedded server
 * inherits it) and says in its first run's notes when it could not. 0, or -1 with err. */
int experiment_runner_http(experiment_runner *out, const experiment_secrets *secrets, char *err);
void experiment_runner_free(experiment_runner *r);

#endif
