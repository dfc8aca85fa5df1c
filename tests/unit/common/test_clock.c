/* clock: the monotonic clock and its one pairing with the wall clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "common/clock.h"

static int64_t read_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * CLOCK_NS_PER_S + ts.tv_nsec;
}

/* The offset maps a monotonic reading onto the wall clock: a wall-clock reading taken right
 * after a monotonic one lies at their mapped value, within the pairing's error and the time
 * between the two reads (SLACK_NS: a busy machine may preempt us between them; a wrong
 * pairing is off by the machine's uptime). */
#define SLACK_NS (50 * CLOCK_NS_PER_MS)
static void test_realtime_offset(void **state)
{
    (void)state;
    for (int tries = 0; tries <= 8; tries += 4) { /* 0 is taken as 1 */
        int64_t error_ns = -1;
        const int64_t offset = clock_realtime_offset_ns(tries, &error_ns);
        assert_true(error_ns >= 0);
        assert_true(error_ns < SLACK_NS);
        const int64_t mono = clock_now_ns(), real = read_ns(CLOCK_REALTIME);
        const int64_t mapped = mono + offset;
        assert_true(llabs(real - mapped) <= error_ns + SLACK_NS);
    }
    assert_true(llabs(clock_realtime_offset_ns(1, NULL) - clock_realtime_offset_ns(8, NULL)) <
                SLACK_NS);
}

static void test_monotonic(void **state)
{
    (void)state;
    int64_t last = clock_now_ns();
    for (int i = 0; i < 1000; i++) {
        const int64_t now = clock_now_ns();
        assert_true(now >= last);
        last = now;
    }
    const int64_t deadline = clock_now_ns() + CLOCK_NS_PER_MS;
    clock_sleep_until_ns(deadline);
    assert_true(clock_now_ns() >= deadline);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_realtime_offset),
        cmocka_unit_test(test_monotonic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
