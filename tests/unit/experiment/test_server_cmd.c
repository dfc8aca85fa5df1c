/* experiment/server_cmd: a --server-cmd template filled from the target. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "experiment/config.h"
#include "experiment/server_cmd.h"

/* A --server-cmd template takes {host} and {port} from the target past its user:password
 * and before its query: neither the password nor a query key reaches the command. */
static void test_server_command(void **state)
{
    (void)state;
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_REMOTE);
    snprintf(c.client.target, sizeof c.client.target, "http://user:PASS@127.0.0.1:8123?key=QKEY");
    char cmd[512], err[ERR_LEN];
    const char *tmpl = "serve --host {host} --port {port} --policy {policy}";
    assert_int_equal(experiment_server_command(tmpl, &c, "p", cmd, sizeof cmd, err), 0);
    assert_string_equal(cmd, "serve --host 127.0.0.1 --port 8123 --policy mixed");
    snprintf(c.client.target, sizeof c.client.target, "https://u:p@ss@example.test/v1");
    assert_int_equal(experiment_server_command("{host}:{port}", &c, "p", cmd, sizeof cmd, err), 0);
    assert_string_equal(cmd, "example.test:443");
    /* An IPv6 literal: the address without its brackets ({host} was "[") */
    snprintf(c.client.target, sizeof c.client.target, "http://[::1]:8124/v1");
    assert_int_equal(experiment_server_command("--host {host} --port {port}", &c, "p", cmd,
                                               sizeof cmd, err), 0);
    assert_string_equal(cmd, "--host ::1 --port 8124");
    snprintf(c.client.target, sizeof c.client.target, "http://[fe80::2]");
    assert_int_equal(experiment_server_command("{host} {port}", &c, "p", cmd, sizeof cmd, err), 0);
    assert_string_equal(cmd, "fe80::2 80");
}

/* The template's program is looked for before anything runs: found on PATH or at its path
 * (quoted, past VAR=value), a shell word taken as it is, a missing one named; an unknown
 * placeholder refused; whether the port --target points at is in the command. */
static void test_server_command_check(void **state)
{
    (void)state;
    experiment_config c;
    experiment_defaults(&c, EXPERIMENT_REMOTE);
    snprintf(c.client.target, sizeof c.client.target, "http://127.0.0.1:8321");
    char err[ERR_LEN] = "";
    bool port = false;
    static const char *const good[] = {
        "sh -c 'serve --port {port}'", "'/bin/sh' -c true", "\"/bin/sh\" -c true",
        "FOO=1 BAR=x sh -c true", "  env FOO=1 serve", "exec sh -c true", "exit 3",
        "$HOME/bin/serve --port {port}", "(cd /tmp && ./serve)", "~/serve", "'/bin/sh'x"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (experiment_server_command_check(good[i], &c, &port, err) != 0)
            fail_msg("%s: %s", good[i], err);
    }
    static const char *const missing[][2] = {
        {"stallscope serve --port {port}", "stallscope: not found on PATH"},
        {"FOO=1 no-such-server-xyz", "no-such-server-xyz: not found on PATH"},
        {"./no-such-server-xyz --port {port}", "./no-such-server-xyz: no executable file"},
        {"'/no/such dir/serve' --port {port}", "/no/such dir/serve: no executable file"},
        {"/etc --port {port}", "/etc: no executable file"},
        {"sh --port {prt}", "unknown placeholder {prt}"}};
    const char *path = getenv("PATH");
    char saved[4096];
    snprintf(saved, sizeof saved, "%s", path ? path : "");
    setenv("PATH", "/usr/bin:/bin", 1); /* no stallscope there */
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        err[0] = '\0';
        assert_int_equal(experiment_server_command_check(missing[i][0], &c, &port, err), -1);
        if (!strstr(err, missing[i][1]))
            fail_msg("%s: %s", missing[i][0], err);
    }
    setenv("PATH", saved, 1);
    assert_int_equal(experiment_server_command_check("sh --port {port}", &c, &port, err), 0);
    assert_true(port);
    assert_int_equal(experiment_server_command_check("sh --port 8321", &c, &port, err), 0);
    assert_true(port);
    assert_int_equal(experiment_server_command_check("sh --port 8000", &c, &port, err), 0);
    assert_false(port);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_command),
        cmocka_unit_test(test_server_command_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
