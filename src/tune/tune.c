/* tune — the search over scheduler settings, its front and its choice, and the live check
 * of the top candidates (tune.h). */
#include "tune/tune.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/metric.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"
#include "common/units.h"
#include "experiment/server_cmd.h"

int tune_defaults(tune_config *tc, char *err)
{
    memset(tc, 0, sizeof *tc);
    experiment_defaults(&tc->base, EXPERIMENT_SIM);
    /* The search and the live check (--verify) start alike: cold at t = 0 unless --warmup
     * is given (the simulator then warms up as the live client does). */
    tc->base.client.warmup_ns = 0;
    tc->policies[0] = SCHED_MIXED;
    tc->policies[1] = SCHED_CHUNKED;
    tc->policies[2] = SCHED_PREFILL_FIRST;
    tc->n_policies = 3;
    for (int b = 256; b <= 16384; b *= 2)
        tc->budgets[tc->n_budgets++] = b;
    for (int s = 16; s <= 256; s *= 2)
        tc->max_num_seqs[tc->n_max_num_seqs++] = s;
    tc->n_setups = 1; /* one instance: setups[0] is all zero */
    tc->n_prefix_caching = 0; /* tune_default_prefix_caching decides */
    return tune_parse_slo(TUNE_DEFAULT_SLO, &tc->slo, err);
}

int tune_parse_slo(const char *text, gate_rules *out, char *err)
{
    char why[ERR_LEN];
    if (gate_parse(text, out, why) != 0)
        return err_set(err, "--slo: %s", why);
    if (out->n == 0)
        return err_set(err, "--slo: no SLO given (e.g. --slo 'itl.p99.9<100ms,ttft.p99<2s')");
    return 0;
}

/* "a,b,c" into items (trimmed, none empty); -1 with err naming the flag. */
typedef int (*item_fn)(const char *item, void *ctx, char *err);
static int each_item(const char *flag, const char *text, item_fn fn, void *ctx, char *err)
{
    if (!*text)
        return err_set(err, "--%s: an empty list", flag);
    for (const char *p = text;;) {
        size_t n = strcspn(p, ",");
        char item[64];
        while (n > 0 && *p == ' ')
            p++, n--;
        while (n > 0 && p[n - 1] == ' ')
            n--;
        if (n == 0 || n >= sizeof item)
            return err_set(err, "--%s: an empty or overlong item in '%s'", flag, text);
        memcpy(item, p, n);
        item[n] = '\0';
        char why[ERR_LEN];
        if (fn(item, ctx, why) != 0)
            return err_set(err, "--%s: %s", flag, why);
        p += strcspn(p, ",");
        if (!*p)
            return 0;
        p++;
    }
}

static int add_policy(const char *item, void *ctx, char *err)
{
    tune_config *tc = ctx;
    sched_policy policy;
    if (sched_policy_parse(item, &policy, err) != 0)
        return -1;
    for (int i = 0; i < tc->n_policies; i++)
        if (tc->policies[i] == policy)
            return err_set(err, "'%s' is given twice", item);
    if (tc->n_policies == TUNE_MAX_POLICIES)
        return err_set(err, "at most %d policies", TUNE_MAX_POLICIES);
    tc->policies[tc->n_policies++] = policy;
    return 0;
}

/* A count list: values, their number and the room there is. */
typedef struct count_list {
    int *values;
    int *n;
    int max;
    int64_t limit;
} count_list;

static int add_count(const char *item, void *ctx, char *err)
{
    count_list *l = ctx;
    int64_t v;
    char why[ERR_LEN];
    if (units_parse_count(item, &v, why) != 0)
        return err_set(err, "'%s' is not a count (%s)", item, why);
    if (v < 1 || v > l->limit)
        return err_set(err, "'%s' is out of range (1 to %lld)", item, (long long)l->limit);
    for (int i = 0; i < *l->n; i++)
        if (l->values[i] == (int)v)
            return err_set(err, "'%s' is given twice", item);
    if (*l->n == l->max)
        return err_set(err, "at most %d values", l->max);
    l->values[(*l->n)++] = (int)v;
    return 0;
}

int tune_parse_policies(const char *text, tune_config *tc, char *err)
{
    tc->n_policies = 0;
    return each_item("policies", text, add_policy, tc, err);
}

