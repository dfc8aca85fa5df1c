/* clock — the one clock of stallscope: CLOCK_MONOTONIC in integer nanoseconds, and the one
 * reader of its offset from the wall clock (CLOCK_REALTIME), which maps a kernel's receive
 * stamp onto the run's clock (client/raw.c) and places a shard's t = 0 on the wall clock
 * (experiment/shard.c). */
#ifndef STALLSCOPE_CLOCK_H
#define STALLSCOPE_CLOCK_H
#include <stdint.h>

#define CLOCK_NS_PER_MS 1000000LL
#define CLOCK_NS_PER_S 1000000000LL

/* Now, CLOCK_MONOTONIC, in ns. */
int64_t clock_now_ns(void);
/* Sleep until an absolute CLOCK_MONOTONIC deadline (no drift across steps). */
void clock_sleep_until_ns(int64_t deadline_ns);
/* CPU time of this process, ns (CLOCK_PROCESS_CPUTIME_ID). */
int64_t clock_process_cpu_ns(void);
/* CLOCK_REALTIME - CLOCK_MONOTONIC, ns: the midpoint of the tightest of `tries` (at least 1)
 * brackets (REALTIME, MONOTONIC, REALTIME). *error_ns (may be NULL) is half that bracket,
 * rounded up: how far the true offset can be from the one returned. */
int64_t clock_realtime_offset_ns(int tries, int64_t *error_ns);

#endif
