/* experiment/outdir: a run owns its directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/err.h"
#include "experiment/outdir.h"

static bool present(const char *dir, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static void touch(const char *dir, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
}

/* A run owns its directory: new or empty is taken, an earlier run needs --force, a stranger's
 * files are never removed. */
static void test_claim_dir(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", root[] = "/tmp/test_claim_XXXXXX", dir[128], sub[160];
    assert_non_null(mkdtemp(root));
    snprintf(dir, sizeof dir, "%s/out/run", root);
    assert_int_equal(experiment_claim_dir(dir, false, err), 0); /* absent: created */
    assert_true(present(dir, "."));
    assert_int_equal(experiment_claim_dir(dir, false, err), 0); /* empty: fine */
    snprintf(sub, sizeof sub, "%s/baseline", dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    touch(sub, "tokens.csv");
    snprintf(sub, sizeof sub, "%s/point-12", dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    touch(dir, "report.html");
    touch(dir, "comparison.json.tmp");
    assert_int_equal(experiment_claim_dir(dir, false, err), -1);
    assert_non_null(strstr(err, "already holds an earlier run"));
    assert_non_null(strstr(err, "--force"));
    assert_true(present(dir, "baseline/tokens.csv"));
    assert_int_equal(experiment_claim_dir(dir, true, err), 0);
    assert_false(present(dir, "baseline"));
    assert_false(present(dir, "point-12"));
    assert_false(present(dir, "report.html"));
    assert_false(present(dir, "comparison.json.tmp"));
    /* Someone's own file: refused, with or without --force, and nothing removed. */
    touch(dir, "report.html");
    touch(dir, "notes.txt");
    assert_int_equal(experiment_claim_dir(dir, true, err), -1);
    assert_non_null(strstr(err, "notes.txt"));
    assert_true(present(dir, "report.html"));
    touch(dir, "point-x");
    /* --no-inject's run is ours too (OUT/traffic): --force replaces it. */
    char fresh[120];
    snprintf(fresh, sizeof fresh, "%s/fresh", root);
    snprintf(sub, sizeof sub, "%s/traffic", fresh);
    assert_int_equal(experiment_claim_dir(fresh, false, err), 0);
    assert_int_equal(mkdir(sub, 0777), 0);
    touch(sub, "tokens.csv");
    assert_int_equal(experiment_claim_dir(fresh, false, err), -1);
    assert_non_null(strstr(err, "already holds an earlier run"));
    assert_int_equal(experiment_claim_dir(fresh, true, err), 0);
    assert_false(present(fresh, "traffic"));
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

/* Without --out: the default directory while it is free, else the next free name beside it
 * (an empty one is free), never an earlier run's; with --force the default itself. */
static void test_default_dir(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", root[] = "/tmp/test_default_XXXXXX", dir[128], chosen[200],
         want[200];
    assert_non_null(mkdtemp(root));
    snprintf(dir, sizeof dir, "%s/out/sim", root);
    assert_int_equal(experiment_default_dir(dir, false, chosen, sizeof chosen, err), 0);
    assert_string_equal(chosen, dir); /* absent */
    assert_false(present(dir, "."));  /* nothing created */
    assert_int_equal(experiment_claim_dir(dir, false, err), 0);
    assert_int_equal(experiment_default_dir(dir, false, chosen, sizeof chosen, err), 0);
    assert_string_equal(chosen, dir); /* empty */
    touch(dir, "comparison.json");
    assert_int_equal(experiment_default_dir(dir, false, chosen, sizeof chosen, err), 0);
    snprintf(want, sizeof want, "%s-2", dir);
    assert_string_equal(chosen, want);
    assert_int_equal(experiment_claim_dir(chosen, false, err), 0);
    touch(chosen, "comparison.json");
    snprintf(want, sizeof want, "%s-3", dir);
    assert_int_equal(mkdir(want, 0777), 0); /* empty: taken */
    assert_int_equal(experiment_default_dir(dir, false, chosen, sizeof chosen, err), 0);
    assert_string_equal(chosen, want);
    touch(want, "notes.txt"); /* someone's files: passed over too */
    assert_int_equal(experiment_default_dir(dir, false, chosen, sizeof chosen, err), 0);
    snprintf(want, sizeof want, "%s-4", dir);
    assert_string_equal(chosen, want);
    assert_int_equal(experiment_default_dir(dir, true, chosen, sizeof chosen, err), 0);
    assert_string_equal(chosen, dir); /* --force: the default, replaced by the claim */
    /* A name that does not fit: an error, never a cut name. */
    assert_int_equal(experiment_default_dir(dir, false, chosen, strlen(dir) + 2, err), -1);
    assert_non_null(strstr(err, "too long"));
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claim_dir),
        cmocka_unit_test(test_default_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