int tune_parse_budgets(const char *text, tune_config *tc, char *err)
{
    tc->n_budgets = 0;
    count_list l = {tc->budgets, &tc->n_budgets, TUNE_MAX_BUDGETS, 1 << 24};
    return each_item("budgets", text, add_count, &l, err);
}

static int add_prefix_setting(const char *item, void *ctx, char *err)
{
    tune_config *tc = ctx;
    bool on;
    if (strcmp(item, "on") == 0)
        on = true;
    else if (strcmp(item, "off") == 0)
        on = false;
    else
        return err_set(err, "--prefix-caching: '%s' is not off or on", item);
    for (int i = 0; i < tc->n_prefix_caching; i++)
        if (tc->prefix_caching[i] == on)
            return err_set(err, "--prefix-caching: '%s' is given twice", item);
    tc->prefix_caching[tc->n_prefix_caching++] = on;
    return 0;
}

int tune_parse_prefix_caching(const char *text, tune_config *tc, char *err)
{
    tc->n_prefix_caching = 0;
    return each_item("prefix-caching", text, add_prefix_setting, tc, err);
}

void tune_default_prefix_caching(tune_config *tc, bool said)
{
    if (tc->n_prefix_caching > 0)
        return;
    if (!said && workload_shares_prefixes(&tc->base.wl)) {
        tc->prefix_caching[0] = false;
        tc->prefix_caching[1] = true;
        tc->n_prefix_caching = 2;
        return;
    }
    tc->prefix_caching[0] = tc->base.sched.prefix_caching;
    tc->n_prefix_caching = 1;
}

int tune_parse_max_num_seqs(const char *text, tune_config *tc, char *err)
{
    tc->n_max_num_seqs = 0;
    count_list l = {tc->max_num_seqs, &tc->n_max_num_seqs, TUNE_MAX_SEQS, 1 << 20};
    return each_item("max-num-seqs", text, add_count, &l, err);
}

typedef struct split_ctx {
    tune_config *tc;
    const char *kv_link;
} split_ctx;

static int add_split(const char *item, void *ctx, char *err)
{
    split_ctx *x = ctx;
    sim_disagg d;
    memset(&d, 0, sizeof d);
    if (sim_disagg_parse(item, &d, err) != 0 ||
        sim_kv_link_parse(x->kv_link && *x->kv_link ? x->kv_link : SIM_KV_LINK_DEFAULT, &d,
                          err) != 0 ||
        sim_disagg_check(&d, err) != 0)
        return -1;
    for (int i = 1; i < x->tc->n_setups; i++)
        if (x->tc->setups[i].prefill == d.prefill && x->tc->setups[i].decode == d.decode)
            return err_set(err, "'%s' is given twice", item);
    if (x->tc->n_setups == TUNE_MAX_SETUPS)
        return err_set(err, "at most %d splits", TUNE_MAX_SETUPS - 1);
    x->tc->setups[x->tc->n_setups++] = d;
    return 0;
}

int tune_parse_disaggregate(const char *splits, const char *kv_link, tune_config *tc, char *err)
{
    memset(tc->setups, 0, sizeof tc->setups);
    tc->n_setups = 1;
    split_ctx x = {tc, kv_link};
    return each_item("disaggregate", splits, add_split, &x, err);
}

int tune_point_gpus(const tune_point *pt)
{
    return sim_disagg_gpus(&pt->disagg);
}

void tune_point_name(const tune_point *pt, char *buf, size_t size)
{
    char split[32] = "";
    if (pt->disagg.prefill > 0)
        snprintf(split, sizeof split, "%dP:%dD ", pt->disagg.prefill, pt->disagg.decode);
    snprintf(buf, size, "%s%s/%d/%d%s", split, sched_policy_name(pt->policy),
             pt->max_num_batched_tokens, pt->max_num_seqs, pt->prefix_caching ? "+pc" : "");
}

void tune_engine_name(const tune_config *tc, char *buf, size_t size)
{
    snprintf(buf, size, "sim %s %s", tc->base.cost.gpu.name, tc->base.cost.arch.name);
}

void tune_point_config(const tune_config *tc, const tune_point *pt, experiment_config *cfg)
{
    *cfg = tc->base;
    cfg->sched.policy = pt->policy;
    cfg->sched.max_num_batched_tokens = pt->max_num_batched_tokens;
    cfg->sched.max_num_seqs = pt->max_num_seqs;
    cfg->sched.prefix_caching = pt->prefix_caching;
    cfg->disagg = pt->disagg;
    cfg->no_baseline = true;
}

