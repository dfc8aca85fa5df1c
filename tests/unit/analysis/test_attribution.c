/* analysis/attribution: stalls.csv, byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "analysis/analysis.h"
#include "analysis/attribution.h"
#include "common/err.h"

#include "sketch_bound.h"

#define MS 1000000LL

/* stalls.csv written by hand is printf's "%lld,%d,%lld,%.6f,%s," and culprits, byte for
 * byte, at every length of gap (a whole number of ms, sub-ms, days). */
static void test_stalls_csv_bytes(void **state)
{
    (void)state;
    analysis_summary sum;
    memset(&sum, 0, sizeof sum);
    sum.n_stall_list = 3000;
    sum.stall_list = calloc((size_t)sum.n_stall_list, sizeof *sum.stall_list);
    assert_non_null(sum.stall_list);
    char *want = NULL;
    size_t want_len = 0;
    FILE *w = open_memstream(&want, &want_len);
    fputs("t_ns,user,request,gap_ms,cause,culprits\n", w);
    for (int64_t i = 0; i < sum.n_stall_list; i++) {
        analysis_stall *st = &sum.stall_list[i];
        const int64_t scale[] = {1, 1000, MS, 1000 * MS, 86400000 * MS};
        st->t_ns = (int64_t)rnd(1ULL << 50);
        st->gap_ns = (int64_t)rnd(1000) * scale[rnd(5)] + (int64_t)rnd(3) * (int64_t)rnd(MS);
        st->request = (int64_t)rnd(1000000);
        st->user = (int32_t)rnd(300) - 1;
        st->cause = (int32_t)rnd(ANALYSIS_N_CAUSES);
        st->n_culprits = (int32_t)rnd(6);
        for (int c = 0; c < ANALYSIS_MAX_CULPRITS; c++) {
            st->culprit[c] = (int64_t)rnd(1000000);
            st->culprit_prompt[c] = (int32_t)rnd(20000);
        }
        fprintf(w, "%lld,%d,%lld,%.6f,%s,", (long long)st->t_ns, st->user, (long long)st->request,
                (double)st->gap_ns / 1e6, analysis_cause_name((analysis_cause)st->cause));
        int named = st->n_culprits < ANALYSIS_MAX_CULPRITS ? st->n_culprits : ANALYSIS_MAX_CULPRITS;
        for (int c = 0; c < named; c++)
            fprintf(w, "%s%lld:%d", c ? ";" : "", (long long)st->culprit[c], st->culprit_prompt[c]);
        if (st->n_culprits > named)
            fprintf(w, ";+%d", st->n_culprits - named);
        fputc('\n', w);
    }
    fclose(w);
    char path[] = "/tmp/test_stalls_csv_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[ERR_LEN] = "";
    assert_int_equal(analysis_write_stalls_csv(&sum, path, err), 0);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *got = calloc(want_len + 2, 1);
    assert_non_null(got);
    assert_int_equal(fread(got, 1, want_len + 1, f), want_len);
    fclose(f);
    unlink(path);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(sum.stall_list);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalls_csv_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
