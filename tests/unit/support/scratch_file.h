/* scratch_file — a small text file a unit test hands to a reader (a trace, a length table):
 * /tmp/<test>_<pid>_<name>, written whole. Include after <cmocka.h>. */
#ifndef STALLSCOPE_TEST_SCRATCH_FILE_H
#define STALLSCOPE_TEST_SCRATCH_FILE_H
#include <stdio.h>
#include <unistd.h>

static inline const char *scratch_file(char *path, size_t size, const char *test,
                                       const char *name, const char *text)
{
    snprintf(path, size, "/tmp/%s_%d_%s", test, (int)getpid(), name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    return path;
}

#endif