/* ---- one point ------------------------------------------------------------------------ */

/* The figures a point is judged on, each a figure of the metric table (analysis/metric.h):
 * read by it, named in tune.json by it (metric_key). The output per GPU is the setting's
 * (its GPUs), named after the output. */
static const struct {
    const char *metric;
    size_t at; /* its double in tune_figures */
} FIGURES[] = {
    {"throughput.output", offsetof(tune_figures, output_throughput)},
    {"ttft.p99", offsetof(tune_figures, ttft_p99_ms)},
    {"itl.p50", offsetof(tune_figures, itl_p50_ms)},
    {"itl.p999", offsetof(tune_figures, itl_p999_ms)},
    {"itl.max", offsetof(tune_figures, itl_max_ms)},
};
#define N_FIGURES ((int)(sizeof FIGURES / sizeof FIGURES[0]))

static double figure_of(const tune_figures *f, int i)
{
    double v;
    memcpy(&v, (const char *)f + FIGURES[i].at, sizeof v);
    return v;
}

static void figures_of(const analysis_summary *x, int gpus, tune_figures *f)
{
    for (int i = 0; i < N_FIGURES; i++) {
        const metric *m = metric_find(FIGURES[i].metric);
        double v;
        if (!m || !metric_value(m, x, &v))
            v = NAN;
        memcpy((char *)f + FIGURES[i].at, &v, sizeof v);
    }
    f->output_per_gpu = f->output_throughput / (gpus > 0 ? gpus : 1);
}

static void slo_values_of(const gate_rules *slo, const analysis_summary *x, double *values)
{
    json_t *summary = analysis_summary_to_json(x);
    for (int i = 0; i < slo->n; i++)
        if (!summary || !gate_rule_value(&slo->rule[i], summary, &values[i]))
            values[i] = NAN;
    json_decref(summary);
}

/* One interference run of cfg in memory: its figures and SLO values. 0, or -1 with err. */
static int run_one(const experiment_config *cfg, const experiment_runner *runner,
                   const experiment_io *io, const gate_rules *slo, tune_figures *f,
                   double *values, char *err)
{
    experiment_pair pair;
    int rc = experiment_run_pair(cfg, runner, io, &pair, err);
    if (rc == 0 && !pair.complete)
        rc = err_set(err, "%s", pair.why);
    if (rc == 0 && !pair.have_interference)
        rc = err_set(err, "the run gave no summary");
    if (rc == 0) {
        figures_of(&pair.interference, sim_disagg_gpus(&cfg->disagg), f);
        slo_values_of(slo, &pair.interference, values);
    }
    experiment_pair_free(&pair);
    return rc;
}

int tune_search(const tune_config *tc, tune_result *res, FILE *progress,
                const volatile sig_atomic_t *interrupted, char *err)
{
    memset(res, 0, sizeof *res);
    res->choice = res->closest = res->binding_slo = -1;
    const int n_setups = tc->n_setups > 0 ? tc->n_setups : 1;
    const int n_pc = tc->n_prefix_caching > 0 ? tc->n_prefix_caching : 1;
    const int n = n_setups * tc->n_policies * tc->n_budgets * tc->n_max_num_seqs * n_pc;
    if (n == 0)
        return err_set(err, "nothing to search: a list is empty");
    if (!(res->points = calloc((size_t)n, sizeof *res->points)))
        return err_set(err, "out of memory for %d points", n);
    experiment_runner runner;
    if (experiment_runner_sim(&runner, err) != 0)
        return -1;
    experiment_io io = {.out_dir = NULL, .quiet = true, .interrupted = interrupted};
    const int64_t t0 = clock_now_ns();
    int64_t said = t0;
    int rc = 0;
    for (int d = 0; d < n_setups && rc == 0; d++)
        for (int p = 0; p < tc->n_policies && rc == 0; p++)
            for (int b = 0; b < tc->n_budgets && rc == 0; b++)
                for (int q = 0; q < tc->n_max_num_seqs * n_pc && rc == 0; q++) {
                    const int s = q / n_pc;
                    tune_point *pt = &res->points[res->n_points++];
                    pt->disagg = tc->setups[d];
                    pt->policy = tc->policies[p];
                    pt->max_num_batched_tokens = tc->budgets[b];
                    pt->max_num_seqs = tc->max_num_seqs[s];
                    pt->prefix_caching = tc->n_prefix_caching > 0
                                             ? tc->prefix_caching[q % n_pc]
                                             : tc->base.sched.prefix_caching;
                    pt->same_as = pt->worst_slo = -1;
                    experiment_config cfg;
                    tune_point_config(tc, pt, &cfg);
                    char why[ERR_LEN];
                    if (experiment_check(&cfg, why) != 0) {
                        snprintf(pt->why_not, sizeof pt->why_not, "%s", why);
                        continue;
                    }
                    char name[64];
                    tune_point_name(pt, name, sizeof name);
                    if (run_one(&cfg, &runner, &io, &tc->slo, &pt->predicted, pt->slo_value,
                                why) != 0) {
                        rc = err_set(err, "%s: %s", name, why);
                        break;
                    }
                    pt->servable = true;
                    const int64_t now = clock_now_ns();
                    if (progress && now - said >= CLOCK_NS_PER_S) {
                        fprintf(progress, "tune: %d/%d points (%.1f s)\n", res->n_points, n,
                                (double)(now - t0) / 1e9);
                        fflush(progress);
                        said = now;
                    }
                    if (interrupted && *interrupted)
                        rc = err_set(err, "interrupted after %d of %d points", res->n_points, n);
                }
    experiment_runner_free(&runner);
    res->search_s = (double)(clock_now_ns() - t0) / 1e9;
    if (rc != 0)
        return -1;
    tune_analyse(&tc->slo, res);
    return 0;
}

