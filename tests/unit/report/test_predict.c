/* report/predict: the cost model's prediction beside what a run measured. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/err.h"
#include "engine/cost.h"
#include "experiment/config.h"
#include "report/load.h"
#include "report/predict.h"

#include "report_runs.h"

static void test_predict(void **state)
{
    (void)state;
    experiment_config cfg;
    small_config(&cfg, EXPERIMENT_SIM, 4000, SCHED_MIXED, 16384, 0);
    char err[ERR_LEN] = "";
    report_prediction p;

    /* A simulation on the reference profile: nothing to predict twice. */
    report_run run = loaded(&cfg);
    assert_int_equal(report_predict(&run, false, &p, err), 0);
    assert_false(p.ok);
    assert_non_null(strstr(p.why, "itself"));
    assert_int_equal(report_predict(&run, true, &p, err), 0);
    assert_false(p.ok);
    assert_non_null(strstr(p.why, "reference"));

    /* A remote server without --hardware: no model for it, and no H100 in its place. */
    experiment_config remote;
    experiment_defaults(&remote, EXPERIMENT_REMOTE);
    remote.wl = cfg.wl;
    snprintf(remote.client.target, sizeof remote.client.target, "http://127.0.0.1:1");
    assert_int_equal(experiment_resolve(&remote, err), 0);
    run = loaded(&remote);
    assert_int_equal(report_predict(&run, false, &p, err), 0);
    assert_false(p.ok);
    assert_non_null(strstr(p.why, "no model for it"));
    assert_int_equal(report_predict(&run, true, &p, err), 0);
    assert_false(p.ok);
    assert_non_null(strstr(p.why, "no reference"));

    /* With --hardware (a server's profile: its step model alone): that profile predicts it. */
    char profile[] = "/tmp/test_html_profile_XXXXXX";
    const int fd = mkstemp(profile);
    assert_true(fd >= 0);
    static const char server_profile[] =
        "{\"format\": \"stallscope-hardware-profile\", \"version\": 2, \"name\": \"gpu-box\", "
        "\"source\": \"target\", \"target\": \"http://127.0.0.1:1\", \"mem_bytes\": 8e10, "
        "\"step_model\": {\"model\": \"llama-3.1-8b\", \"step_ns\": 5e6, \"seq_ns\": 1e5, "
        "\"ctx_ns\": 10, \"token_ns\": 2e4, \"pair_ns\": 0.002}}";
    assert_true(write(fd, server_profile, sizeof server_profile - 1) == (ssize_t)(sizeof server_profile - 1));
    close(fd);
    snprintf(remote.device.hardware, sizeof remote.device.hardware, "%s", profile);
    remote.device.model[0] = '\0';
    run = loaded(&remote);
    assert_int_equal(report_predict(&run, false, &p, err), 0);
    assert_true(p.ok);
    assert_non_null(strstr(p.profile, "gpu-box llama-3.1-8b"));
    assert_int_equal(p.pair.interference.n_injections, 3);
    assert_string_equal(p.caveat, ""); /* the run's own profile: nothing to excuse */
    /* its spike: the fitted 4,000-token step beside 4 decodes (contexts from the workload) */
    cost_gpu gpu;
    cost_arch arch;
    assert_int_equal(cost_gpu_from_profile(profile, &gpu, err), 0);
    assert_int_equal(cost_arch_find("llama-3.1-8b", &arch, err), 0);
    experiment_config fitted = cfg;
    cost_params_init(&fitted.cost, &gpu, &arch);
    assert_true(cost_fit_applies(&fitted.cost));
    assert_float_equal(p.pair.interference.itl_ms.max / experiment_model_spike_ms(&fitted, 4000),
                       1.0, 0.03);
    report_prediction_free(&p);
    unlink(profile);

    /* The cpu engine without --hardware: the catalog's nominal cpu predicts it, and the
     * prediction says that profile is another machine's and how to calibrate this one. */
    experiment_config cpu;
    experiment_defaults(&cpu, EXPERIMENT_CPU);
    cpu.wl = cfg.wl;
    assert_int_equal(experiment_resolve(&cpu, err), 0);
    run = loaded(&cpu);
    assert_int_equal(report_predict(&run, false, &p, err), 0);
    assert_true(p.ok);
    assert_non_null(strstr(p.caveat, "nominal cpu profile"));
    assert_non_null(strstr(p.caveat, "stallscope calibrate --out hw.json"));
    report_prediction_free(&p);

    /* No configuration: says why, predicts nothing. */
    memset(&run, 0, sizeof run);
    snprintf(run.config_why, sizeof run.config_why, "no config.json beside the token log");
    assert_int_equal(report_predict(&run, true, &p, err), 0);
    assert_false(p.ok);
    assert_non_null(strstr(p.why, "no config.json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_predict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
