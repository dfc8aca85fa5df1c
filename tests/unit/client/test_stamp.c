/* client/stamp: the kernel stamps a socket's bytes from its first read.
 * The kernel turns its receive stamping on a moment after the first socket asks for it
 * (deferred work) and off again a moment after the last one closes; bytes that arrive on a
 * fresh socket in that moment carry no stamp. Without stamp_hold, a fresh process's
 * first loopback read often came unstamped (the raw transport's first token was then labelled
 * `user`; with the held socket closed before the connections, this test fails). Here:
 *   - stamp_hold confirms the switch is on (a stamped byte on its own loopback connection
 *     within 200 ms);
 *   - while it is held, each of 20 fresh connections' first read is stamped by the kernel,
 *     within 4 ms of its send and never after the read. */
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/stamp.h"
#include "common/clock.h"

static void test_hold_turns_stamps_on(void **state)
{
    (void)state;
    bool on = false;
    const int fd = stamp_hold(200 * CLOCK_NS_PER_MS, &on);
    assert_true(fd >= 0);
    assert_true(on);
    close(fd);
    /* once for the process: on, and on again without a second socket */
    assert_true(stamp_switch_on());
    assert_true(stamp_switch_on());
}

static void test_first_read_stamped_while_held(void **state)
{
    (void)state;
    bool on = false;
    const int hold = stamp_hold(200 * CLOCK_NS_PER_MS, &on);
    assert_true(hold >= 0 && on);
    const int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(l, 4), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&a, &len), 0);
    for (int i = 0; i < 20; i++) {
        const int c = socket(AF_INET, SOCK_STREAM, 0);
        stamp_enable(c);
        assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof a), 0);
        const int s = accept(l, NULL, NULL);
        assert_true(s >= 0);
        const int64_t sent = clock_now_ns();
        assert_int_equal(send(s, "x", 1, 0), 1);
        char b[8];
        stamp_read st;
        assert_int_equal(stamp_recv(c, b, sizeof b, clock_realtime_offset_ns(1, NULL), &st), 1);
        if (!st.kernel)
            fail_msg("connection %d: its first read carried no kernel stamp", i);
        assert_true(st.t_ns <= st.now_ns);
        assert_true(st.t_ns - sent < 4 * CLOCK_NS_PER_MS);
        close(s);
        close(c);
    }
    close(l);
    close(hold);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hold_turns_stamps_on),
        cmocka_unit_test(test_first_read_stamped_while_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
