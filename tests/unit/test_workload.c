/* workload: the lesson preset, the injector's absolute schedule, seeded draws, shards. */
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

/* n plain JSONL rows: row i at i x every_s seconds, 100 + i x prompt_step prompt tokens, a
 * 4-token answer. */
static void plain_rows(char *text, size_t size, int n, int every_s, int prompt_step)
{
    text[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t used = strlen(text);
        snprintf(text + used, size - used,
                 "{\"t\": %d, \"prompt_tokens\": %d, \"max_tokens\": 4}\n", i * every_s,
                 100 + i * prompt_step);
    }
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
    assert_non_null(strstr(err, "need --request-rate or --trace"));
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

/* ---- traces ------------------------------------------------------------------------------- */

static void trace_config(workload_config *cfg, const char *path, int format)
{
    workload_default(cfg);
    cfg->users = 0;
    cfg->duration_ns = 3600 * CLOCK_NS_PER_S;
    snprintf(cfg->trace, sizeof cfg->trace, "%s", path);
    cfg->trace_format = format;
}

static void expect_arrival(const workload_plan *p, int64_t i, int64_t t_ns, int prompt, int answer)
{
    assert_true(i < p->n_arrivals);
    assert_int_equal(p->arrivals[i].t_ns, t_ns);
    assert_int_equal(p->arrivals[i].prompt_tokens, prompt);
    assert_int_equal(p->arrivals[i].max_tokens, answer);
}

static void test_trace_formats(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256];
    workload_config cfg;
    workload_plan p;

    write_file(path, sizeof path, "azure.csv",
               "\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\r\n" /* BOM, CRLF */
               "2023-11-16 18:15:46.6805900,4808,10\r\n"
               "2023-11-16 18:15:50.9951690,3180,8\r\n"
               "2023-11-16 18:16:00.0000000,8000,2\r\n");
    for (int f = 0; f < 2; f++) { /* named, then sniffed */
        trace_config(&cfg, path, f ? TRACE_AUTO : TRACE_AZURE);
        if (workload_plan_build(&cfg, &p, err) != 0)
            fail_msg("azure: %s", err);
        assert_int_equal(p.trace.format, TRACE_AZURE);
        assert_int_equal(p.n_arrivals, 3);
        expect_arrival(&p, 0, 0, 4808, 10);
        expect_arrival(&p, 1, 4314579000LL, 3180, 8);
        expect_arrival(&p, 2, 13319410000LL, 8000, 2);
        assert_int_equal(p.arrivals[2].line, 4);
        workload_plan_free(&p);
    }

    write_file(path, sizeof path, "burst.csv",
               "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
               "5,ChatGPT,472,18,490,Conversation log\n"
               "45,GPT-4,1087,0,1087,Conversation log\n"
               "118,\"ChatGPT\",417,30,447,API log\n");
    trace_config(&cfg, path, TRACE_AUTO);
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.trace.format, TRACE_BURSTGPT);
    assert_int_equal(p.n_arrivals, 2);
    assert_int_equal(p.trace.failed, 1); /* Response tokens 0: a failed request, counted */
    expect_arrival(&p, 0, 5 * CLOCK_NS_PER_S, 472, 18);
    expect_arrival(&p, 1, 118 * CLOCK_NS_PER_S, 417, 30);
    workload_plan_free(&p);

    write_file(path, sizeof path, "moon.jsonl",
               "{\"timestamp\": 0, \"input_length\": 6955, \"output_length\": 52, "
               "\"hash_ids\": [46, 47, 48]}\n"
               "{\"timestamp\": 1500, \"input_length\": 600, \"output_length\": 7, "
               "\"hash_ids\": []}\n");
    trace_config(&cfg, path, TRACE_AUTO);
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.trace.format, TRACE_MOONCAKE);
    expect_arrival(&p, 0, 0, 6955, 52);
    expect_arrival(&p, 1, 1500 * CLOCK_NS_PER_MS, 600, 7);
    workload_plan_free(&p);

    /* plain JSONL, out of order: sorted by time; a text prompt's length is estimated */
    write_file(path, sizeof path, "plain.jsonl",
               "{\"t\": 2.5, \"prompt_tokens\": 100, \"max_tokens\": 20}\n"
               "\n"
               "{\"t\": 0.5, \"prompt\": \"twelve bytes\", \"max_tokens\": 5}\n");
    trace_config(&cfg, path, TRACE_AUTO);
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.trace.format, TRACE_JSONL);
    expect_arrival(&p, 0, 500 * CLOCK_NS_PER_MS, 3, 5);
    expect_arrival(&p, 1, 2500 * CLOCK_NS_PER_MS, 100, 20);
    assert_int_equal(p.arrivals[0].line, 3);
    workload_plan_free(&p);
    unlink(path);
}

