/* client/transport_kind: which transport "auto" picks (proxy variables), the names parsed,
 * and what the raw transport cannot take said at creation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "client/raw.h"
#include "client/transport_kind.h"
#include "common/err.h"

static void test_auto_transport(void **state)
{
    (void)state;
    const char *vars[] = {"http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
                          "no_proxy", "NO_PROXY"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    const char *local = "http://127.0.0.1:8000", *secure = "https://api.example.test/v1";
    assert_int_equal(transport_kind_resolve(TRANSPORT_AUTO, local), TRANSPORT_RAW);
    assert_int_equal(transport_kind_resolve(TRANSPORT_AUTO, secure), TRANSPORT_RAW);
    assert_int_equal(transport_kind_resolve(TRANSPORT_CURL, local), TRANSPORT_CURL);
    setenv("http_proxy", "http://proxy:3128", 1);
    assert_int_equal(transport_kind_resolve(TRANSPORT_AUTO, local), TRANSPORT_CURL);
    assert_int_equal(transport_kind_resolve(TRANSPORT_AUTO, secure), TRANSPORT_RAW);
    assert_int_equal(transport_kind_resolve(TRANSPORT_RAW, local), TRANSPORT_RAW);
    setenv("no_proxy", "localhost,127.0.0.1", 1);
    assert_int_equal(transport_kind_resolve(TRANSPORT_AUTO, local), TRANSPORT_RAW);
    setenv("HTTPS_PROXY", "http://proxy:3128", 1);
    assert_int_equal(transport_kind_resolve(TRANSPORT_AUTO, secure), TRANSPORT_CURL);
    setenv("no_proxy", ".example.test", 1);
    assert_int_equal(transport_kind_resolve(TRANSPORT_AUTO, secure), TRANSPORT_RAW);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    transport_kind k;
    char err[ERR_LEN];
    assert_int_equal(transport_kind_parse("curl", &k, err), 0);
    assert_int_equal(k, TRANSPORT_CURL);
    assert_int_equal(transport_kind_parse("http2", &k, err), -1);
    assert_non_null(strstr(err, "http2"));
    /* What the raw transport cannot take is said at creation. */
    transport_options o = {0};
    o.base_url = "unix:///run/x.sock";
    assert_null(raw_create(&o, err));
    assert_non_null(strstr(err, "--transport curl"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_transport),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
