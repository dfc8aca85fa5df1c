/* engine/exec_emulate: the emulated H100 under the engine loop: each step lasts its
 * modeled time, and the schedule does not drift. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "engine/cost.h"
#include "engine/engine.h"
#include "engine/exec_emulate.h"

#include "engine_harness.h"

/* The emulated H100: each step lasts its modeled time, and the schedule does not drift. */
/* The median of 60 values (sorts them). */
static int64_t median_of_60(int64_t *v)
{
    for (int i = 1; i < 60; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            int64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[30];
}

/* One run of a 2,000-token prompt and 59 decodes on the emulated H100; every invariant
 * asserted here. Returns the schedule's restarts: steps that began more than ENGINE_SLIP_NS
 * after the previous one's deadline (the engine fell behind and restarted from now). */
static int64_t emulate_run(void)
{
    char err[ERR_LEN] = "";
    cost_gpu gpu;
    cost_arch arch;
    assert_int_equal(cost_gpu_find("h100-sxm", &gpu, err), 0);
    assert_int_equal(cost_arch_find("llama-3.1-8b", &arch, err), 0);
    cost_params cost;
    cost_params_init(&cost, &gpu, &arch);
    exec *x = exec_emulate_create(&cost, err);
    assert_non_null(x);
    assert_true(x->paced);
    FILE *log = tmpfile();
    harness h;
    sched_config sc = small_sched();
    sc.max_num_batched_tokens = 4096;
    sc.max_model_len = 8192;
    harness_start(&h, x, sc, log);
    engine_req *r = new_req(1, 2000, 60);
    r->seq.ignore_eos = true;
    engine_req *reqs[] = {r};
    got g[1];
    memset(g, 0, sizeof g);
    engine_submit(h.e, r);
    drain(&h, reqs, g, 1);
    harness_stop(&h);
    rewind(log);
    char line[256];
    assert_non_null(fgets(line, sizeof line, log));
    int64_t prev_deadline = -1, sum_modeled = 0, rows = 0, restarts = 0;
    int64_t late[64], unexplained[64];
    while (fgets(line, sizeof line, log)) {
        long long step, t0, t1, modeled, recorded;
        int dec, pre, n;
        assert_int_equal(sscanf(line, "%lld,%lld,%lld,%d,%d,%d,%lld,%lld", &step, &t0, &t1,
                                &dec, &pre, &n, &modeled, &recorded),
                         8);
        assert_true(rows < 64);
        /* Never early. */
        assert_true(t1 - t0 >= modeled);
        late[rows] = t1 - t0 - modeled;
        /* The engine's record of its late wake-up (late_ns) accounts for the step's excess:
         * the executor read the clock on waking, the engine a moment later. */
        assert_true(recorded >= 0 && recorded <= late[rows]);
        unexplained[rows] = late[rows] - recorded;
        /* No drift: each step starts exactly at the previous one's deadline, unless the
         * engine fell more than ENGINE_SLIP_NS behind (a busy machine) and restarted. */
        if (prev_deadline >= 0 && t0 != prev_deadline) {
            assert_true(t0 > prev_deadline + ENGINE_SLIP_NS);
            restarts++;
        }
        prev_deadline = t0 + modeled;
        sum_modeled += modeled;
        rows++;
    }
    assert_int_equal(rows, 60); /* one prefill step (samples the first token) + 59 decodes */
    assert_true(sum_modeled > 250 * CLOCK_NS_PER_MS); /* ~59 x 4.5 ms + a 2k-token prefill */
    /* Late by a wake-up: the median well under a millisecond even on a busy machine. */
    assert_true(median_of_60(late) < CLOCK_NS_PER_MS);
    assert_true(median_of_60(unexplained) < 100 * 1000); /* within 0.1 ms */
    fclose(log);
    free(r);
    return restarts;
}

/* At most 3 restarts in the 60 steps (5 %). Each restart is the engine's own recorded slip
 * (the step began more than ENGINE_SLIP_NS late and the schedule restarted from it); a run
 * whose only failure is more of them (a machine that descheduled the engine thread over
 * 2 ms more than 3 times in ~0.3 s: seen once under a full parallel suite) is measured once
 * more, once (docs/reference/tests.md, "The step-timing rule"). */
static void test_emulate_timing(void **state)
{
    (void)state;
    int64_t restarts = emulate_run();
    if (restarts > 3) {
        print_message("restarts %lld of 60 steps: measured once more\n", (long long)restarts);
        restarts = emulate_run();
    }
    assert_true(restarts <= 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emulate_timing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
