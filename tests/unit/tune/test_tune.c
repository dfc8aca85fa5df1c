/* test_tune — the tuner's judgement on hand-made points with known answers: feasibility and
 * the worst SLO, the Pareto front (dominance, identical figures), the choice (most output
 * throughput, a 1 % tie broken by the lower ITL p99.9), the ranking --verify takes, the
 * closest point and its binding SLO when none is feasible, the lists and the words. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/err.h"
#include "tune/tune.h"

/* A servable point with these figures; its SLO values are itl.p999 then ttft.p99. */
static tune_point servable(int budget, double throughput, double ttft_ms, double itl_ms)
{
    tune_point pt = {.policy = SCHED_CHUNKED, .max_num_batched_tokens = budget,
                     .max_num_seqs = 64, .servable = true};
    pt.predicted = (tune_figures){.output_throughput = throughput, .output_per_gpu = throughput,
                                  .ttft_p99_ms = ttft_ms,
                                  .itl_p50_ms = 5, .itl_p999_ms = itl_ms, .itl_max_ms = itl_ms};
    pt.slo_value[0] = itl_ms;
    pt.slo_value[1] = ttft_ms;
    return pt;
}

static void test_front_and_choice(void **state)
{
    (void)state;
    char err[ERR_LEN];
    gate_rules slo;
    assert_int_equal(tune_parse_slo("itl.p99.9<100ms,ttft.p99<2s", &slo, err), 0);
    tune_point pts[] = {
        servable(1, 1000, 100, 50),  /* 0 A: feasible, in the 1 % tie */
        servable(2, 1005, 150, 20),  /* 1 B: feasible, in the tie, the lowest ITL: chosen */
        servable(3, 1008, 90, 80),   /* 2 C: feasible, the most throughput of the feasible */
        servable(4, 1200, 3000, 10), /* 3 D: breaks ttft.p99 by 50 %, on the front */
        servable(5, 900, 200, 60),   /* 4 E: feasible, dominated by A */
        {.policy = SCHED_MIXED, .max_num_batched_tokens = 256, .max_num_seqs = 64,
         .why_not = "prompt of 8000 tokens exceeds the token budget"}, /* 5 F: cannot serve */
        servable(7, 1000, 100, 50),  /* 6 G: A's figures again */
    };
    tune_result res = {.points = pts, .n_points = 7};
    tune_analyse(&slo, &res);
    assert_int_equal(res.n_servable, 6);
    assert_int_equal(res.n_feasible, 5);
    const bool front[] = {true, true, true, true, false, false, true};
    for (int i = 0; i < 7; i++)
        assert_int_equal(pts[i].on_front, front[i]);
    assert_int_equal(res.n_front, 5);
    assert_int_equal(pts[6].same_as, 0);
    assert_int_equal(pts[0].same_as, -1);
    assert_false(pts[3].feasible);
    assert_int_equal(pts[3].worst_slo, 1);
    assert_true(fabs(pts[3].violation - 0.5) < 1e-12);
    assert_false(pts[5].feasible);
    assert_int_equal(res.choice, 1);
    assert_int_equal(res.closest, -1);
    /* --verify's order: the tie by ITL p99.9 (B, A, C), then E; G is A again, D breaks. */
    int ranked[10];
    assert_int_equal(tune_ranked(&res, ranked, 10), 4);
    assert_int_equal(ranked[0], 1);
    assert_int_equal(ranked[1], 0);
    assert_int_equal(ranked[2], 2);
    assert_int_equal(ranked[3], 4);
    assert_int_equal(tune_ranked(&res, ranked, 2), 2);

    /* Outside the tie, throughput decides: C at 1100 beats B's lower tail. */
    pts[2].predicted.output_throughput = pts[2].predicted.output_per_gpu = 1100;
    tune_analyse(&slo, &res);
    assert_int_equal(res.choice, 2);

    char why[400];
    tune_point_why(&slo, &pts[3], why, sizeof why);
    assert_string_equal(why, "ttft.p99 = 3,000 ms > 2,000 ms");
    tune_point_why(&slo, &pts[5], why, sizeof why);
    assert_non_null(strstr(why, "cannot serve: prompt of 8000 tokens"));
    tune_point_why(&slo, &pts[1], why, sizeof why);
    assert_string_equal(why, "");
}

