/* opts: the table-driven parser every subcommand uses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "common/opts.h"
#include "common/units.h"

typedef struct {
    int64_t users;
    int verbose;
} ctx_t;

static int set_users(void *c, const char *v, char *err)
{
    return units_parse_count(v, &((ctx_t *)c)->users, err);
}
static int set_verbose(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((ctx_t *)c)->verbose++;
    return 0;
}

static const opts_spec specs[] = {
    OPTS_FN("users", "N", "users", set_users),
    OPTS_FN("verbose", NULL, "more output", set_verbose),
};

static int parse(ctx_t *ctx, int argc, char **argv, char *err, char **pos, int *n_pos)
{
    opts_group g = {"test", specs, 2, ctx};
    return opts_parse(argc, argv, &g, 1, pos, pos ? 4 : 0, n_pos, err);
}

static void test_forms(void **state)
{
    (void)state;
    char err[ERR_LEN];
    ctx_t ctx = {0, 0};
    char *argv[] = {"--users", "8k", "--verbose", "--users=12"};
    assert_int_equal(parse(&ctx, 4, argv, err, NULL, NULL), 0);
    assert_int_equal(ctx.users, 12); /* last one wins */
    assert_int_equal(ctx.verbose, 1);
}

static void test_errors(void **state)
{
    (void)state;
    char err[ERR_LEN];
    ctx_t ctx = {0, 0};
    char *unknown[] = {"--userz", "3"};
    assert_int_equal(parse(&ctx, 2, unknown, err, NULL, NULL), -1);
    assert_non_null(strstr(err, "unknown option --userz"));
    char *missing[] = {"--users"};
    assert_int_equal(parse(&ctx, 1, missing, err, NULL, NULL), -1);
    assert_non_null(strstr(err, "needs a value"));
    char *badval[] = {"--users", "8q"};
    assert_int_equal(parse(&ctx, 2, badval, err, NULL, NULL), -1);
    assert_non_null(strstr(err, "--users: '8q'"));
    char *flagval[] = {"--verbose=1"};
    assert_int_equal(parse(&ctx, 1, flagval, err, NULL, NULL), -1);
    char *positional[] = {"dir"};
    assert_int_equal(parse(&ctx, 1, positional, err, NULL, NULL), -1);
}

