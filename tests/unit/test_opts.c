/* opts: the table-driven parser every subcommand uses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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
    {"users", "N", "users", set_users},
    {"verbose", NULL, "more output", set_verbose},
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forms),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_positional_and_find),
        cmocka_unit_test(test_help_lists_every_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