/* ---- the front and the choice ----------------------------------------------------------- */

/* How far a value is past its SLO, as a fraction of the limit (0: the SLO holds). A value the
 * run did not give breaks its SLO by 1. */
static double violation(const gate_rule *r, double v)
{
    if (isnan(v))
        return 1;
    if (gate_rule_holds(r, v))
        return 0;
    const double scale = fabs(r->value) > 0 ? fabs(r->value) : 1;
    const double past = fabs(v - r->value) / scale;
    /* == and != broken, or a value exactly at a strict limit: just past it. */
    return past > 0 ? past : 1e-9;
}

static bool same_figures(const tune_figures *a, const tune_figures *b)
{
    return a->output_throughput == b->output_throughput &&
           a->output_per_gpu == b->output_per_gpu && a->ttft_p99_ms == b->ttft_p99_ms &&
           a->itl_p50_ms == b->itl_p50_ms && a->itl_p999_ms == b->itl_p999_ms &&
           a->itl_max_ms == b->itl_max_ms;
}

/* a dominates b: no worse in every objective, better in one. */
static bool dominates(const tune_figures *a, const tune_figures *b)
{
    const bool no_worse = a->output_per_gpu >= b->output_per_gpu &&
                          a->ttft_p99_ms <= b->ttft_p99_ms && a->itl_p999_ms <= b->itl_p999_ms;
    const bool better = a->output_per_gpu > b->output_per_gpu ||
                        a->ttft_p99_ms < b->ttft_p99_ms || a->itl_p999_ms < b->itl_p999_ms;
    return no_worse && better;
}

/* The choice's order among feasible points: a before b (see tune.h). */
static bool ranks_before(const tune_point *a, const tune_point *b, double best_throughput)
{
    const double tie = best_throughput * (1 - TUNE_THROUGHPUT_TIE);
    const bool a_top = a->predicted.output_per_gpu >= tie,
               b_top = b->predicted.output_per_gpu >= tie;
    if (a_top != b_top)
        return a_top;
    if (!a_top && a->predicted.output_per_gpu != b->predicted.output_per_gpu)
        return a->predicted.output_per_gpu > b->predicted.output_per_gpu;
    if (a->predicted.itl_p999_ms != b->predicted.itl_p999_ms)
        return a->predicted.itl_p999_ms < b->predicted.itl_p999_ms;
    if (a->predicted.ttft_p99_ms != b->predicted.ttft_p99_ms)
        return a->predicted.ttft_p99_ms < b->predicted.ttft_p99_ms;
    return false; /* the earlier point stays first */
}

