/* workload: the lesson preset, the injector's absolute schedule, seeded draws, shards, the
 * length distributions (dist.c), and the open loop's arrivals (plan.c). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/rng.h"
#include "workload/workload.h"

#include "scratch_file.h"

static void test_lesson_preset(void **state)
{
    (void)state;
    char err[ERR_LEN];
    workload_config cfg;
    workload_default(&cfg);
    assert_int_equal(workload_preset(&cfg, "lesson", err), 0);
    assert_int_equal(cfg.users, 32);
    assert_int_equal(cfg.prompt_tokens, 8000);
    assert_int_equal(cfg.duration_ns, 40 * CLOCK_NS_PER_S);
    int64_t t[16];
    int n = workload_injection_times(&cfg, t, 16);
    assert_int_equal(n, 4);
    assert_int_equal(t[0], 5 * CLOCK_NS_PER_S);
    assert_int_equal(t[1], 15 * CLOCK_NS_PER_S);
    assert_int_equal(t[2], 25 * CLOCK_NS_PER_S);
    assert_int_equal(t[3], 35 * CLOCK_NS_PER_S);
    assert_int_equal(workload_check(&cfg, err), 0);
}

static void test_one_second_preset(void **state)
{
    (void)state;
    char err[ERR_LEN];
    workload_config cfg;
    workload_default(&cfg);
    assert_int_equal(workload_preset(&cfg, "lesson-1s", err), 0);
    int64_t t[64];
    int n = workload_injection_times(&cfg, t, 64);
    assert_int_equal(n, 40); /* 0.5, 1.5, ..., 39.5 s */
    assert_int_equal(t[0], 500 * CLOCK_NS_PER_MS);
    assert_int_equal(t[39], 39500 * CLOCK_NS_PER_MS);
}

static void test_unknown_preset(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    workload_config cfg;
    workload_default(&cfg);
    assert_int_equal(workload_preset(&cfg, "lessen", err), -1);
    assert_non_null(strstr(err, "lessen"));
    assert_non_null(strstr(err, "lesson"));
}

static void test_baseline_has_no_injections(void **state)
{
    (void)state;
    workload_config cfg;
    workload_default(&cfg);
    cfg.inject = false;
    int64_t t[4];
    assert_int_equal(workload_injection_times(&cfg, t, 4), 0);
}

static void test_check_rejects(void **state)
{
    (void)state;
    char err[ERR_LEN];
    workload_config cfg;
    workload_default(&cfg);
    cfg.duration_ns = 0;
    assert_int_equal(workload_check(&cfg, err), -1);
    workload_default(&cfg);
    cfg.inject_every_ns = -1;
    assert_int_equal(workload_check(&cfg, err), -1);
    workload_default(&cfg);
    cfg.answer_len.a = 10, cfg.answer_len.b = 5;
    assert_int_equal(workload_check(&cfg, err), -1);
    workload_default(&cfg);
    cfg.prompt_tokens = 0;
    assert_int_equal(workload_check(&cfg, err), -1);
}

static void test_bg_draws_are_seeded_and_spread(void **state)
{
    (void)state;
    workload_config a, b;
    workload_default(&a);
    workload_default(&b);
    /* Same (seed, user, k): same draw, whatever the order of calls. */
    workload_bg_request x = workload_bg(&a, 3, 7);
    (void)workload_bg(&a, 1, 1);
    workload_bg_request y = workload_bg(&b, 3, 7);
    assert_int_equal(x.prompt_tokens, y.prompt_tokens);
    assert_int_equal(x.max_tokens, y.max_tokens);
    /* In range, and not all equal across users (restarts do not synchronise). */
    int distinct = 0, first = workload_bg(&a, 0, 0).max_tokens;
    for (int u = 0; u < 32; u++) {
        workload_bg_request r = workload_bg(&a, u, 0);
        assert_in_range(r.prompt_tokens, a.prompt_len.a, a.prompt_len.b);
        assert_in_range(r.max_tokens, a.answer_len.a, a.answer_len.b);
        distinct += r.max_tokens != first;
    }
    assert_true(distinct > 16);
    b.seed = 2;
    int differ = 0;
    for (int u = 0; u < 32; u++)
        differ += workload_bg(&a, u, 0).max_tokens != workload_bg(&b, u, 0).max_tokens;
    assert_true(differ > 16);
}