static void test_positional_and_find(void **state)
{
    (void)state;
    char err[ERR_LEN];
    ctx_t ctx = {0, 0};
    char *pos[4];
    int n = 0;
    char *argv[] = {"out", "--users", "3", "more"};
    assert_int_equal(parse(&ctx, 4, argv, err, pos, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(pos[0], "out");
    assert_string_equal(pos[1], "more");
    char *scan[] = {"--x", "--preset", "lesson-1s", "--preset=other"};
    assert_string_equal(opts_find(4, scan, "preset"), "other");
    assert_null(opts_find(1, scan, "preset"));
    char *help[] = {"--users", "3", "-h"};
    assert_true(opts_wants_help(3, help));
    assert_false(opts_wants_help(2, help));
}

static void test_help_lists_every_option(void **state)
{
    (void)state;
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    ctx_t ctx;
    opts_group g = {"test group", specs, 2, &ctx};
    opts_print_help(f, "prog [options]", "Does things.", &g, 1);
    fclose(f);
    assert_non_null(strstr(buf, "usage: prog [options]"));
    assert_non_null(strstr(buf, "test group:"));
    assert_non_null(strstr(buf, "--users N"));
    assert_non_null(strstr(buf, "--verbose"));
}

/* ---- typed specs: one parser per kind, the field named by the table ---------------------- */

typedef struct typed {
    bool flag;
    char name[8];
    int count;
    int64_t big;
    int64_t wait_ns;
    double share;
    double rate;
} typed;

static const opts_spec typed_specs[] = {
    OPTS_FLAG("flag", "a flag", typed, flag),
    OPTS_STRING("name", "S", "a name", typed, name),
    OPTS_INT("count", "N", "a count", typed, count, 1, 100),
    OPTS_INT64("big", "N", "a big count", typed, big, 0, (int64_t)1 << 40),
    OPTS_DURATION("wait", "DUR", "a wait", typed, wait_ns, 1000000, 60000000000LL),
    OPTS_FRACTION("share", "F", "a share", typed, share),
    OPTS_POSITIVE("rate", "R", "a rate", typed, rate),
};

static int parse_typed(typed *t, int argc, char **argv, char *err)
{
    opts_group g = {"typed", typed_specs, OPTS_COUNT(typed_specs), t};
    return opts_parse(argc, argv, &g, 1, NULL, 0, NULL, err);
}

static void test_typed_fields(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    typed t;
    memset(&t, 0, sizeof t);
    char *argv[] = {"--flag", "--name=abc", "--count", "8", "--big", "2M", "--wait", "250ms",
                    "--share", "0.5", "--rate", "989T"};
    assert_int_equal(parse_typed(&t, 12, argv, err), 0);
    assert_true(t.flag);
    assert_string_equal(t.name, "abc");
    assert_int_equal(t.count, 8);
    assert_int_equal(t.big, 2000000);
    assert_int_equal(t.wait_ns, 250000000LL);
    assert_float_equal(t.share, 0.5, 0);
    assert_float_equal(t.rate, 989e12, 1);
    opts_group g = {"typed", typed_specs, OPTS_COUNT(typed_specs), &t};
    assert_int_equal(opts_check(&g, 1, err), 0);
    /* opts_apply: one option by name, as the sweep applies a varied value. */
    assert_int_equal(opts_apply(&g, 1, "count", "99", err), 0);
    assert_int_equal(t.count, 99);
    assert_int_equal(opts_apply(&g, 1, "flag", "1", err), -1);
    assert_int_equal(opts_apply(&g, 1, "nope", "1", err), -1);
    assert_non_null(strstr(err, "unknown option --nope"));
}

static void test_typed_errors(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    typed t;
    memset(&t, 0, sizeof t);
    struct {
        const char *arg, *want;
    } bad[] = {
        {"--name=toolongname", "--name: 'toolongname' is empty or longer than 7 bytes"},
        {"--name=", "--name:"},
        {"--count=0", "--count: '0' is out of range [1, 100]"},
        {"--count=101", "out of range"},
        {"--count=1.5", "not a whole number"},
        {"--wait=50", "needs a unit"},        /* a bare number is no duration */
        {"--wait=500us", "--wait: '500us' is out of range"},
        {"--share=0", "must be in (0, 1]"},
        {"--share=1.01", "must be in (0, 1]"},
        {"--rate=-3", "must be positive"},
        {"--flag=yes", "takes no value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[] = {(char *)bad[i].arg};
        err[0] = '\0';
        assert_int_equal(parse_typed(&t, 1, argv, err), -1);
        if (!strstr(err, bad[i].want))
            fail_msg("%s: error '%s' lacks '%s'", bad[i].arg, err, bad[i].want);
    }
    /* Nothing was stored by a refused value. */
    assert_int_equal(t.count, 0);
    assert_int_equal(t.wait_ns, 0);
}

/* A table that points a kind at a field of another size is caught before any user. */
static void test_check_catches_wrong_fields(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    typed t;
    static const opts_spec wrong_int[] = {OPTS_INT("n", "N", "x", typed, big, 0, 1)};
    static const opts_spec wrong_dur[] = {OPTS_DURATION("d", "DUR", "x", typed, count, 0, 1)};
    static const opts_spec wrong_flag[] = {OPTS_FLAG("f", "x", typed, share)};
    static const opts_spec flag_with_value[] = {
        {"g", "V", "x", NULL, OPTS_SET_FLAG, offsetof(typed, flag), sizeof(bool), 0, 0}};
    static const opts_spec empty_range[] = {OPTS_INT("r", "N", "x", typed, count, 5, 1)};
    const opts_spec *tables[] = {wrong_int, wrong_dur, wrong_flag, flag_with_value, empty_range};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        opts_group g = {"bad", tables[i], 1, &t};
        assert_int_equal(opts_check(&g, 1, err), -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_typed_fields),
        cmocka_unit_test(test_typed_errors),
        cmocka_unit_test(test_check_catches_wrong_fields),
        cmocka_unit_test(test_forms),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_positional_and_find),
        cmocka_unit_test(test_help_lists_every_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