/* Each format's bad rows: FILE:LINE: what is wrong; with skip_bad_rows skipped and counted. */
static void test_trace_bad_rows(void **state)
{
    (void)state;
    struct {
        const char *name, *text, *why;
        int line;
    } cases[] = {
        {"a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n"
                  "2023-13-16 18:15:47,10,2\n2023-11-16 18:15:48,10,2\n",
         "not a valid date", 3},
        {"a3.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-02-29 18:15:46,10,2\n"
                   "2023-02-29 18:15:47,10,2\n2024-02-29 18:15:48,10,2\n",
         "not a valid date", 3},
        {"a2.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n"
                   "2023-11-16 18:15:47,ten,2\n2023-11-16 18:15:48,10,2\n",
         "ContextTokens", 3},
        {"b.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                  "5,ChatGPT,472,18,490,x\n6,ChatGPT,472\n7,ChatGPT,10,1,11,x\n",
         "3 fields", 3},
        {"b2.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                   "-5,ChatGPT,472,18,490,x\n7,ChatGPT,10,1,11,x\n",
         "negative", 2},
        {"m.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n"
                    "{\"timestamp\": 10, \"input_length\": 0, \"output_length\": 1}\n"
                    "{\"timestamp\": 20, \"input_length\": 5, \"output_length\": 1}\n",
         "input_length", 2},
        {"j.jsonl", "{\"t\": 0, \"prompt_tokens\": 5, \"max_tokens\": 1}\n"
                    "{\"t\": 1, \"prompt_tokens\": 5, \"max_tokens\": 1\n"
                    "{\"t\": 2, \"prompt_tokens\": 5, \"max_tokens\": 1}\n",
         "not JSON", 2},
        {"j2.jsonl", "{\"t\": 0, \"prompt_tokens\": 5, \"max_tokens\": 1}\n"
                     "{\"t\": 1, \"max_tokens\": 1}\n"
                     "{\"t\": 2, \"prompt_tokens\": 5, \"max_tokens\": 1}\n",
         "neither", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[ERR_LEN] = "", path[256], want[320];
        write_file(path, sizeof path, cases[i].name, cases[i].text);
        workload_config cfg;
        trace_config(&cfg, path, TRACE_AUTO);
        workload_plan p;
        assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
        snprintf(want, sizeof want, "%s:%d: ", path, cases[i].line);
        if (!strstr(err, want) || !strstr(err, cases[i].why))
            fail_msg("%s: '%s' lacks '%s' or '%s'", cases[i].name, err, want, cases[i].why);
        cfg.skip_bad_rows = true;
        if (workload_plan_build(&cfg, &p, err) != 0)
            fail_msg("%s skipping: %s", cases[i].name, err);
        assert_int_equal(p.trace.bad, 1);
        assert_int_equal(p.n_arrivals, p.trace.lines - 1);
        assert_non_null(strstr(p.trace.first_bad, want));
        workload_plan_free(&p);
        unlink(path);
    }
    /* a file whose format cannot be told, and a missing column */
    char err[ERR_LEN] = "", path[256];
    workload_config cfg;
    workload_plan p;
    write_file(path, sizeof path, "what.csv", "a,b,c\n1,2,3\n");
    trace_config(&cfg, path, TRACE_AUTO);
    assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
    assert_non_null(strstr(err, "--trace-format"));
    trace_config(&cfg, path, TRACE_AZURE);
    assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
    assert_non_null(strstr(err, "no 'TIMESTAMP' column"));
    unlink(path);
}

/* --from/--to (re-based to 0), --speedup, --loop, --duration and --max-requests. */
static void test_trace_window_speedup_loop_cap(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256], text[1024];
    plain_rows(text, sizeof text, 10, 1, 1);
    write_file(path, sizeof path, "win.jsonl", text);
    workload_config cfg;
    trace_config(&cfg, path, TRACE_JSONL);
    cfg.trace_from_ns = 2 * CLOCK_NS_PER_S;
    cfg.trace_to_ns = 6 * CLOCK_NS_PER_S;
    cfg.speedup = 2;
    cfg.duration_ns = 5 * CLOCK_NS_PER_S;
    workload_plan p;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    /* rows at 2, 3, 4, 5 s -> 0, 1, 2, 3 s -> 0, 0.5, 1, 1.5 s */
    assert_int_equal(p.n_arrivals, 4);
    assert_int_equal(p.trace.outside, 6);
    for (int i = 0; i < 4; i++)
        expect_arrival(&p, i, i * 500 * CLOCK_NS_PER_MS, 102 + i, 4);
    workload_plan_free(&p);
    /* looped: one pass lasts the window, 4 s / 2 = 2 s: passes at 0, 2, 4 s; the third is
     * cut at the 5 s duration */
    cfg.trace_loop = true;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.n_arrivals, 10);
    assert_int_equal(p.trace.loops, 3);
    assert_int_equal(p.trace.after_end, 2);
    expect_arrival(&p, 4, 2 * CLOCK_NS_PER_S, 102, 4);
    expect_arrival(&p, 9, 4500 * CLOCK_NS_PER_MS, 103, 4);
    workload_plan_free(&p);
    cfg.max_requests = 7;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.n_arrivals, 7);
    workload_plan_free(&p);
    /* without a window, a looped pass lasts to the last row plus the mean gap: 10 s */
    trace_config(&cfg, path, TRACE_JSONL);
    cfg.trace_loop = true;
    cfg.duration_ns = 25 * CLOCK_NS_PER_S;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.n_arrivals, 25);
    expect_arrival(&p, 10, 10 * CLOCK_NS_PER_S, 100, 4);
    workload_plan_free(&p);
    unlink(path);
}