static void test_none_feasible(void **state)
{
    (void)state;
    char err[ERR_LEN];
    gate_rules slo;
    assert_int_equal(tune_parse_slo("itl.p99.9<100ms, ttft.p99<2s", &slo, err), 0);
    tune_point pts[] = {
        servable(1, 1000, 1000, 150),  /* itl 50 % past */
        servable(2, 1000, 2500, 120),  /* itl 20 %, ttft 25 % past: worst 25 % -> closest */
        servable(3, 2000, 100, 2412),  /* itl 2312 % past */
    };
    tune_result res = {.points = pts, .n_points = 3};
    tune_analyse(&slo, &res);
    assert_int_equal(res.n_feasible, 0);
    assert_int_equal(res.choice, -1);
    assert_int_equal(res.closest, 1);
    assert_int_equal(res.binding_slo, 1);
    int ranked[3];
    assert_int_equal(tune_ranked(&res, ranked, 3), 0);
    char why[400];
    tune_point_why(&slo, &pts[2], why, sizeof why);
    assert_string_equal(why, "itl.p99.9 = 2,412 ms > 100 ms");
    /* A value the run did not give breaks its SLO. */
    pts[0] = servable(1, 1000, 100, 50);
    pts[0].slo_value[1] = NAN;
    tune_analyse(&slo, &res);
    assert_false(pts[0].feasible);
    assert_int_equal(pts[0].worst_slo, 1);
}

