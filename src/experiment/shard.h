/* shard — one process's share of a sharded experiment, and its clock (shard.c,
 * docs/guide/shards.md): --shard and --start-at, UTC text, the planned t = 0 of each run, the
 * wait for it and the record of where it fell. */
#ifndef STALLSCOPE_EXPERIMENT_SHARD_H
#define STALLSCOPE_EXPERIMENT_SHARD_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/opts.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/runner.h"

/* --shard I/N and --start-at TIME (run only). */
opts_group experiment_shard_group(experiment_config *cfg);
/* A start time: ISO-8601 UTC ("2026-12-01T10:00:00Z", "...:00.250Z", "+00:00" for Z) or
 * "now+DUR" ("now+30s") counted from now_ns (CLOCK_REALTIME, ns). A time not after now_ns,
 * or more than 7 days ahead, is refused. 0, or -1 with err. */
int experiment_parse_start_at(const char *text, int64_t now_ns, int64_t *out_ns, char *err);
/* ns since the epoch as ISO-8601 UTC: "2026-12-01T10:00:00Z", "...:00.25Z" (digits as needed). */
void experiment_format_utc(int64_t ns, char *buf, size_t size);
/* The planned t = 0 of a sharded run (CLOCK_REALTIME ns): start_at for the first run of the
 * pair; the second (the interference run after a baseline) starts its warm-up a settling
 * time after the first ends: start_at + duration + settle + warmup, settle = 2 s + 5 % of
 * the duration (time to write the first run's files and summary). */
int64_t experiment_shard_phase_start(const experiment_config *cfg, bool second);
/* This machine's clock now (adjtimex, boot id, host name); pair_error_ns and step_ns 0. */
void experiment_clock_read(experiment_clock *out);
/* Bound on the offset between two shards' t = 0 readings: 0 on one kernel (same boot id:
 * the merge places shards by their t0_monotonic_ns on its one CLOCK_MONOTONIC); else the
 * pairing errors and steps plus the sum of the two maxerror bounds (16 s each where
 * unknown: the kernel's own ceiling). estimated: the same with esterror. */
int64_t experiment_clock_uncertainty_ns(const experiment_clock *a, const experiment_clock *b,
                                        bool estimated);

/* The shard side of an HTTP run, around the driver: wait until the run's warm-up should
 * begin (so t = 0 falls on the planned instant), then record where t = 0 fell. */
typedef struct experiment_shard_start {
    bool sharded;
    int64_t planned_ns;      /* the run's t = 0, CLOCK_REALTIME */
    int64_t offset_ns;       /* CLOCK_REALTIME - CLOCK_MONOTONIC, read before the run */
    experiment_clock clock;  /* read before the run */
} experiment_shard_start;
/* Not sharded: returns at once. Else waits (interruptible) and sets *warmup_ns to the
 * warm-up left before the planned t = 0. -1 with err when that instant has passed (the
 * shard was not ready in time) or on an interrupt. */
int experiment_shard_wait(const experiment_phase *ph, experiment_shard_start *st,
                          int64_t *warmup_ns, char *err);
/* After the run: t0_realtime_ns, start_late_ns and clock into meta (t0_mono_ns: the
 * driver's t = 0 on CLOCK_MONOTONIC). */
void experiment_shard_record(const experiment_shard_start *st, int64_t t0_mono_ns,
                             experiment_meta *meta);

#endif
