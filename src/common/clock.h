/* clock — the one clock of stallscope: CLOCK_MONOTONIC in integer nanoseconds. */
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

#endif