/* Issue 22, defect 8: a trace with nothing to replay is an error like an empty file (it
 * ran an empty experiment); a malformed first JSON line says what is wrong with it and the
 * format guessed from the next (it said "cannot tell the trace's format"); a NUL byte is not
 * text. Each error names the file (and the line). */
static void test_trace_nothing_to_replay(void **state)
{
    (void)state;
    struct {
        const char *name, *text, *want;
        bool skip;
    } cases[] = {
        {"h.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n",
         ": no rows after its header (line 1)", false},
        {"h2.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n\r\n\n", "no rows after its header",
         false},
        {"f.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                  "5,ChatGPT,472,0,472,x\n",
         "none of its 1 rows can be replayed (0 bad, 1 failed", false},
        {"b.jsonl", "{\"t\": -1, \"prompt_tokens\": 5, \"max_tokens\": 1}\n",
         "none of its 1 rows can be replayed (1 bad, 0 failed requests); the first bad: ", true},
        {"m.jsonl", "{\"t\": 0.1, \"prompt_tokens\": 5, \"max_tokens\": 1\n"
                    "{\"t\": 0.2, \"prompt_tokens\": 5, \"max_tokens\": 1}\n",
         ":1: not JSON: '}' expected near end of file (column 46) (read as jsonl, guessed from "
         "line 2)", false},
        {"k.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n"
                    "{\"t\": 1, \"prompt_tokens\": 5, \"max_tokens\": 1}\n",
         ":2: no \"timestamp\" (read as mooncake, guessed from line 1)", false},
        {"w.jsonl", "{\"when\": 1}\n", ":1: a JSON object without the keys of Mooncake or plain "
                                      "JSONL; the first lines tell no format: give --trace-format",
         false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[ERR_LEN] = "", path[256];
        write_file(path, sizeof path, cases[i].name, cases[i].text);
        workload_config cfg;
        trace_config(&cfg, path, TRACE_AUTO);
        cfg.skip_bad_rows = cases[i].skip;
        workload_plan p;
        assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
        if (strncmp(err, path, strlen(path)) != 0 || !strstr(err, cases[i].want))
            fail_msg("%s: '%s' lacks '%s'", cases[i].name, err, cases[i].want);
        unlink(path);
    }
    /* A NUL byte: not a text file, skipping bad rows or not (a CSV number would end there). */
    static const char nul[] = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                              "2023-11-16 18:15:46,10\0,2\n";
    char err[ERR_LEN] = "", path[256];
    snprintf(path, sizeof path, "/tmp/test_workload_%d_nul.csv", (int)getpid());
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(nul, 1, sizeof nul - 1, f);
    fclose(f);
    trace_row *rows;
    int64_t n;
    trace_counts counts;
    for (int skip = 0; skip < 2; skip++) {
        assert_int_equal(trace_load_file(path, TRACE_AUTO, skip, &rows, &n, &counts, err), -1);
        assert_non_null(strstr(err, ":2: a NUL byte (column 23): not a text file"));
        assert_int_equal(trace_load_buffer("buf", nul, sizeof nul - 1, TRACE_AUTO, skip, &rows,
                                           &n, &counts, err),
                         -1);
        assert_string_equal(err, "buf:2: a NUL byte (column 23): not a text file");
        assert_null(rows);
    }
    unlink(path);
}

/* The reader stops at once: a line over TRACE_MAX_LINE_BYTES, a NUL byte (/dev/zero: it read
 * a gigabyte before), a directory. */
static void test_trace_read_limits(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256];
    char *data = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "/tmp/test_workload_%d_long.jsonl", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"t\": 0, \"prompt_tokens\": 5, \"max_tokens\": 1}\n{\"t\": 1, \"prompt\": \"", f);
    for (int i = 0; i < TRACE_MAX_LINE_BYTES / 64 + 1; i++)
        fputs("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", f);
    fputs("\", \"max_tokens\": 1}\n", f);
    fclose(f);
    assert_int_equal(trace_read_file(path, &data, &len, err), -1);
    assert_non_null(strstr(err, ":2: a line of more than 1048576 bytes"));
    unlink(path);
    if (access("/dev/zero", R_OK) == 0) {
        assert_int_equal(trace_read_file("/dev/zero", &data, &len, err), -1);
        assert_string_equal(err, "/dev/zero:1: a NUL byte (column 1): not a text file");
    }
    assert_int_equal(trace_read_file("/tmp", &data, &len, err), -1);
    assert_string_equal(err, "/tmp is a directory, not a trace file");
    /* just under the line limit, no newline at the end: read whole */
    f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < TRACE_MAX_LINE_BYTES; i++)
        fputc('x', f);
    fclose(f);
    assert_int_equal(trace_read_file(path, &data, &len, err), 0);
    assert_int_equal(len, TRACE_MAX_LINE_BYTES);
    free(data);
    unlink(path);
}

