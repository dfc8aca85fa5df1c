/* experiment/server_flags: one mapping of the scheduler setting to each server's flags. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "experiment/server_flags.h"
#include "workload/workload.h"

/* The server flags: one mapping for every command that prints them. */
static void test_server_flags(void **state)
{
    (void)state;
    workload_config wl;
    workload_default(&wl);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    experiment_print_server_flags(f, "  ", SCHED_CHUNKED, 512, &wl);
    experiment_print_server_flags(f, "  ", SCHED_MIXED, 16384, &wl);
    fclose(f);
    assert_non_null(strstr(buf, "--max-num-batched-tokens 512 --enable-chunked-prefill"));
    assert_non_null(strstr(buf, "--chunked-prefill-size 512 --enable-mixed-chunk"));
    assert_non_null(strstr(buf, "--max-num-batched-tokens 16384 --no-enable-chunked-prefill"));
    assert_non_null(strstr(buf, "--chunked-prefill-size -1 --max-prefill-tokens 16384"));
    assert_non_null(strstr(buf, "stallscope serve --policy mixed --max-num-batched-tokens 16384"));
    /* llama.cpp: a slot per stream plus the injector, each with room for the long prompt. */
    assert_non_null(strstr(buf, "--parallel 34 --ctx-size 307360"));
    /* TGI (issue 28, point 18): the prefill budget, a context that holds the long prompt, and
     * a concurrent-request limit over every stream (its default, 128, would refuse some). */
    assert_non_null(strstr(buf, "TGI:        text-generation-launcher --model-id MODEL "
                                "--max-batch-prefill-tokens 512 --max-input-tokens 9039 "
                                "--max-total-tokens 9040 --max-concurrent-requests 34   "
                                "(chunked: TGI 3 or later)"));
    assert_non_null(strstr(buf, "--max-batch-prefill-tokens 16384 --max-input-tokens 9039 "
                                "--max-total-tokens 9040 --max-concurrent-requests 34\n"));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
