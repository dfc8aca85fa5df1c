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

int64_t clock_realtime_offset_ns(int tries, int64_t *error_ns)
{
    int64_t best_width = INT64_MAX, best = 0;
    for (int i = 0; i < (tries > 0 ? tries : 1); i++) {
        const int64_t r1 = clock_read(CLOCK_REALTIME), m = clock_read(CLOCK_MONOTONIC);
        const int64_t r2 = clock_read(CLOCK_REALTIME);
        const int64_t width = r2 - r1; /* negative: the wall clock stepped back meanwhile */
        if (width >= 0 && width < best_width) {
            best_width = width;
            best = r1 + width / 2 - m;
        }
    }
    if (error_ns)
        *error_ns = best_width == INT64_MAX ? 0 : (best_width + 1) / 2;
    return best;
}

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
