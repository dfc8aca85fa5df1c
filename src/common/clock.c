#include "common/clock.h"

#include <errno.h>
#include <time.h>

static int64_t clock_read(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * CLOCK_NS_PER_S + ts.tv_nsec;
}

int64_t clock_now_ns(void) { return clock_read(CLOCK_MONOTONIC); }

int64_t clock_process_cpu_ns(void) { return clock_read(CLOCK_PROCESS_CPUTIME_ID); }

void clock_sleep_until_ns(int64_t deadline_ns)
{
    struct timespec ts = {
        .tv_sec = deadline_ns / CLOCK_NS_PER_S,
        .tv_nsec = deadline_ns % CLOCK_NS_PER_S,
    };
    /* EINTR: a signal woke us early; go back to sleep until the same deadline. */
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}
