/* test_gate — --fail-if rules: parsing (operators, units, shares, refusals) and evaluation
 * against a summary whose values the test sets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "analysis/gate.h"
#include "common/err.h"

static void test_parse(void **state)
{
    (void)state;
    char err[ERR_LEN];
    gate_rules r;
    assert_int_equal(gate_parse("itl.max>200ms, stalls>0 ,requests.stalled_1s>=1%,"
                                "spike_ratio<=50,errors==0,ttft.p99!=1.5s",
                                &r, err),
                     0);
    assert_int_equal(r.n, 6);
    assert_int_equal(r.rule[0].op, GATE_GT);
    assert_true(r.rule[0].value == 200.0); /* ms */
    assert_string_equal(r.rule[1].text, "stalls>0");
    assert_int_equal(r.rule[2].op, GATE_GE);
    assert_true(r.rule[2].value == 0.01); /* 1 % */
    assert_int_equal(r.rule[3].op, GATE_LE);
    assert_int_equal(r.rule[4].op, GATE_EQ);
    assert_int_equal(r.rule[5].op, GATE_NE);
    assert_true(r.rule[5].value == 1500.0);
    assert_int_equal(gate_parse("", &r, err), 0);
    assert_int_equal(r.n, 0);

    struct {
        const char *text, *want;
    } bad[] = {
        {"itl.max>200", "give its unit"},    /* a time without its unit */
        {"itl.nope>1ms", "no metric 'itl.nope'"},
        {"stalls", "no operator"},
        {"stalls=>1", "no operator"},
        {"stalls>x", "not a number"},
        {"stalls>5%", "not a number"},       /* a percentage is for shares only */
        {"stalls>1,,errors>0", "an empty rule"},
        {">5", "not METRIC OP VALUE"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (gate_parse(bad[i].text, &r, err) != -1)
            fail_msg("'%s' was accepted", bad[i].text);
        if (!strstr(err, bad[i].want))
            fail_msg("'%s': error '%s' lacks '%s'", bad[i].text, err, bad[i].want);
    }
}

static void test_eval(void **state)
{
    (void)state;
    char err[ERR_LEN];
    json_t *s = json_pack("{s:{s:f, s:f}, s:{s:i}, s:f, s:i}", "itl_ms", "max", 130.0, "p50",
                          4.5, "stalls", "count", 12, "spike_ratio", 28.9, "errors", 0);
    assert_non_null(s);
    gate_rules r;
    /* The lesson's interference run: max 130 ms passes 200 ms; 12 stalls fail "stalls>0". */
    assert_int_equal(gate_parse("itl.max>200ms", &r, err), 0);
    assert_int_equal(gate_eval(&r, s, NULL), 0);
    assert_int_equal(gate_parse("itl.max>200ms,stalls>0", &r, err), 0);
    assert_int_equal(gate_eval(&r, s, NULL), 1);
    assert_int_equal(gate_parse("itl.max>=130ms,stalls>=12,errors!=0,spike_ratio<30", &r, err), 0);
    assert_int_equal(gate_eval(&r, s, NULL), 3); /* all but errors!=0 */
    /* A metric the summary lacks fails its rule. */
    assert_int_equal(gate_parse("ttft.p99>1s", &r, err), 0);
    assert_int_equal(gate_eval(&r, s, NULL), 1);
    /* The printed lines: each rule, its value, PASS or FAIL. */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_int_equal(gate_parse("itl.max>200ms,stalls>0", &r, err), 0);
    gate_eval(&r, s, out);
    fclose(out);
    assert_non_null(strstr(text, "fail-if itl.max > 200.0 ms: 130.0 ms  PASS\n"));
    assert_non_null(strstr(text, "fail-if stalls > 0: 12  FAIL\n"));
    free(text);
    json_decref(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_parse), cmocka_unit_test(test_eval)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