void tune_analyse(const gate_rules *slo, tune_result *res)
{
    res->n_servable = res->n_feasible = res->n_front = 0;
    res->choice = res->closest = res->binding_slo = -1;
    for (int i = 0; i < res->n_points; i++) {
        tune_point *pt = &res->points[i];
        pt->feasible = pt->on_front = false;
        pt->worst_slo = pt->same_as = -1;
        pt->violation = 0;
        if (!pt->servable)
            continue;
        res->n_servable++;
        for (int r = 0; r < slo->n; r++) {
            const double v = violation(&slo->rule[r], pt->slo_value[r]);
            if (v > pt->violation) {
                pt->violation = v;
                pt->worst_slo = r;
            }
        }
        pt->feasible = pt->worst_slo < 0;
        res->n_feasible += pt->feasible;
        for (int j = 0; j < i && pt->same_as < 0; j++)
            if (res->points[j].servable && same_figures(&res->points[j].predicted, &pt->predicted))
                pt->same_as = j;
    }
    for (int i = 0; i < res->n_points; i++) {
        tune_point *pt = &res->points[i];
        if (!pt->servable)
            continue;
        bool dominated = false;
        for (int j = 0; j < res->n_points && !dominated; j++)
            dominated = j != i && res->points[j].servable &&
                        dominates(&res->points[j].predicted, &pt->predicted);
        pt->on_front = !dominated;
        res->n_front += pt->on_front;
    }
    int ranked[1];
    if (tune_ranked(res, ranked, 1) == 1)
        res->choice = ranked[0];
    if (res->choice >= 0)
        return;
    for (int i = 0; i < res->n_points; i++) {
        const tune_point *pt = &res->points[i];
        if (pt->servable && (res->closest < 0 || pt->violation < res->points[res->closest].violation))
            res->closest = i;
    }
    if (res->closest >= 0)
        res->binding_slo = res->points[res->closest].worst_slo;
}

int tune_ranked(const tune_result *res, int *out, int k)
{
    double best = 0;
    for (int i = 0; i < res->n_points; i++)
        if (res->points[i].feasible && res->points[i].predicted.output_per_gpu > best)
            best = res->points[i].predicted.output_per_gpu;
    /* Selection, k times: k is small (--top) and the points a few hundred at most. */
    int n = 0;
    while (n < k) {
        int pick = -1;
        for (int i = 0; i < res->n_points; i++) {
            const tune_point *pt = &res->points[i];
            bool taken = false;
            for (int j = 0; j < n && !taken; j++)
                taken = out[j] == i;
            /* A point with the same figures as one ranked already would be a copy of it. */
            if (!pt->feasible || taken || pt->same_as >= 0)
                continue;
            if (pick < 0 || ranks_before(pt, &res->points[pick], best))
                pick = i;
        }
        if (pick < 0)
            break;
        out[n++] = pick;
    }
    return n;
}

/* ---- words ------------------------------------------------------------------------------- */