static void test_poisson_schedule(void **state)
{
    (void)state;
    workload_config cfg;
    workload_default(&cfg);
    cfg.inject_poisson = true;
    cfg.inject_at_ns = 0;
    cfg.inject_every_ns = CLOCK_NS_PER_S;
    cfg.duration_ns = 2000 * CLOCK_NS_PER_S;
    static int64_t t[WORKLOAD_MAX_INJECTIONS];
    int n = workload_injection_times(&cfg, t, WORKLOAD_MAX_INJECTIONS);
    /* Mean gap 1 s over 2000 s: about 2000 arrivals (sd ~45). */
    assert_in_range(n, 1800, 2200);
    for (int i = 1; i < n; i++)
        assert_true(t[i] >= t[i - 1]);
    assert_true(t[n - 1] < cfg.duration_ns);
}

static void test_prompt_ids_unique_per_injection(void **state)
{
    (void)state;
    workload_config cfg;
    workload_default(&cfg);
    int32_t a[64], b[64];
    workload_prompt_ids(&cfg, 1, 0, a, 64, 128256);
    workload_prompt_ids(&cfg, 1, 1, b, 64, 128256);
    assert_true(memcmp(a, b, sizeof a) != 0);
    for (int i = 0; i < 64; i++)
        assert_in_range(a[i], 100, 128255);
    int32_t c[64];
    workload_prompt_ids(&cfg, 1, 0, c, 64, 128256);
    assert_memory_equal(a, c, sizeof a);
}

/* Shards split the users round-robin: each user runs in exactly one shard (u mod N), the
 * counts add up to the whole, the injector runs in shard 0 only; unsharded runs all. */
static void test_shard_rule(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    workload_config cfg;
    workload_default(&cfg);
    cfg.users = 10;
    for (int u = 0; u < cfg.users; u++)
        assert_true(workload_shard_has_user(&cfg, u));
    assert_true(workload_shard_has_injector(&cfg));
    assert_int_equal(workload_shard_users(&cfg, 0), 10);
    const int expect_users[4] = {3, 3, 2, 2};
    int runs_in[10] = {0}, total = 0;
    cfg.shard.count = 4;
    for (int i = 0; i < 4; i++) {
        cfg.shard.index = i;
        assert_int_equal(workload_check(&cfg, err), 0);
        int mine = 0;
        for (int u = 0; u < cfg.users; u++)
            if (workload_shard_has_user(&cfg, u)) {
                assert_int_equal(u % 4, i);
                runs_in[u]++;
                mine++;
            }
        assert_int_equal(mine, expect_users[i]);
        assert_int_equal(workload_shard_users(&cfg, i), mine);
        assert_int_equal(workload_shard_has_injector(&cfg), i == 0);
        total += mine;
    }
    assert_int_equal(total, cfg.users);
    for (int u = 0; u < cfg.users; u++)
        assert_int_equal(runs_in[u], 1);
    assert_int_equal(workload_shard_users(&cfg, 4), 0); /* no such shard */

    cfg.shard.index = 4; /* index out of range */
    assert_int_equal(workload_check(&cfg, err), -1);
    assert_non_null(strstr(err, "between 0 and 3"));
    cfg.shard.index = 0;
    cfg.shard.count = 11; /* more shards than users: some would run nothing */
    assert_int_equal(workload_check(&cfg, err), -1);
    assert_non_null(strstr(err, "11 shards for 10 users"));
    cfg.shard.count = -1;
    assert_int_equal(workload_check(&cfg, err), -1);
}

/* ---- length distributions --------------------------------------------------------------- */