static void test_lists(void **state)
{
    (void)state;
    char err[ERR_LEN];
    tune_config *tc = calloc(1, sizeof *tc);
    assert_non_null(tc);
    assert_int_equal(tune_defaults(tc, err), 0);
    assert_int_equal(tc->n_policies * tc->n_budgets * tc->n_max_num_seqs, 105);
    assert_int_equal(tc->budgets[0], 256);
    assert_int_equal(tc->budgets[tc->n_budgets - 1], 16384);
    assert_int_equal(tc->slo.n, 2);
    assert_string_equal(gate_rule_metric(&tc->slo.rule[0]), "itl.p999"); /* p99.9 alias */
    assert_int_equal(tune_parse_budgets("512, 2048,16k", tc, err), 0); /* k: 1000, as elsewhere */
    assert_int_equal(tc->n_budgets, 3);
    assert_int_equal(tc->budgets[1], 2048);
    assert_int_equal(tc->budgets[2], 16000);
    assert_int_equal(tune_parse_policies("chunked,prefill-first", tc, err), 0);
    assert_int_equal(tc->n_policies, 2);
    assert_int_equal(tc->policies[1], SCHED_PREFILL_FIRST);
    assert_int_equal(tune_parse_max_num_seqs("32", tc, err), 0);
    assert_int_equal(tc->max_num_seqs[0], 32);
    /* Prefix caching: the base's setting alone by default (the lesson shares no prefix);
     * a list searches each. */
    tune_default_prefix_caching(tc, false);
    assert_int_equal(tc->n_prefix_caching, 1);
    assert_false(tc->prefix_caching[0]);
    assert_int_equal(tune_parse_prefix_caching("on, off", tc, err), 0);
    assert_int_equal(tc->n_prefix_caching, 2);
    assert_true(tc->prefix_caching[0]);
    assert_false(tc->prefix_caching[1]);
    tune_default_prefix_caching(tc, false); /* given: kept */
    assert_int_equal(tc->n_prefix_caching, 2);
    assert_int_equal(tune_parse_prefix_caching("on,on", tc, err), -1);
    assert_non_null(strstr(err, "twice"));
    assert_int_equal(tune_parse_prefix_caching("yes", tc, err), -1);
    assert_non_null(strstr(err, "not off or on"));
    tune_point pc = {.policy = SCHED_CHUNKED, .max_num_batched_tokens = 2048,
                     .max_num_seqs = 64, .prefix_caching = true};
    char pc_name[64];
    tune_point_name(&pc, pc_name, sizeof pc_name);
    assert_string_equal(pc_name, "chunked/2048/64+pc");
    experiment_config *pc_cfg = calloc(1, sizeof *pc_cfg);
    assert_non_null(pc_cfg);
    tune_point_config(tc, &pc, pc_cfg);
    assert_true(pc_cfg->sched.prefix_caching);
    free(pc_cfg);
    const struct {
        int which; /* 0 budgets, 1 policies, 2 max-num-seqs, 3 slo */
        const char *text, *want;
    } bad[] = {
        {0, "512,512", "given twice"}, {0, "512,,1k", "empty"},   {0, "0", "out of range"},
        {0, "abc", "not a count"},     {0, "", "empty list"},     {1, "mixed,fast", "unknown"},
        {1, "mixed,mixed", "twice"},   {2, "-4", "--max-num-seqs"}, {3, "", "no SLO"},
        {3, "itl.p99.9<<1ms", "--slo"}, {3, "itl.p99.9<100", "unit"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gate_rules slo;
        int rc = bad[i].which == 0   ? tune_parse_budgets(bad[i].text, tc, err)
                 : bad[i].which == 1 ? tune_parse_policies(bad[i].text, tc, err)
                 : bad[i].which == 2 ? tune_parse_max_num_seqs(bad[i].text, tc, err)
                                     : tune_parse_slo(bad[i].text, &slo, err);
        if (rc != -1 || !strstr(err, bad[i].want))
            fail_msg("'%s': rc %d, err '%s' (wanted '%s')", bad[i].text, rc, err, bad[i].want);
    }
    tune_point pt = {.policy = SCHED_CHUNKED, .max_num_batched_tokens = 2048, .max_num_seqs = 64};
    char name[64];
    tune_point_name(&pt, name, sizeof name);
    assert_string_equal(name, "chunked/2048/64");
    free(tc);
}

/* --disaggregate: the splits parsed (and refused), named, counted in GPUs, and judged per
 * GPU: a 2-GPU split with more output in all loses to one instance with more per GPU, and
 * wins when its per-GPU figure is the best. */
static void test_disaggregate(void **state)
{
    (void)state;
    char err[ERR_LEN];
    tune_config *tc = calloc(1, sizeof *tc);
    assert_non_null(tc);
    assert_int_equal(tune_defaults(tc, err), 0);
    assert_int_equal(tc->n_setups, 1);
    assert_int_equal(tc->setups[0].prefill, 0);
    assert_int_equal(tune_parse_disaggregate("1:1, 2:1", "pcie5", tc, err), 0);
    assert_int_equal(tc->n_setups, 3);
    assert_int_equal(tc->setups[2].prefill, 2);
    assert_int_equal(tc->setups[2].decode, 1);
    assert_string_equal(tc->setups[1].link, "pcie5");
    const struct {
        const char *splits, *link, *want;
    } bad[] = {{"1:1,1:1", NULL, "twice"}, {"0:1", NULL, "--disaggregate"},
               {"1:1", "carrier-pigeon", "--disaggregate"}, {"", NULL, "empty list"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (tune_parse_disaggregate(bad[i].splits, bad[i].link, tc, err) != -1 ||
            !strstr(err, bad[i].want))
            fail_msg("'%s': err '%s' (wanted '%s')", bad[i].splits, err, bad[i].want);
    assert_int_equal(tune_parse_disaggregate("1:1", NULL, tc, err), 0);
    assert_string_equal(tc->setups[1].link, "nvlink");

    gate_rules slo;
    assert_int_equal(tune_parse_slo("itl.p99.9<100ms,ttft.p99<2s", &slo, err), 0);
    tune_point pts[] = {servable(256, 1000, 100, 50), servable(8192, 1800, 80, 10)};
    pts[1].disagg = tc->setups[1];
    pts[1].predicted.output_per_gpu = 900; /* 1,800 tok/s on 2 GPUs */
    assert_int_equal(tune_point_gpus(&pts[0]), 1);
    assert_int_equal(tune_point_gpus(&pts[1]), 2);
    char name[64];
    tune_point_name(&pts[1], name, sizeof name);
    assert_string_equal(name, "1P:1D chunked/8192/64");
    tune_result res = {.points = pts, .n_points = 2};
    tune_analyse(&slo, &res);
    assert_int_equal(res.n_feasible, 2);
    assert_int_equal(res.choice, 0); /* 1,000 per GPU beats 900 */
    assert_true(pts[0].on_front && pts[1].on_front); /* the split's tail is lower */
    pts[1].predicted.output_per_gpu = 1100;
    tune_analyse(&slo, &res);
    assert_int_equal(res.choice, 1);
    assert_false(pts[0].on_front); /* dominated per GPU, in TTFT and in ITL */
    free(tc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_front_and_choice),
        cmocka_unit_test(test_none_feasible),
        cmocka_unit_test(test_lists),
        cmocka_unit_test(test_disaggregate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