/* 2412.3 -> "2,412" */
static void thousands(double v, char *buf, size_t size)
{
    char digits[64];
    snprintf(digits, sizeof digits, "%.0f", fabs(v));
    size_t len = strlen(digits), o = 0;
    if (v < 0 && o + 1 < size)
        buf[o++] = '-';
    for (size_t i = 0; i < len && o + 2 < size; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
}

void tune_format_slo_value(const gate_rule *r, double v, char *buf, size_t size)
{
    if (isnan(v)) {
        snprintf(buf, size, "not measured");
        return;
    }
    if (!gate_rule_is_time(r)) {
        gate_rule_format(r, v, buf, size);
        return;
    }
    char n[64];
    if (fabs(v) >= 1000)
        thousands(v, n, sizeof n);
    else if (fabs(v) >= 100)
        snprintf(n, sizeof n, "%.0f", v);
    else if (fabs(v) >= 10)
        snprintf(n, sizeof n, "%.1f", v);
    else
        snprintf(n, sizeof n, "%.2f", v);
    snprintf(buf, size, "%s ms", n);
}

void tune_point_why(const gate_rules *slo, const tune_point *pt, char *buf, size_t size)
{
    buf[0] = '\0';
    if (!pt->servable) {
        snprintf(buf, size, "cannot serve: %s", pt->why_not);
        return;
    }
    if (pt->worst_slo < 0)
        return;
    const gate_rule *r = &slo->rule[pt->worst_slo];
    const double v = pt->slo_value[pt->worst_slo];
    char have[48], limit[48], metric[96];
    /* The metric as the SLO spelt it ("itl.p99.9"), not its canonical name. */
    snprintf(metric, sizeof metric, "%.*s", (int)strcspn(r->text, "<>=! "), r->text);
    tune_format_slo_value(r, v, have, sizeof have);
    tune_format_slo_value(r, r->value, limit, sizeof limit);
    if (isnan(v))
        snprintf(buf, size, "%s: not in the run's summary (SLO %s %s)", metric,
                 gate_rule_op(r), limit);
    else
        snprintf(buf, size, "%s = %s %s %s", metric, have,
                 v > r->value ? ">" : v < r->value ? "<" : "=", limit);
}

/* ---- --verify -------------------------------------------------------------------------- */

int tune_verify(const tune_config *tc, tune_result *res, const tune_verify_options *vo,
                const experiment_io *io, char *err)
{
    if (!io->out_dir)
        return err_set(err, "--verify writes each candidate's run to a directory");
    const int k = vo->top > 0 ? vo->top : 1;
    int *ranked = calloc((size_t)k, sizeof *ranked);
    if (!ranked)
        return err_set(err, "out of memory");
    const int n = tune_ranked(res, ranked, k);
    if (n == 0) {
        free(ranked);
        return err_set(err, "no feasible setting to verify");
    }
    free(res->verified);
    res->n_verified = 0;
    if (!(res->verified = calloc((size_t)n, sizeof *res->verified))) {
        free(ranked);
        return err_set(err, "out of memory");
    }
    int failed = 0;
    for (int c = 0; c < n; c++) {
        tune_verified *v = &res->verified[res->n_verified++];
        const tune_point *pt = &res->points[ranked[c]];
        v->point = ranked[c];
        snprintf(v->dir, sizeof v->dir, "verify-%d", c + 1);
        for (int r = 0; r < tc->slo.n; r++)
            v->slo_value[r] = NAN;
        char name[64], dir[4200], log_path[4300], why[ERR_LEN] = "";
        tune_point_name(pt, name, sizeof name);
        experiment_config cfg;
        tune_point_config(tc, pt, &cfg);
        cfg.engine = EXPERIMENT_REMOTE;
        proc server;
        memset(&server, 0, sizeof server);
        int rc = 0;
        if (pt->disagg.prefill > 0)
            rc = err_set(why, "disaggregated prefill runs in the simulator only: no live check");
        if (rc == 0)
            rc = fsio_join(dir, sizeof dir, io->out_dir, v->dir, why);
        if (rc == 0)
            rc = fsio_mkdirs(dir, why);
        if (rc == 0)
            rc = fsio_join(log_path, sizeof log_path, dir, "server.log", why);
        if (rc == 0)
            rc = experiment_resolve(&cfg, why);
        if (io->notes)
            fprintf(io->notes, "tune --verify %d/%d: %s%s\n", c + 1, n, name,
                    vo->server_cmd && vo->server_cmd[0] ? ": starting its server" : "");
        if (rc == 0 && vo->server_cmd && vo->server_cmd[0])
            rc = experiment_server_start(vo->server_cmd, &cfg, name, log_path,
                                         vo->server_timeout_ns, io->interrupted, &server, why);
        if (rc == 0) {
            experiment_io run_io = *io;
            run_io.out_dir = dir;
            rc = run_one(&cfg, vo->runner, &run_io, &tc->slo, &v->measured, v->slo_value, why);
        }
        experiment_server_stop(&server);
        v->ran = rc == 0;
        if (!v->ran) {
            snprintf(v->why, sizeof v->why, "%s", why);
            failed++;
        } else {
            v->meets = true;
            for (int r = 0; r < tc->slo.n; r++)
                v->meets = v->meets && violation(&tc->slo.rule[r], v->slo_value[r]) == 0;
        }
        if (io->interrupted && *io->interrupted)
            break;
    }
    free(ranked);
    return failed;
}

/* ---- tune.json -------------------------------------------------------------------------- */

static json_t *number_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static double rel_error(double predicted, double measured)
{
    return measured != 0 ? (predicted - measured) / measured : NAN;
}

static void figure_key(int i, char *buf, size_t size)
{
    const metric *m = metric_find(FIGURES[i].metric);
    if (m)
        metric_key(m, buf, size);
    else
        snprintf(buf, size, "%s", FIGURES[i].metric);
}

/* A figure a run could not give (no gaps, no first token) is null, never a NaN. Each figure
 * by its key; the output per GPU after the output. */
static json_t *figures_json(const tune_figures *f)
{
    json_t *o = json_object();
    for (int i = 0; o && i < N_FIGURES; i++) {
        char key[64], per_gpu[80];
        figure_key(i, key, sizeof key);
        json_object_set_new(o, key, number_or_null(figure_of(f, i)));
        if (FIGURES[i].at == offsetof(tune_figures, output_throughput)) {
            snprintf(per_gpu, sizeof per_gpu, "%s_per_gpu", key);
            json_object_set_new(o, per_gpu, number_or_null(f->output_per_gpu));
        }
    }
    return o;
}

/* (predicted - measured) / measured of each figure but the per-GPU output (the same error
 * as the output's). */
static json_t *relative_errors_json(const tune_figures *predicted, const tune_figures *measured)
{
    json_t *o = json_object();
    for (int i = 0; o && i < N_FIGURES; i++) {
        char key[64];
        figure_key(i, key, sizeof key);
        json_object_set_new(o, key, number_or_null(rel_error(figure_of(predicted, i),
                                                             figure_of(measured, i))));
    }
    return o;
}

static json_t *slo_json(const gate_rules *slo, const double *values)
{
    json_t *a = json_array();
    for (int r = 0; r < slo->n; r++) {
        const gate_rule *rule = &slo->rule[r];
        json_array_append_new(
            a, json_pack("{s:s, s:s, s:s, s:f, s:o, s:b, s:f}", "slo", rule->text, "metric",
                         gate_rule_metric(rule), "op", gate_rule_op(rule), "limit", rule->value,
                         "value", number_or_null(values[r]), "met",
                         violation(rule, values[r]) == 0, "violation",
                         violation(rule, values[r])));
    }
    return a;
}

static json_t *setting_json(const tune_point *pt)
{
    char name[64];
    tune_point_name(pt, name, sizeof name);
    json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:b, s:i}", "name", name, "policy",
                          sched_policy_name(pt->policy), "max_num_batched_tokens",
                          pt->max_num_batched_tokens, "max_num_seqs", pt->max_num_seqs,
                          "prefix_caching", (int)pt->prefix_caching, "gpus",
                          sim_disagg_gpus(&pt->disagg));
    if (o && pt->disagg.prefill > 0) {
        char split[32];
        snprintf(split, sizeof split, "%d:%d", pt->disagg.prefill, pt->disagg.decode);
        json_object_set_new(o, "disaggregate", json_string(split));
        json_object_set_new(o, "kv_link", json_string(pt->disagg.link));
    }
    return o;
}