static void test_dist_parse_and_format(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", text[320];
    workload_dist d;
    const char *ok[] = {"fixed:512", "uniform:32-128", "lognormal:1730,5696,16000",
                        "empirical:/tmp/x.csv@len"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        if (workload_dist_parse(ok[i], &d, err) != 0)
            fail_msg("%s: %s", ok[i], err);
        workload_dist_format(&d, text, sizeof text);
        assert_string_equal(text, ok[i]); /* the format reads back as written */
    }
    assert_int_equal(workload_dist_parse("uniform:1k..2k", &d, err), 0);
    assert_int_equal(d.a, 1000);
    assert_int_equal(d.b, 2000);
    assert_int_equal(workload_dist_parse("32..128", &d, err), 0); /* the older flags' form */
    assert_int_equal(d.kind, WORKLOAD_DIST_UNIFORM);
    assert_int_equal(d.a, 32);
    assert_int_equal(d.b, 128);
    /* lognormal without MAX: the 99.9th percentile, above P90 */
    assert_int_equal(workload_dist_parse("lognormal:100,200", &d, err), 0);
    double sigma = log(2.0) / 1.2815515655446004;
    assert_int_equal(d.max, (int)ceil(100 * exp(3.0902323061678132 * sigma)));
    const char *bad[][2] = {
        {"normal:3", "not a distribution"},   {"uniform:9-3", "must not exceed"},
        {"lognormal:100,50", "above the median"}, {"fixed:0", "out of range"},
        {"lognormal:100", "MEDIAN,P90"},       {"empirical:", "empirical:FILE"},
        {"fixed:20M", "out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(workload_dist_parse(bad[i][0], &d, err), -1);
        if (!strstr(err, bad[i][1]))
            fail_msg("%s: '%s' lacks '%s'", bad[i][0], err, bad[i][1]);
    }
}

static int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

/* The sample quantile's standard error in log space: sqrt(p (1 - p) / n) / phi(z_p) x sigma
 * (the asymptotic variance of a sample quantile, ln x being normal). */
static double log_quantile_se(double p, double z, double sigma, int n)
{
    double phi = exp(-z * z / 2) / sqrt(2 * M_PI);
    return sqrt(p * (1 - p) / n) / phi * sigma;
}

/* lognormal:M,P90 gives back its median and 90th percentile over many draws, within four
 * standard errors of the sample quantiles (computed, not guessed). */
static void test_lognormal_recovers_median_and_p90(void **state)
{
    (void)state;
    enum { N = 20000 };
    static int v[N];
    char err[ERR_LEN] = "";
    workload_dist d;
    assert_int_equal(workload_dist_parse("lognormal:1730,5696,10000000", &d, err), 0);
    for (int i = 0; i < N; i++) {
        uint64_t st = rng_hash3(7, 0x10, (uint64_t)i);
        v[i] = workload_dist_draw(&d, NULL, 0, &st);
        uint64_t again = rng_hash3(7, 0x10, (uint64_t)i);
        assert_int_equal(workload_dist_draw(&d, NULL, 0, &again), v[i]); /* keyed draws */
        assert_in_range(v[i], 1, d.max);
    }
    qsort(v, N, sizeof v[0], cmp_int);
    const double sigma = log(5696.0 / 1730.0) / 1.2815515655446004;
    const double median = v[N / 2], p90 = v[(int)(0.9 * N)];
    const double tol50 = 4 * log_quantile_se(0.5, 0, sigma, N);
    const double tol90 = 4 * log_quantile_se(0.9, 1.2815515655446004, sigma, N);
    print_message("lognormal: median %.0f (want 1730, tol %.2f %%), p90 %.0f (want 5696, "
                  "tol %.2f %%)\n",
                  median, 100 * tol50, p90, 100 * tol90);
    assert_true(fabs(log(median / 1730.0)) < tol50);
    assert_true(fabs(log(p90 / 5696.0)) < tol90);
    /* MAX holds: every draw of a capped distribution is at most MAX */
    assert_int_equal(workload_dist_parse("lognormal:1730,5696,4000", &d, err), 0);
    int at_max = 0;
    for (int i = 0; i < 2000; i++) {
        uint64_t st = rng_hash3(7, 0x11, (uint64_t)i);
        int x = workload_dist_draw(&d, NULL, 0, &st);
        assert_in_range(x, 1, 4000);
        at_max += x == 4000;
    }
    assert_true(at_max > 0); /* P(x > 4000) is about 18 %: some hit the cap */
}

static const char *write_file(char *path, size_t size, const char *name, const char *text)
{
    return scratch_file(path, size, "test_workload", name, text);
}

static void test_empirical(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256], spec[300];
    write_file(path, sizeof path, "lens.txt", "# lengths\n10\n\n20\n30\n");
    workload_config cfg;
    workload_default(&cfg);
    snprintf(spec, sizeof spec, "empirical:%s", path);
    assert_int_equal(workload_dist_parse(spec, &cfg.prompt_len, err), 0);
    workload_plan plan;
    if (workload_plan_build(&cfg, &plan, err) != 0)
        fail_msg("%s", err);
    assert_int_equal(plan.n_prompt_values, 3);
    assert_int_equal(plan.prompt_len.max, 30);
    int seen[3] = {0};
    for (int k = 0; k < 300; k++) {
        int x = workload_plan_bg(&plan, &cfg, 1, k).prompt_tokens;
        assert_true(x == 10 || x == 20 || x == 30);
        seen[x / 10 - 1]++;
    }
    assert_true(seen[0] > 0 && seen[1] > 0 && seen[2] > 0);
    workload_plan_free(&plan);
    unlink(path);
    /* a CSV column by name */
    write_file(path, sizeof path, "lens.csv", "id,len\n1,7\n2,9\n");
    snprintf(spec, sizeof spec, "empirical:%s@len", path);
    assert_int_equal(workload_dist_parse(spec, &cfg.prompt_len, err), 0);
    assert_int_equal(workload_plan_build(&cfg, &plan, err), 0);
    assert_int_equal(plan.n_prompt_values, 2);
    assert_int_equal(plan.prompt_values[0], 7);
    assert_int_equal(plan.prompt_values[1], 9);
    workload_plan_free(&plan);
    /* a bad value: file:line */
    write_file(path, sizeof path, "lens.csv", "id,len\n1,7\n2,-9\n");
    assert_int_equal(workload_plan_build(&cfg, &plan, err), -1);
    char want[300];
    snprintf(want, sizeof want, "%s:3:", path);
    if (!strstr(err, want))
        fail_msg("'%s' lacks '%s'", err, want);
    unlink(path);
}