/* A window or a duration that keeps no row: an error saying so, not an empty experiment. */
static void test_trace_window_keeps_nothing(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256];
    write_file(path, sizeof path, "w.jsonl",
               "{\"t\": 10, \"prompt_tokens\": 5, \"max_tokens\": 1}\n"
               "{\"t\": 12, \"prompt_tokens\": 5, \"max_tokens\": 1}\n");
    workload_config cfg;
    trace_config(&cfg, path, TRACE_AUTO);
    cfg.trace_to_ns = 5 * CLOCK_NS_PER_S;
    workload_plan p;
    assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
    assert_non_null(strstr(err, ": all 2 rows are outside --from/--to (they span 10.000 to "
                                "12.000 s of trace time)"));
    trace_config(&cfg, path, TRACE_AUTO);
    cfg.duration_ns = 8 * CLOCK_NS_PER_S;
    assert_int_equal(workload_plan_build(&cfg, &p, err), -1);
    assert_non_null(strstr(err, ": every row is at or after --duration (8.000 s; the first at "
                                "10.000 s of the run)"));
    unlink(path);
}

/* Issue 22, defect 10: --trace without --duration replays the whole (windowed) trace (it
 * stopped at 40 s): every row planned, the duration its last send + the cap, which the
 * runners end at once the last request has finished. */
static void test_trace_until_end(void **state)
{
    (void)state;
    char err[ERR_LEN] = "", path[256], text[2048];
    plain_rows(text, sizeof text, 13, 5, 0);
    write_file(path, sizeof path, "end.jsonl", text);
    workload_config cfg;
    trace_config(&cfg, path, TRACE_AUTO);
    assert_int_equal(workload_until_trace_end(&cfg, err), 0);
    assert_true(cfg.until_trace_end);
    assert_int_equal(cfg.duration_ns, 60 * CLOCK_NS_PER_S + WORKLOAD_TRACE_TAIL_NS);
    workload_plan p;
    assert_int_equal(workload_plan_build(&cfg, &p, err), 0);
    assert_int_equal(p.n_arrivals, 13);
    assert_int_equal(p.trace.after_end, 0);
    workload_plan_free(&p);
    /* windowed and faster: the window's last row, at its speed */
    trace_config(&cfg, path, TRACE_AUTO);
    cfg.trace_from_ns = 10 * CLOCK_NS_PER_S;
    cfg.trace_to_ns = 31 * CLOCK_NS_PER_S;
    cfg.speedup = 2;
    assert_int_equal(workload_until_trace_end(&cfg, err), 0);
    assert_int_equal(cfg.duration_ns, 10 * CLOCK_NS_PER_S + WORKLOAD_TRACE_TAIL_NS);
    /* --loop has no end of its own; a shard must stop with the others */
    cfg.trace_loop = true;
    assert_int_equal(workload_until_trace_end(&cfg, err), -1);
    assert_non_null(strstr(err, "--loop repeats the trace until --duration"));
    cfg.trace_loop = false;
    cfg.shard = (workload_shard){0, 2};
    assert_int_equal(workload_until_trace_end(&cfg, err), -1);
    assert_non_null(strstr(err, "a sharded trace replay needs --duration"));
    unlink(path);
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
        cmocka_unit_test(test_trace_formats),
        cmocka_unit_test(test_trace_bad_rows),
        cmocka_unit_test(test_trace_window_speedup_loop_cap),
        cmocka_unit_test(test_trace_nothing_to_replay),
        cmocka_unit_test(test_trace_read_limits),
        cmocka_unit_test(test_trace_window_keeps_nothing),
        cmocka_unit_test(test_trace_until_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