json_t *tune_to_json(const tune_config *tc, const tune_result *res)
{
    json_t *root = json_object();
    json_t *search = json_object(), *slos = json_array(), *pol = json_array(),
           *bud = json_array(), *seq = json_array();
    for (int r = 0; r < tc->slo.n; r++)
        json_array_append_new(slos, json_string(tc->slo.rule[r].text));
    for (int i = 0; i < tc->n_policies; i++)
        json_array_append_new(pol, json_string(sched_policy_name(tc->policies[i])));
    for (int i = 0; i < tc->n_budgets; i++)
        json_array_append_new(bud, json_integer(tc->budgets[i]));
    for (int i = 0; i < tc->n_max_num_seqs; i++)
        json_array_append_new(seq, json_integer(tc->max_num_seqs[i]));
    char engine[256];
    tune_engine_name(tc, engine, sizeof engine);
    json_object_set_new(search, "slo", slos);
    json_object_set_new(search, "policies", pol);
    json_object_set_new(search, "budgets", bud);
    json_object_set_new(search, "max_num_seqs", seq);
    json_t *pcs = json_array();
    for (int i = 0; i < tc->n_prefix_caching; i++)
        json_array_append_new(pcs, json_boolean(tc->prefix_caching[i]));
    json_object_set_new(search, "prefix_caching", pcs);
    json_t *splits = json_array();
    for (int i = 1; i < tc->n_setups; i++) {
        char split[32];
        snprintf(split, sizeof split, "%d:%d", tc->setups[i].prefill, tc->setups[i].decode);
        json_array_append_new(splits, json_string(split));
    }
    json_object_set_new(search, "disaggregate", splits);
    json_object_set_new(search, "objective", json_string(tc->n_setups > 1
                                                             ? "output_throughput_per_gpu"
                                                             : "output_throughput"));
    json_object_set_new(search, "engine", json_string(engine));
    json_object_set_new(search, "throughput_tie", json_real(TUNE_THROUGHPUT_TIE));
    json_object_set_new(search, "points", json_integer(res->n_points));
    json_object_set_new(search, "servable", json_integer(res->n_servable));
    json_object_set_new(search, "feasible", json_integer(res->n_feasible));
    json_object_set_new(search, "wall_s", json_real(res->search_s));
    json_object_set_new(root, "search", search);
    /* The base every point starts from (its scheduler is replaced per point). */
    json_object_set_new(root, "base_config", experiment_config_to_json(&tc->base, NULL));

    json_t *points = json_array(), *front = json_array();
    for (int i = 0; i < res->n_points; i++) {
        const tune_point *pt = &res->points[i];
        json_t *p = setting_json(pt);
        char why[400];
        tune_point_why(&tc->slo, pt, why, sizeof why);
        json_object_set_new(p, "servable", json_boolean(pt->servable));
        json_object_set_new(p, "feasible", json_boolean(pt->feasible));
        json_object_set_new(p, "on_front", json_boolean(pt->on_front));
        json_object_set_new(p, "why", json_string(why));
        if (pt->servable) {
            json_object_set_new(p, "predicted", figures_json(&pt->predicted));
            json_object_set_new(p, "slo", slo_json(&tc->slo, pt->slo_value));
            json_t *failing = json_array();
            for (int r = 0; r < tc->slo.n; r++)
                if (violation(&tc->slo.rule[r], pt->slo_value[r]) > 0)
                    json_array_append_new(failing, json_string(tc->slo.rule[r].text));
            json_object_set_new(p, "failing", failing);
            json_object_set_new(p, "violation", json_real(pt->violation));
            if (pt->same_as >= 0) {
                char same[64];
                tune_point_name(&res->points[pt->same_as], same, sizeof same);
                json_object_set_new(p, "same_as", json_string(same));
            }
        }
        json_array_append_new(points, p);
        if (pt->on_front)
            json_array_append_new(front, json_integer(i));
    }
    json_object_set_new(root, "points", points);
    json_object_set_new(root, "front", front);

    json_t *choice = json_object();
    if (res->choice >= 0) {
        json_object_set_new(choice, "feasible", json_true());
        json_object_set_new(choice, "index", json_integer(res->choice));
        json_object_set_new(choice, "setting", setting_json(&res->points[res->choice]));
        json_object_set_new(choice, "predicted", figures_json(&res->points[res->choice].predicted));
    } else {
        json_object_set_new(choice, "feasible", json_false());
        if (res->closest >= 0) {
            const tune_point *pt = &res->points[res->closest];
            json_object_set_new(choice, "closest_index", json_integer(res->closest));
            json_object_set_new(choice, "closest", setting_json(pt));
            json_object_set_new(choice, "predicted", figures_json(&pt->predicted));
            json_object_set_new(choice, "binding_slo",
                                res->binding_slo >= 0
                                    ? json_string(tc->slo.rule[res->binding_slo].text)
                                    : json_null());
            json_object_set_new(choice, "violation", json_real(pt->violation));
        }
    }
    json_object_set_new(root, "choice", choice);

    json_t *verified = json_array();
    for (int c = 0; c < res->n_verified; c++) {
        const tune_verified *v = &res->verified[c];
        const tune_point *pt = &res->points[v->point];
        json_t *o = setting_json(pt);
        json_object_set_new(o, "dir", json_string(v->dir));
        json_object_set_new(o, "ran", json_boolean(v->ran));
        if (!v->ran) {
            json_object_set_new(o, "why", json_string(v->why));
        } else {
            const tune_figures *p = &pt->predicted, *m = &v->measured;
            json_object_set_new(o, "predicted", figures_json(p));
            json_object_set_new(o, "measured", figures_json(m));
            json_object_set_new(o, "relative_error", relative_errors_json(p, m));
            json_object_set_new(o, "slo", slo_json(&tc->slo, v->slo_value));
            json_object_set_new(o, "meets_slo", json_boolean(v->meets));
        }
        json_array_append_new(verified, o);
    }
    json_object_set_new(root, "verified", verified);
    return root;
}

void tune_result_free(tune_result *res)
{
    free(res->points);
    free(res->verified);
    memset(res, 0, sizeof *res);
}