/* ---- open loop at a rate ---------------------------------------------------------------- */

static void rate_config(workload_config *cfg, double rate, double burstiness, int64_t duration_s)
{
    workload_default(cfg);
    cfg->users = 0;
    cfg->request_rate = rate;
    cfg->burstiness = burstiness;
    cfg->duration_ns = duration_s * CLOCK_NS_PER_S;
}

/* Poisson and gamma arrivals: the count is R T within four Poisson standard deviations, and
 * the squared coefficient of variation of the gaps is 1 / burstiness within four standard
 * errors of a sample variance of gamma gaps (relative sqrt((2 + 6 / k) / n)). */
static void test_rate_arrival_statistics(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    const double shapes[] = {1.0, 0.25, 4.0};
    for (size_t s = 0; s < 3; s++) {
        workload_config cfg;
        rate_config(&cfg, 5.0, shapes[s], 2000);
        workload_plan plan;
        if (workload_plan_build(&cfg, &plan, err) != 0)
            fail_msg("%s", err);
        const double expect = 5.0 * 2000, k = shapes[s];
        /* A renewal process's count has variance about R T / k (gaps' CV^2 = 1 / k). */
        const double count_sd = sqrt(expect / k);
        print_message("burstiness %.2f: %lld arrivals (want %.0f +- %.0f)\n", k,
                      (long long)plan.n_arrivals, expect, 4 * count_sd);
        assert_true(fabs((double)plan.n_arrivals - expect) < 4 * count_sd);
        double sum = 0, sum2 = 0;
        const int64_t n = plan.n_arrivals - 1;
        for (int64_t i = 1; i < plan.n_arrivals; i++) {
            double gap = (double)(plan.arrivals[i].t_ns - plan.arrivals[i - 1].t_ns) / 1e9;
            assert_true(gap >= 0);
            sum += gap;
            sum2 += gap * gap;
        }
        double mean = sum / (double)n, var = sum2 / (double)n - mean * mean;
        double cv2 = var / (mean * mean), tol = 4 * sqrt((2 + 6 / k) / (double)n);
        print_message("  gaps: mean %.4f s (want 0.2), CV^2 %.3f (want %.3f, tol %.1f %%)\n",
                      mean, cv2, 1 / k, 100 * tol);
        assert_true(fabs(cv2 * k - 1) < tol);
        assert_true(fabs(mean - 0.2) < 4 * 0.2 / sqrt(k * (double)n));
        /* lengths from the distributions, keyed by index: the same plan twice */
        workload_plan again;
        assert_int_equal(workload_plan_build(&cfg, &again, err), 0);
        assert_int_equal(again.n_arrivals, plan.n_arrivals);
        assert_memory_equal(again.arrivals, plan.arrivals,
                            (size_t)plan.n_arrivals * sizeof *plan.arrivals);
        workload_plan_free(&again);
        workload_plan_free(&plan);
    }
}

