/* experiment/server_cmd: a --server-cmd template filled from the target. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
