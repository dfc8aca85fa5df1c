/* proc: children in their own group, readiness polled to a deadline, stopped with TERM then
 * KILL, their end described in words. Real processes (sh), bounded in time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/proc.h"

static char root[] = "/tmp/test_proc_XXXXXX";

static int setup(void **state)
{
    (void)state;
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

/* Ready once the log holds the word READY. */
static bool says_ready(void *ctx, char *why, size_t size)
{
    char line[256] = "";
    proc_log_last_line(ctx, line, sizeof line);
    snprintf(why, size, "last line '%s'", line);
    return strstr(line, "READY") != NULL;
}

static void test_ready_then_stop(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", log[128], how[128];
    snprintf(log, sizeof log, "%s/ready.log", root);
    proc_spec spec = {.shell = "sleep 0.2; echo READY; exec sleep 30", .log_path = log};
    proc p;
    assert_int_equal(proc_start(&p, &spec, err), 0);
    assert_int_equal(getpgid(p.pid), p.pid); /* its own group */
    int64_t t0 = clock_now_ns();
    assert_int_equal(proc_wait_ready(&p, says_ready, log, 10 * CLOCK_NS_PER_S, 10 * CLOCK_NS_PER_MS,
                                     NULL, err),
                     0);
    assert_true(clock_now_ns() - t0 >= 150 * CLOCK_NS_PER_MS);
    assert_false(proc_exited(&p));
    proc_describe(&p, how, sizeof how);
    assert_string_equal(how, "is still running");
    assert_true(proc_stop(&p, 5 * CLOCK_NS_PER_S));
    proc_describe(&p, how, sizeof how);
    assert_string_equal(how, "was killed by signal 15 (Terminated)");
    assert_true(proc_stop(&p, 0)); /* again: harmless */
}

static void test_exit_before_ready(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", log[128];
    snprintf(log, sizeof log, "%s/dies.log", root);
    proc_spec spec = {.shell = "echo cannot bind port 1; exit 3", .log_path = log};
    proc p;
    assert_int_equal(proc_start(&p, &spec, err), 0);
    assert_int_equal(proc_wait_ready(&p, says_ready, log, 10 * CLOCK_NS_PER_S, 10 * CLOCK_NS_PER_MS,
                                     NULL, err),
                     -1);
    /* How it ended and its own last words. */
    assert_non_null(strstr(err, "exited with status 3"));
    assert_non_null(strstr(err, "cannot bind port 1"));
}

static void test_timeout_and_interrupt(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", log[128];
    snprintf(log, sizeof log, "%s/silent.log", root);
    proc_spec spec = {.shell = "exec sleep 30", .log_path = log};
    proc p;
    assert_int_equal(proc_start(&p, &spec, err), 0);
    int64_t t0 = clock_now_ns();
    assert_int_equal(proc_wait_ready(&p, says_ready, log, 300 * CLOCK_NS_PER_MS,
                                     20 * CLOCK_NS_PER_MS, NULL, err),
                     -1);
    int64_t waited = clock_now_ns() - t0;
    assert_true(waited >= 300 * CLOCK_NS_PER_MS && waited < 5 * CLOCK_NS_PER_S);
    assert_non_null(strstr(err, "not ready within 0.3 s"));
    volatile sig_atomic_t stop = 1;
    assert_int_equal(proc_wait_ready(&p, says_ready, log, 10 * CLOCK_NS_PER_S,
                                     20 * CLOCK_NS_PER_MS, &stop, err),
                     -1);
    assert_non_null(strstr(err, "interrupted"));
    proc_stop(&p, 5 * CLOCK_NS_PER_S);
}

/* A child that ignores SIGTERM is killed after the grace period, and so is its group. */
static void test_stubborn_child_killed(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", log[128], how[128];
    snprintf(log, sizeof log, "%s/stubborn.log", root);
    proc_spec spec = {.shell = "trap '' TERM; echo READY; while :; do sleep 1; done",
                      .log_path = log};
    proc p;
    assert_int_equal(proc_start(&p, &spec, err), 0);
    assert_int_equal(proc_wait_ready(&p, says_ready, log, 10 * CLOCK_NS_PER_S, 10 * CLOCK_NS_PER_MS,
                                     NULL, err),
                     0);
    int64_t t0 = clock_now_ns();
    assert_false(proc_stop(&p, 200 * CLOCK_NS_PER_MS));
    assert_true(clock_now_ns() - t0 < 5 * CLOCK_NS_PER_S);
    proc_describe(&p, how, sizeof how);
    assert_string_equal(how, "was killed by signal 9 (Killed)");
    /* Nothing of its group is left (the shell's sleep got SIGKILL too: it is gone once the
     * kernel has delivered it, within a bounded wait). */
    int64_t deadline = clock_now_ns() + 5 * CLOCK_NS_PER_S;
    while (kill(-p.pid, 0) == 0 && clock_now_ns() < deadline)
        clock_sleep_until_ns(clock_now_ns() + 10 * CLOCK_NS_PER_MS);
    assert_int_equal(kill(-p.pid, 0), -1);
}

static void test_exec_failure_and_argv(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", log[128], line[256];
    snprintf(log, sizeof log, "%s/argv.log", root);
    char *argv[] = {"echo", "hello from argv", NULL};
    proc_spec spec = {.argv = argv, .log_path = log};
    proc p;
    assert_int_equal(proc_start(&p, &spec, err), 0);
    assert_true(proc_wait_exit(&p, 10 * CLOCK_NS_PER_S));
    proc_log_last_line(log, line, sizeof line);
    assert_string_equal(line, "hello from argv");

    char *missing[] = {"/nonexistent/program", NULL};
    spec.argv = missing;
    assert_int_equal(proc_start(&p, &spec, err), 0);
    assert_true(proc_wait_exit(&p, 10 * CLOCK_NS_PER_S));
    char how[128];
    proc_describe(&p, how, sizeof how);
    assert_string_equal(how, "exited with status 127");
    proc_log_last_line(log, line, sizeof line);
    assert_non_null(strstr(line, "No such file"));
    proc_spec nothing = {0};
    assert_int_equal(proc_start(&p, &nothing, err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ready_then_stop),
        cmocka_unit_test(test_exit_before_ready),
        cmocka_unit_test(test_timeout_and_interrupt),
        cmocka_unit_test(test_stubborn_child_killed),
        cmocka_unit_test(test_exec_failure_and_argv),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