/* Ramp-up: the rate grows linearly over D, so the first D seconds hold R D / 2 arrivals on
 * average and the next D seconds R D (Poisson: within four standard deviations). */
static void test_rate_ramp_up(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    workload_config cfg;
    rate_config(&cfg, 20.0, 1.0, 400);
    cfg.ramp_up_ns = 200 * CLOCK_NS_PER_S;
    workload_plan plan;
    assert_int_equal(workload_plan_build(&cfg, &plan, err), 0);
    int64_t first = 0, second = 0, first_quarter = 0;
    for (int64_t i = 0; i < plan.n_arrivals; i++) {
        int64_t t = plan.arrivals[i].t_ns;
        first += t < 200 * CLOCK_NS_PER_S;
        second += t >= 200 * CLOCK_NS_PER_S;
        first_quarter += t < 100 * CLOCK_NS_PER_S;
    }
    assert_true(fabs((double)first - 2000) < 4 * sqrt(2000.0));
    assert_true(fabs((double)second - 4000) < 4 * sqrt(4000.0));
    /* the first half of the ramp holds a quarter of its mass: R (D/2)^2 / 2D = 500 */
    assert_true(fabs((double)first_quarter - 500) < 4 * sqrt(500.0));
    workload_plan_free(&plan);
    /* --max-requests caps the plan */
    cfg.max_requests = 10;
    assert_int_equal(workload_plan_build(&cfg, &plan, err), 0);
    assert_int_equal(plan.n_arrivals, 10);
    workload_plan_free(&plan);
}

static void test_presets_open_loop(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    workload_config cfg;
    workload_default(&cfg);
    assert_int_equal(workload_preset(&cfg, "chat", err), 0);
    assert_int_equal(cfg.users, 0);
    assert_true(workload_open_loop(&cfg));
    assert_int_equal(cfg.prompt_len.kind, WORKLOAD_DIST_LOGNORMAL);
    assert_int_equal(cfg.prompt_len.a, 1730);
    assert_int_equal(workload_check(&cfg, err), 0);
    assert_int_equal(workload_preset(&cfg, "summarization", err), 0);
    assert_int_equal(cfg.prompt_len.a, 7060);
    assert_true(cfg.request_rate > 0);
    assert_int_equal(workload_check(&cfg, err), 0);
    /* flags that would change nothing: refused, not ignored */
    workload_config lone;
    workload_default(&lone);
    lone.trace_loop = true;
    assert_int_equal(workload_check(&lone, err), -1);
    assert_non_null(strstr(err, "need --trace"));
    workload_default(&lone);
    lone.max_concurrency = 4;
    assert_int_equal(workload_check(&lone, err), -1);
    assert_non_null(strstr(err, "need --request-rate, --num-prompts or --trace"));
    workload_default(&lone);
    lone.burstiness = 0.5;
    assert_int_equal(workload_check(&lone, err), -1);
    assert_non_null(strstr(err, "need --request-rate"));
    /* a rate and a trace together: refused */
    snprintf(cfg.trace, sizeof cfg.trace, "x.csv");
    assert_int_equal(workload_check(&cfg, err), -1);
    assert_non_null(strstr(err, "give one"));
}

