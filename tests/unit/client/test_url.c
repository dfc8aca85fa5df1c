/* client/url: the base URL taken from a target. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "client/url.h"

static void test_base_url(void **state)
{
    (void)state;
    char out[128];
    url_base("http://h:1/v1/", out, sizeof out);
    assert_string_equal(out, "http://h:1");
    url_base("https://h/api", out, sizeof out);
    assert_string_equal(out, "https://h/api");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
