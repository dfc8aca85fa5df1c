/* report/html_page: what every page shares: escaping and relative links. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "report/html_page.h"

static void test_escape_url_rel(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    html_escape(f, "<a href=\"x\">'&'</a>");
    fputc('|', f);
    html_url(f, "point 1/ü.csv");
    fclose(f);
    assert_string_equal(buf, "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;|point%201/%C3%BC.csv");
    free(buf);
    char rel[256];
    html_rel("out/sim/", "out/sim/baseline", rel, sizeof rel);
    assert_string_equal(rel, "baseline");
    html_rel("out/sim", "out/sim", rel, sizeof rel);
    assert_string_equal(rel, ".");
    html_rel("out/sim", "out/simulation/x", rel, sizeof rel);
    assert_string_equal(rel, "out/simulation/x");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape_url_rel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