/* Open-loop request i runs in shard i mod N; the concurrency limit is split over shards. */
static void test_open_loop_shards(void **state)
{
    (void)state;
    workload_config cfg;
    workload_default(&cfg);
    cfg.users = 0;
    cfg.request_rate = 1;
    cfg.max_concurrency = 10;
    assert_int_equal(workload_shard_concurrency(&cfg, 0), 10);
    cfg.shard.count = 4;
    int total = 0;
    for (int s = 0; s < 4; s++) {
        cfg.shard.index = s;
        total += workload_shard_concurrency(&cfg, s);
        for (int64_t i = 0; i < 20; i++)
            assert_int_equal(workload_shard_has_arrival(&cfg, i), i % 4 == s);
    }
    assert_int_equal(total, 10);
    cfg.users = 3;
    assert_int_equal(workload_arrival_user(&cfg, 5), 8); /* streams after the users */
}

/* Issue 28, point 14: --num-prompts N is exactly N requests, whatever the duration, and the
 * run lasts until the last has finished. Without a rate every one arrives at t = 0 (vLLM's
 * --request-rate inf); at a rate they are the rate's first N arrivals, the same draws as a
 * timed run's; beside --max-requests it is refused (both count the requests). */
static void test_num_prompts(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    workload_config cfg;
    workload_default(&cfg);
    cfg.users = 0;
    cfg.num_prompts = 7;
    assert_true(workload_open_loop(&cfg));
    assert_true(workload_drawn_arrivals(&cfg));
    assert_int_equal(workload_until_end(&cfg, err), 0);
    assert_true(cfg.until_trace_end);
    assert_int_equal(cfg.duration_ns, WORKLOAD_NUM_PROMPTS_TAIL_NS); /* the last send: t = 0 */
    workload_plan p;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.n_arrivals, 7);
    for (int64_t i = 0; i < p.n_arrivals; i++) {
        assert_int_equal(p.arrivals[i].t_ns, 0);
        assert_true(p.arrivals[i].prompt_tokens >= 32 && p.arrivals[i].prompt_tokens <= 128);
    }
    workload_plan_free(&p);

    /* at 2 req/s: 300 requests, ~150 s of arrivals, past the default 40 s */
    workload_config timed;
    rate_config(&timed, 2.0, 1.0, 1000);
    workload_plan whole;
    assert_int_equal(workload_plan_build(&timed, &whole, err), 0);
    rate_config(&cfg, 2.0, 1.0, 40);
    cfg.num_prompts = 300;
    assert_int_equal(workload_until_end(&cfg, err), 0);
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.n_arrivals, 300);
    assert_true(p.arrivals[299].t_ns > 100 * CLOCK_NS_PER_S);
    assert_int_equal(cfg.duration_ns, p.arrivals[299].t_ns + WORKLOAD_NUM_PROMPTS_TAIL_NS);
    for (int64_t i = 0; i < p.n_arrivals; i++) {
        assert_int_equal(p.arrivals[i].t_ns, whole.arrivals[i].t_ns);
        assert_int_equal(p.arrivals[i].max_tokens, whole.arrivals[i].max_tokens);
    }
    workload_plan_free(&p);
    workload_plan_free(&whole);

    cfg.max_requests = 5;
    assert_int_equal(workload_check(&cfg, err), -1);
    assert_non_null(strstr(err, "--num-prompts and --max-requests both count"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lesson_preset),
        cmocka_unit_test(test_one_second_preset),
        cmocka_unit_test(test_unknown_preset),
        cmocka_unit_test(test_baseline_has_no_injections),
        cmocka_unit_test(test_check_rejects),
        cmocka_unit_test(test_bg_draws_are_seeded_and_spread),
        cmocka_unit_test(test_poisson_schedule),
        cmocka_unit_test(test_prompt_ids_unique_per_injection),
        cmocka_unit_test(test_shard_rule),
        cmocka_unit_test(test_dist_parse_and_format),
        cmocka_unit_test(test_lognormal_recovers_median_and_p90),
        cmocka_unit_test(test_empirical),
        cmocka_unit_test(test_rate_arrival_statistics),
        cmocka_unit_test(test_rate_ramp_up),
        cmocka_unit_test(test_presets_open_loop),
        cmocka_unit_test(test_open_loop_shards),
        cmocka_unit_test(test_num_prompts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
