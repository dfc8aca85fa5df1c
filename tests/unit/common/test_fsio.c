/* fsio: directories with their parents, files replaced whole or not at all. */
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
#include "common/fsio.h"

static char root[] = "/tmp/test_fsio_XXXXXX";

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

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_mkdirs(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256];
    snprintf(path, sizeof path, "%s/a/b/c", root);
    assert_int_equal(fsio_mkdirs(path, err), 0);
    assert_int_equal(fsio_mkdirs(path, err), 0); /* again: fine */
    assert_true(exists(path));
    /* A file in the way is named. */
    snprintf(path, sizeof path, "%s/file", root);
    assert_int_equal(fsio_write_atomic(path, "x", 1, err), 0);
    snprintf(path, sizeof path, "%s/file/sub", root);
    assert_int_equal(fsio_mkdirs(path, err), -1);
    assert_non_null(strstr(err, "file"));
    assert_int_equal(fsio_mkdirs("", err), -1);
}

static void test_write_atomic(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256], tmp[300];
    snprintf(path, sizeof path, "%s/out.txt", root);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(fsio_write_atomic(path, "first", 5, err), 0);
    assert_string_equal(slurp(path), "first");
    assert_int_equal(fsio_write_atomic(path, "second", 6, err), 0);
    assert_string_equal(slurp(path), "second");
    assert_false(exists(tmp));
    /* Into a directory that is not there: an error, nothing left behind. */
    snprintf(path, sizeof path, "%s/missing/out.txt", root);
    assert_int_equal(fsio_write_atomic(path, "x", 1, err), -1);
    assert_non_null(strstr(err, "missing"));
    /* A full disk at flush time: /dev/full takes the open and fails the write. */
    if (exists("/dev/full")) {
        fsio_file f;
        memset(&f, 0, sizeof f);
        f.f = fopen("/dev/full", "w");
        assert_non_null(f.f);
        snprintf(f.path, sizeof f.path, "%s/never", root);
        snprintf(f.tmp, sizeof f.tmp, "/dev/full");
        fputs("data that cannot land", f.f);
        assert_int_equal(fsio_commit(&f, err), -1);
        assert_non_null(strstr(err, "No space"));
        assert_false(exists(f.path));
    }
}

static void test_json_and_streams(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256], tmp[300];
    snprintf(path, sizeof path, "%s/x.json", root);
    json_t *j = json_pack("{s:i}", "a", 1);
    assert_int_equal(fsio_write_json(path, j, 0, err), 0);
    json_decref(j);
    assert_string_equal(slurp(path), "{\n  \"a\": 1\n}\n");
    assert_int_equal(fsio_write_json(path, NULL, 0, err), -1);

    /* A streamed file appears whole at commit, and an abandoned one not at all. */
    snprintf(path, sizeof path, "%s/rows.csv", root);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fsio_file f;
    assert_int_equal(fsio_create(&f, path, err), 0);
    fputs("a,b\n1,2\n", f.f);
    assert_false(exists(path));
    assert_int_equal(fsio_commit(&f, err), 0);
    assert_string_equal(slurp(path), "a,b\n1,2\n");
    assert_int_equal(fsio_create(&f, path, err), 0);
    fputs("half", f.f);
    fsio_abandon(&f);
    assert_false(exists(tmp));
    assert_string_equal(slurp(path), "a,b\n1,2\n");
    char joined[16];
    assert_int_equal(fsio_join(joined, sizeof joined, "dir", "name", err), 0);
    assert_string_equal(joined, "dir/name");
    assert_int_equal(fsio_join(joined, sizeof joined, "a-long-directory", "name", err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mkdirs),
        cmocka_unit_test(test_write_atomic),
        cmocka_unit_test(test_json_and_streams),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
