/* merge: shards written from one single-process log, each on its own clock, merged back:
 * the same analysis to the number, tokens in time order, request ids apart; the checks that
 * refuse what is not one experiment, a shard given twice or missing, an incomplete one
 * (and --allow-partial); one shard is a copy; the cross-shard figures' range under the
 * clock uncertainty; damaged shards: a bad row (exit 2, the file named, nothing written), a
 * file cut inside a row or at a row boundary (merged, and said incomplete). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/err.h"
#include "experiment/experiment.h"
#include "report/html.h"
#include "report/load.h"
#include "report/merge.h"
#include "report/plot.h"

#define USERS 6
#define SHARDS 3
#define MS CLOCK_NS_PER_MS
#define T0 1796119200000000000LL /* the single run's t = 0 on the wall clock */
#define INJECT_SEND (1000 * MS)
#define INJECT_FIRST (1150 * MS)

/* ---- the single-process run ------------------------------------------------------------ */

static void add_event(tokenlog *log, int64_t t, int64_t request, int user, int kind)
{
    tokenlog_event ev = {t, request, user, 1, kind};
    assert_int_equal(tokenlog_add_event(log, &ev), 0);
}

/* One request per user streaming every 10 ms (user u shifted by u ms), all of them frozen
 * through the injection's wait [1.000, 1.150] s, except:
 *   user 3 streams through the wait and stalls from 1.147 s: 3 ms inside its end
 *     (aligned: 6 users stalled by the injection);
 *   user 5 stalls from 0.900 to 0.998 s: 2 ms before the send (not aligned);
 *   user 4 stalls at 2.5 s, far from any injection. */
static void single_run(tokenlog *log)
{
    tokenlog_init(log);
    for (int u = 0; u < USERS; u++) {
        tokenlog_request q;
        memset(&q, 0, sizeof q);
        q.request = u;
        q.user = u;
        q.kind = TOKENLOG_BG;
        q.t_plan_ns = q.t_send_ns = q.t_first_ns = -1; /* in flight at t = 0 */
        q.t_end_ns = 3000 * MS;
        q.prompt_tokens_requested = q.prompt_tokens = 50;
        snprintf(q.finish_reason, sizeof q.finish_reason, "abort");
        int64_t index, first_event = log->n_events;
        assert_int_equal(tokenlog_add_request(log, &q, &index), 0);
        for (int64_t t = 20 * MS + u * MS; t < 3000 * MS; t += 10 * MS) {
            bool frozen = u != 3 && t > INJECT_SEND && t < INJECT_FIRST + 5 * MS;
            if (u == 3 && t > 1147 * MS && t < 1260 * MS)
                frozen = true;
            if (u == 5 && t > 900 * MS && t < 998 * MS)
                frozen = true;
            if (u == 4 && t > 2500 * MS && t < 2620 * MS)
                frozen = true;
            if (!frozen)
                add_event(log, t, u, u, TOKENLOG_BG);
            if (u == 3 && t == 1143 * MS)
                add_event(log, 1147 * MS, u, u, TOKENLOG_BG);
            if (u == 5 && t == 895 * MS)
                add_event(log, 900 * MS, u, u, TOKENLOG_BG), add_event(log, 998 * MS, u, u, TOKENLOG_BG);
        }
        /* the tokens it streamed: one per event */
        log->requests[index].completion_tokens = (int32_t)(log->n_events - first_event);
    }
    tokenlog_request inj;
    memset(&inj, 0, sizeof inj);
    inj.request = USERS;
    inj.user = -1;
    inj.kind = TOKENLOG_INJECT;
    inj.t_plan_ns = inj.t_send_ns = INJECT_SEND;
    inj.t_first_ns = INJECT_FIRST;
    inj.t_end_ns = 1200 * MS;
    inj.prompt_tokens_requested = inj.prompt_tokens = 8000;
    inj.completion_tokens = 2;
    snprintf(inj.finish_reason, sizeof inj.finish_reason, "length");
    assert_int_equal(tokenlog_add_request(log, &inj, NULL), 0);
    add_event(log, INJECT_FIRST, USERS, -1, TOKENLOG_INJECT);
    add_event(log, 1190 * MS, USERS, -1, TOKENLOG_INJECT);
}

/* ---- shards cut out of it ------------------------------------------------------------------ */

typedef struct shard_spec {
    int index, count;
    int64_t offset_ns;       /* its t = 0 after the single run's */
    const char *boot_id;
    int64_t maxerror_us;
    int64_t pair_error_ns;
    bool complete;
    int users;               /* the experiment's */
} shard_spec;

static void shard_config(const shard_spec *sp, bool inject, experiment_config *c, experiment_meta *m)
{
    experiment_defaults(c, EXPERIMENT_REMOTE);
    snprintf(c->client.target, sizeof c->client.target, "http://127.0.0.1:9");
    c->wl.users = sp->users;
    c->wl.duration_ns = 3 * CLOCK_NS_PER_S;
    c->wl.inject = inject;
    c->wl.shard = (workload_shard){sp->index, sp->count};
    c->shard.start_at_ns = T0;
    experiment_format_utc(T0, c->shard.start_at, sizeof c->shard.start_at);
    memset(m, 0, sizeof *m);
    snprintf(m->label, sizeof m->label, "%s", inject ? "interference" : "baseline");
    snprintf(m->engine_name, sizeof m->engine_name, "remote test");
    m->complete = sp->complete;
    m->has_client = true;
    m->t0_realtime_ns = T0 + sp->offset_ns;
    /* This kernel's monotonic clock, some days after boot: one host's shards are placed by it. */
    m->t0_monotonic_ns = 345600 * CLOCK_NS_PER_S + sp->offset_ns;
    m->start_late_ns = sp->offset_ns;
    m->clock.maxerror_us = m->clock.esterror_us = sp->maxerror_us;
    m->clock.synchronized = true;
    m->clock.pair_error_ns = sp->pair_error_ns;
    snprintf(m->clock.boot_id, sizeof m->clock.boot_id, "%s", sp->boot_id);
}

/* The shard's part of log: its users (u mod count), the injection in shard 0, times moved
 * to its own t = 0 and request ids renumbered from 0, as a shard's driver would write. */
static void cut_shard(const tokenlog *log, const shard_spec *sp, tokenlog *out)
{
    tokenlog_init(out);
    int64_t map[64];
    for (int64_t i = 0; i < log->n_requests; i++) {
        tokenlog_request q = log->requests[i];
        bool mine = q.kind == TOKENLOG_INJECT ? sp->index == 0 : q.user % sp->count == sp->index;
        map[i] = -1;
        if (!mine)
            continue;
        map[i] = out->n_requests;
        q.request = out->n_requests;
        int64_t *times[] = {&q.t_plan_ns, &q.t_send_ns, &q.t_first_ns, &q.t_end_ns};
        for (int k = 0; k < 4; k++)
            if (*times[k] >= 0)
                *times[k] -= sp->offset_ns;
        assert_int_equal(tokenlog_add_request(out, &q, NULL), 0);
    }
    for (int64_t i = 0; i < log->n_events; i++) {
        tokenlog_event ev = log->events[i];
        if (map[ev.request] < 0)
            continue;
        ev.request = map[ev.request];
        ev.t_ns -= sp->offset_ns;
        assert_true(ev.t_ns >= 0);
        assert_int_equal(tokenlog_add_event(out, &ev), 0);
    }
}

/* The driver appends events as they arrive: time order. */
static int cmp_event_time(const void *a, const void *b)
{
    const tokenlog_event *x = a, *y = b;
    return (x->t_ns > y->t_ns) - (x->t_ns < y->t_ns);
}

static void write_run(const char *dir, const shard_spec *sp, bool inject, tokenlog *log)
{
    char err[ERR_LEN] = "", path[600];
    experiment_config c;
    experiment_meta m;
    shard_config(sp, inject, &c, &m);
    qsort(log->events, (size_t)log->n_events, sizeof *log->events, cmp_event_time);
    if (tokenlog_write_dir(log, dir, err) != 0)
        fail_msg("%s", err);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (experiment_config_write(path, &c, &m, err) != 0)
        fail_msg("%s", err);
}

/* ROOT/<name>/{baseline,interference}: the shard of the single run (the baseline is the
 * same log without its injection). */
static void write_shard(const char *root, const char *name, const shard_spec *sp)
{
    tokenlog single, part;
    single_run(&single);
    char dir[600];
    cut_shard(&single, sp, &part);
    snprintf(dir, sizeof dir, "%s/%s/interference", root, name);
    write_run(dir, sp, true, &part);
    tokenlog_free(&part);
    single.n_requests--; /* the baseline: no injection, no injected tokens */
    single.n_events -= 2;
    cut_shard(&single, sp, &part);
    snprintf(dir, sizeof dir, "%s/%s/baseline", root, name);
    write_run(dir, sp, false, &part);
    tokenlog_free(&part);
    tokenlog_free(&single);
}

static const shard_spec ONE_HOST[SHARDS] = {
    {0, SHARDS, 5 * MS, "boot-1", 16000000, 40, true, USERS},
    {1, SHARDS, 0, "boot-1", 16000000, 30, true, USERS},
    {2, SHARDS, 9 * MS, "boot-1", 16000000, 50, true, USERS},
};

static void make_root(char *root, size_t size)
{
    snprintf(root, size, "/tmp/test_merge_XXXXXX");
    assert_non_null(mkdtemp(root));
}

static void remove_root(const char *root)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

typedef struct merge_call {
    char dirs[8][600];
    char *ptrs[8];
    int n;
    char out[600];
} merge_call;

static int run_merge(merge_call *mc, const char *root, const char *const *names, int n,
                     bool allow_partial, bool *complete, char *err)
{
    memset(mc, 0, sizeof *mc);
    for (int i = 0; i < n; i++) {
        snprintf(mc->dirs[i], sizeof mc->dirs[i], "%s/%s", root, names[i]);
        mc->ptrs[i] = mc->dirs[i];
    }
    mc->n = n;
    snprintf(mc->out, sizeof mc->out, "%s/merged", root);
    char *argv[] = {"report", "--merge"};
    report_merge_options opt = {.dirs = mc->ptrs, .n_dirs = n, .out = mc->out,
                                .allow_partial = allow_partial, .force = true, .argc = 2,
                                .argv = argv, .notes = NULL};
    return report_merge(&opt, complete, err);
}

static void summarize_dir(const char *dir, double threshold_ms, tokenlog *log, analysis_summary *s)
{
    char err[ERR_LEN] = "";
    int64_t cut = 0;
    if (tokenlog_read_dir(log, dir, &cut, err) != 0)
        fail_msg("%s", err);
    assert_int_equal(cut, 0);
    analysis_options opt = {.label = "x", .users = USERS, .threshold_ms = threshold_ms,
                            .duration_s = 3, .complete = true};
    if (analysis_summarize(log, &opt, s, err) != 0)
        fail_msg("%s", err);
}

/* ---- tests ----------------------------------------------------------------------------------- */

/* Three shards on one host, started 5, 0 and 9 ms apart, merge back into the single run:
 * every figure the same, tokens in time order, the request ids of each shard a range of
 * its own. */
static void test_merge_equals_single_run(void **state)
{
    (void)state;
    char root[64], err[ERR_LEN] = "", dir[700];
    make_root(root, sizeof root);
    const char *names[SHARDS] = {"s2", "s0", "s1"}; /* any order */
    for (int i = 0; i < SHARDS; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", i);
        write_shard(root, name, &ONE_HOST[i]);
    }
    merge_call mc;
    bool complete = false;
    int rc = run_merge(&mc, root, names, SHARDS, false, &complete, err);
    if (rc != 0)
        fail_msg("merge: %s", err);
    assert_true(complete);

    tokenlog single, merged;
    single_run(&single);
    analysis_summary want, got;
    analysis_options opt = {.label = "x", .users = USERS, .threshold_ms = 50, .duration_s = 3,
                            .complete = true};
    assert_int_equal(analysis_summarize(&single, &opt, &want, err), 0);
    snprintf(dir, sizeof dir, "%s/interference", mc.out);
    summarize_dir(dir, 50, &merged, &got);
    /* The earliest shard (s1) sets t = 0, which is the single run's: the same numbers. */
    assert_int_equal(got.tokens_received, want.tokens_received);
    assert_memory_equal(&got.itl_ms, &want.itl_ms, sizeof got.itl_ms);
    assert_memory_equal(&got.stalls, &want.stalls, sizeof got.stalls);
    assert_int_equal(got.n_injections, 1);
    assert_memory_equal(got.injections, want.injections, sizeof *got.injections);
    assert_int_equal(want.stalls.count, 8); /* 5 frozen users, user 3, user 5, user 4 */
    assert_int_equal(want.stalls.aligned, 6);
    assert_int_equal(want.injections[0].users_stalled, 6);

    /* Time order, and request ids: 0-based ranges per shard, in shard order. */
    assert_int_equal(merged.n_events, single.n_events);
    for (int64_t i = 1; i < merged.n_events; i++)
        assert_true(merged.events[i - 1].t_ns <= merged.events[i].t_ns);
    assert_int_equal(merged.n_requests, USERS + 1);
    for (int64_t i = 0; i < merged.n_requests; i++)
        assert_int_equal(merged.requests[i].request, i);
    /* shard 0: users 0, 3 and the injection; shard 1: users 1, 4; shard 2: users 2, 5 */
    const int users_in_order[USERS + 1] = {0, 3, -1, 1, 4, 2, 5};
    for (int64_t i = 0; i < merged.n_requests; i++)
        assert_int_equal(merged.requests[i].user, users_in_order[i]);
    for (int64_t i = 0; i < merged.n_events; i++)
        assert_int_equal(merged.requests[merged.events[i].request].user, merged.events[i].user);

    /* The run's record: one unsharded run with the merge's. */
    experiment_config c;
    experiment_meta m;
    char path[800];
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(experiment_config_read(path, &c, &m, err), 0);
    assert_int_equal(c.wl.shard.count, 0);
    assert_int_equal(m.merge.shards, SHARDS);
    assert_string_equal(m.merge.merged, "0,1,2");
    assert_string_equal(m.merge.missing, "");
    assert_int_equal(m.merge.users, USERS);
    assert_int_equal(m.merge.t0_realtime_ns, T0);
    assert_true(m.merge.one_host);
    assert_int_equal(m.merge.clock_uncertainty_ns, 0); /* one kernel's monotonic clock */
    assert_true(m.complete);
    assert_string_equal(m.argv[1], "--merge");
    experiment_meta_free(&m);

    /* Through the report's loader: users, and no bounds: one kernel's clock is exact. */
    report_set set;
    assert_int_equal(report_set_load(&set, mc.out, 50, true, NULL, err), 0);
    const report_run *x = report_set_main(&set);
    assert_non_null(x);
    assert_int_equal(x->summary.users, USERS);
    assert_int_equal(x->summary.stalls.aligned, 6);
    assert_false(x->has_bounds);
    report_set_free(&set);

    analysis_summary_free(&want);
    analysis_summary_free(&got);
    tokenlog_free(&single);
    tokenlog_free(&merged);
    remove_root(root);
}

/* Shards on two hosts whose kernels allow 2 ms each: a stall 2 ms before the send may
 * align, one inside the wait's last 3 ms may not: the figures come with that range. */
static void test_cross_host_bounds(void **state)
{
    (void)state;
    char root[64], err[ERR_LEN] = "";
    make_root(root, sizeof root);
    shard_spec specs[SHARDS];
    memcpy(specs, ONE_HOST, sizeof specs);
    specs[1].boot_id = "boot-2";
    for (int i = 0; i < SHARDS; i++) {
        specs[i].maxerror_us = 2000;
        char name[16];
        snprintf(name, sizeof name, "s%d", i);
        write_shard(root, name, &specs[i]);
    }
    const char *names[SHARDS] = {"s0", "s1", "s2"};
    merge_call mc;
    bool complete;
    if (run_merge(&mc, root, names, SHARDS, false, &complete, err) != 0)
        fail_msg("%s", err);
    report_set set;
    assert_int_equal(report_set_load(&set, mc.out, 50, true, NULL, err), 0);
    const report_run *x = report_set_main(&set);
    assert_false(x->meta.merge.one_host);
    assert_int_equal(x->meta.merge.clock_uncertainty_ns, 4000000 + 30 + 50); /* shards 1, 2 */
    assert_true(x->has_bounds);
    assert_int_equal(x->summary.stalls.aligned, 6);
    assert_int_equal(x->bound_lo.stalls.aligned, 5); /* user 3's 3 ms inside: not for sure */
    assert_int_equal(x->bound_hi.stalls.aligned, 7); /* user 5's 2 ms before: possibly */
    assert_int_equal(x->bound_lo.stalls.count, x->summary.stalls.count); /* gaps: no change */
    assert_int_equal(x->bound_lo.injections[0].users_stalled, 5);
    assert_int_equal(x->bound_hi.injections[0].users_stalled, 6);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    report_merge_print(f, x);
    fclose(f);
    assert_non_null(strstr(text, "shards merged: 0,1,2 (of 3)"));
    assert_non_null(strstr(text, "agree within ±4.0 ms (the kernels' maxerror"));
    assert_non_null(strstr(text, "stalls aligned with an injection: 6 of 8 (5..7)"));
    assert_non_null(strstr(text, "injection 1 at 1.000 s: users stalled 6/6 (5..6)"));
    free(text);
    /* The page: the same lines in its "Shards and clocks" section, the range beside the
     * users stalled in the injections table. */
    html_options ho = {.predict = false};
    if (html_write_run_report(&set, &ho, err) != 0)
        fail_msg("%s", err);
    plot_release_caches();
    char page_path[700];
    snprintf(page_path, sizeof page_path, "%s/report.html", mc.out);
    FILE *pf = fopen(page_path, "r");
    assert_non_null(pf);
    static char page[1 << 20];
    size_t n = fread(page, 1, sizeof page - 1, pf);
    page[n] = '\0';
    fclose(pf);
    const char *shards = strstr(page, "<section id=\"shards\">");
    assert_non_null(shards);
    assert_non_null(strstr(shards, "stalls aligned with an injection: 6 of 8 (5..7)"));
    assert_non_null(strstr(strstr(page, "<section id=\"injections\">"), "<td>6/6 (5..6)</td>"));
    /* The baseline has no injection: nothing to bound. */
    assert_false(report_set_baseline(&set)->has_bounds);
    report_set_free(&set);
    remove_root(root);
}

static void expect_refused(const char *root, const char *const *names, int n, const char *want)
{
    char err[ERR_LEN] = "";
    merge_call mc;
    bool complete = true;
    int rc = run_merge(&mc, root, names, n, false, &complete, err);
    if (rc != -2)
        fail_msg("merge of %d shards returned %d, expected -2 (%s)", n, rc, want);
    if (!strstr(err, want))
        fail_msg("error '%s' lacks '%s'", err, want);
}

/* What is not one whole experiment is bad input, with the reason; --allow-partial merges
 * the complete shards, marked incomplete. */
static void test_refusals_and_partial(void **state)
{
    (void)state;
    char root[64], err[ERR_LEN] = "";
    make_root(root, sizeof root);
    for (int i = 0; i < SHARDS; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", i);
        write_shard(root, name, &ONE_HOST[i]);
    }
    shard_spec odd = ONE_HOST[1];
    odd.users = USERS + 1;
    write_shard(root, "other", &odd);
    shard_spec dead = ONE_HOST[1];
    dead.complete = false;
    write_shard(root, "dead", &dead);
    shard_spec single = {0, 1, 0, "boot-1", 100, 10, true, USERS};
    write_shard(root, "alone", &single);
    char path[700];
    snprintf(path, sizeof path, "%s/empty", root);
    assert_int_equal(mkdir(path, 0777), 0);

    const char *other[] = {"s0", "other", "s2"};
    expect_refused(root, other, 3, "is not a shard of the experiment in");
    expect_refused(root, other, 3, "differ in workload.users (6 vs 7)");
    const char *twice[] = {"s0", "s1", "s1"};
    expect_refused(root, twice, 3, "shard 1/3 is given twice");
    const char *missing[] = {"s0", "s2"};
    expect_refused(root, missing, 2, "cannot merge: shard 1/3: not given");
    const char *incomplete[] = {"s0", "dead", "s2"};
    expect_refused(root, incomplete, 3, "/dead/baseline): incomplete (it stopped early, most of "
                                        "its requests failed, or it was killed");
    expect_refused(root, incomplete, 3, "--allow-partial merges the complete shards");
    const char *empty[] = {"empty"};
    expect_refused(root, empty, 1, "no baseline/config.json or interference/config.json");
    const char *nothing[] = {"nowhere"};
    expect_refused(root, nothing, 1, "No such file");

    /* An unsharded run is not a shard. */
    char cfgpath[800];
    experiment_config c;
    experiment_meta m;
    snprintf(cfgpath, sizeof cfgpath, "%s/alone/interference/config.json", root);
    assert_int_equal(experiment_config_read(cfgpath, &c, &m, err), 0);
    c.wl.shard.count = 0;
    memset(&c.shard, 0, sizeof c.shard);
    assert_int_equal(experiment_config_write(cfgpath, &c, &m, err), 0);
    snprintf(cfgpath, sizeof cfgpath, "%s/alone/baseline/config.json", root);
    assert_int_equal(experiment_config_write(cfgpath, &c, &m, err), 0);
    experiment_meta_free(&m);
    const char *plain[] = {"alone"};
    expect_refused(root, plain, 1, "not a shard");

    /* The output may not overlap an input (--force would delete it). */
    merge_call mc;
    bool complete = true;
    memset(&mc, 0, sizeof mc);
    snprintf(mc.dirs[0], sizeof mc.dirs[0], "%s/s0", root);
    mc.ptrs[0] = mc.dirs[0];
    report_merge_options over = {.dirs = mc.ptrs, .n_dirs = 1, .out = mc.dirs[0], .force = true};
    assert_int_equal(report_merge(&over, &complete, err), -2);
    assert_non_null(strstr(err, "overlaps the shard directory"));
    snprintf(path, sizeof path, "%s/s0/interference/tokens.csv", root);
    assert_int_equal(access(path, F_OK), 0); /* untouched */
    snprintf(path, sizeof path, "%s/s0/new/merged", root); /* inside one, not there yet */
    over.out = path;
    assert_int_equal(report_merge(&over, &complete, err), -2);
    assert_non_null(strstr(err, "overlaps the shard directory"));
    snprintf(path, sizeof path, "%s/s0/new", root);
    assert_int_equal(access(path, F_OK), -1);

    /* --allow-partial: shards 0 and 2 merged, 1 left out, the run marked incomplete. */
    assert_int_equal(run_merge(&mc, root, incomplete, 3, true, &complete, err), 0);
    assert_false(complete);
    snprintf(cfgpath, sizeof cfgpath, "%s/interference/config.json", mc.out);
    assert_int_equal(experiment_config_read(cfgpath, &c, &m, err), 0);
    assert_false(m.complete);
    assert_string_equal(m.merge.merged, "0,2");
    assert_string_equal(m.merge.missing, "1");
    assert_int_equal(m.merge.users, 4); /* users 0, 3 and 2, 5 */
    experiment_meta_free(&m);
    tokenlog merged;
    analysis_summary s;
    snprintf(path, sizeof path, "%s/interference", mc.out);
    summarize_dir(path, 50, &merged, &s);
    for (int64_t i = 0; i < merged.n_events; i++)
        assert_true(merged.events[i].user != 1 && merged.events[i].user != 4);
    assert_int_equal(s.n_injections, 1);
    analysis_summary_free(&s);
    tokenlog_free(&merged);
    snprintf(path, sizeof path, "%s/merge.json", mc.out);
    json_t *mj = json_load_file(path, 0, NULL);
    assert_non_null(mj);
    assert_true(json_is_false(json_object_get(mj, "complete")));
    assert_non_null(strstr(json_string_value(json_array_get(json_object_get(mj, "problems"), 0)),
                           "shard 1/3"));
    json_decref(mj);
    remove_root(root);
}

/* cmp(1): the same bytes. */
static bool same_file(const char *a, const char *b)
{
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

/* A one-shard experiment merged is a copy of its rows. */
static void test_one_shard_is_a_copy(void **state)
{
    (void)state;
    char root[64], err[ERR_LEN] = "", a[800], b[800];
    make_root(root, sizeof root);
    shard_spec one = {0, 1, 7 * MS, "boot-1", 100, 10, true, USERS};
    write_shard(root, "only", &one);
    const char *names[] = {"only"};
    merge_call mc;
    bool complete = false;
    assert_int_equal(run_merge(&mc, root, names, 1, false, &complete, err), 0);
    assert_true(complete);
    const char *files[] = {"interference/tokens.csv", "interference/requests.csv",
                           "baseline/tokens.csv", "baseline/requests.csv"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(a, sizeof a, "%s/only/%s", root, files[i]);
        snprintf(b, sizeof b, "%s/%s", mc.out, files[i]);
        if (!same_file(a, b))
            fail_msg("%s is not a copy of %s", b, a);
    }
    experiment_config c;
    experiment_meta m;
    snprintf(a, sizeof a, "%s/interference/config.json", mc.out);
    assert_int_equal(experiment_config_read(a, &c, &m, err), 0);
    assert_int_equal(m.merge.clock_uncertainty_ns, 0); /* nothing to compare across */
    assert_int_equal(m.merge.t0_realtime_ns, T0 + 7 * MS);
    experiment_meta_free(&m);
    remove_root(root);
}

/* ---- damaged shards --------------------------------------------------------------------- */

static void read_whole(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    *text = malloc((size_t)n + 1);
    assert_non_null(*text);
    assert_int_equal(fread(*text, 1, (size_t)n, f), (size_t)n);
    (*text)[n] = '\0';
    *len = (size_t)n;
    fclose(f);
}

/* Replace line line_no (1: the header) of path with text. */
static void replace_line(const char *path, int line_no, const char *text)
{
    char *old;
    size_t len;
    read_whole(path, &old, &len);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    const char *p = old;
    for (int line = 1; *p; line++) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) + 1 : strlen(p);
        if (line == line_no)
            fprintf(f, "%s\n", text);
        else
            fwrite(p, 1, n, f);
        p += n;
    }
    fclose(f);
    free(old);
}

/* Drop path's last `rows` rows (a cut at a row boundary), or with mid_row only the last
 * three bytes of its last row (a cut inside it). */
static void cut_file(const char *path, int rows, bool mid_row)
{
    char *text;
    size_t len;
    read_whole(path, &text, &len);
    size_t keep = len;
    if (mid_row) {
        keep = len - 3;
    } else {
        for (int k = 0; k <= rows; k++) /* back over `rows` + 1 newlines */
            while (keep > 0 && text[--keep] != '\n')
                ;
        keep++;
    }
    free(text);
    assert_int_equal(truncate(path, (off_t)keep), 0);
}

/* Entries of root whose name holds needle (a staging directory left behind). */
static int entries_with(const char *root, const char *needle)
{
    DIR *d = opendir(root);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strstr(e->d_name, needle) != NULL;
    closedir(d);
    return n;
}

/* A bad row in shard 1's tokens.csv: bad input (-2, exit 2) naming the file and line, and
 * nothing of the merge is left: no --out, no staging directory beside it; an earlier run in
 * --out (--force) is still there as it was. */
static void test_bad_row_in_a_shard(void **state)
{
    (void)state;
    char root[64], err[ERR_LEN] = "", path[700], want[800], saved[800];
    make_root(root, sizeof root);
    const char *names[SHARDS] = {"s0", "s1", "s2"};
    for (int i = 0; i < SHARDS; i++)
        write_shard(root, names[i], &ONE_HOST[i]);
    merge_call mc;
    bool complete = false;
    assert_int_equal(run_merge(&mc, root, names, SHARDS, false, &complete, err), 0);
    char cmd[2000];
    snprintf(saved, sizeof saved, "%s/saved-tokens.csv", root);
    snprintf(cmd, sizeof cmd, "cp '%s/interference/tokens.csv' '%s'", mc.out, saved);
    assert_int_equal(system(cmd), 0);

    /* The baseline merges first: the failure comes with half the merge written. */
    snprintf(path, sizeof path, "%s/s1/interference/tokens.csv", root);
    replace_line(path, 5, "x,1,0,bg,1");
    snprintf(want, sizeof want, "%s:5: t_ns is 'x', not an integer", path);
    complete = true;
    int rc = run_merge(&mc, root, names, SHARDS, false, &complete, err);
    if (rc != -2 || !strstr(err, want))
        fail_msg("merge returned %d with '%s', expected -2 with '%s'", rc, err, want);
    assert_false(complete);
    snprintf(path, sizeof path, "%s/interference/tokens.csv", mc.out);
    if (!same_file(path, saved))
        fail_msg("the earlier run in %s was changed by a merge that failed", mc.out);
    snprintf(path, sizeof path, "%s/merge.json", mc.out);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(entries_with(root, "merging"), 0);

    /* No earlier run: none after the failure either. */
    remove_root(mc.out);
    assert_int_equal(run_merge(&mc, root, names, SHARDS, false, &complete, err), -2);
    assert_non_null(strstr(err, want));
    assert_int_equal(access(mc.out, F_OK), -1);
    assert_int_equal(entries_with(root, "merged"), 0);
    /* --out's parents made for the merge go with it */
    snprintf(path, sizeof path, "%s/new/deeper/merged", root);
    report_merge_options deep = {.dirs = mc.ptrs, .n_dirs = SHARDS, .out = path};
    assert_int_equal(report_merge(&deep, &complete, err), -2);
    assert_non_null(strstr(err, want));
    assert_int_equal(entries_with(root, "new"), 0);
    /* requests.csv: the same */
    snprintf(path, sizeof path, "%s/s1/interference/tokens.csv", root);
    write_shard(root, "s1", &ONE_HOST[1]);
    snprintf(path, sizeof path, "%s/s2/baseline/requests.csv", root);
    replace_line(path, 2, "0,2,bg,-1,-1,-1,3000000000,50,50,300,abort");
    assert_int_equal(run_merge(&mc, root, names, SHARDS, false, &complete, err), -2);
    snprintf(want, sizeof want, "%s:2: 11 fields, expected 12", path);
    if (!strstr(err, want))
        fail_msg("error '%s' lacks '%s'", err, want);
    assert_int_equal(access(mc.out, F_OK), -1);
    remove_root(root);
}

/* The problems of a merge (merge.json), joined; the caller frees it. */
static char *merge_problems(const char *out)
{
    char path[700];
    snprintf(path, sizeof path, "%s/merge.json", out);
    json_t *mj = json_load_file(path, 0, NULL);
    assert_non_null(mj);
    assert_true(json_is_false(json_object_get(mj, "complete")));
    json_t *problems = json_object_get(mj, "problems");
    char *text = calloc(1, 8192);
    assert_non_null(text);
    for (size_t i = 0; i < json_array_size(problems); i++) {
        strncat(text, json_string_value(json_array_get(problems, i)), 8192 - strlen(text) - 2);
        strcat(text, "\n");
    }
    json_decref(mj);
    return text;
}

static bool run_complete(const char *out, const char *label)
{
    char path[700], err[ERR_LEN] = "";
    experiment_config c;
    experiment_meta m;
    snprintf(path, sizeof path, "%s/%s/config.json", out, label);
    if (experiment_config_read(path, &c, &m, err) != 0)
        fail_msg("%s", err);
    bool complete = m.complete;
    experiment_meta_free(&m);
    return complete;
}

/* Shard 1's tokens.csv cut inside its last row (a shard's file copied while written): its
 * whole rows are merged, the cut row dropped, and the merged run is incomplete, as `report`
 * says of the shard alone. */
static void test_cut_shard_mid_row(void **state)
{
    (void)state;
    char root[64], err[ERR_LEN] = "", path[700];
    make_root(root, sizeof root);
    const char *names[SHARDS] = {"s0", "s1", "s2"};
    for (int i = 0; i < SHARDS; i++)
        write_shard(root, names[i], &ONE_HOST[i]);
    snprintf(path, sizeof path, "%s/s1/interference/tokens.csv", root);
    cut_file(path, 0, true);
    merge_call mc;
    bool complete = true;
    if (run_merge(&mc, root, names, SHARDS, false, &complete, err) != 0)
        fail_msg("%s", err);
    assert_false(complete);
    assert_false(run_complete(mc.out, "interference"));
    assert_true(run_complete(mc.out, "baseline"));
    char *problems = merge_problems(mc.out);
    char want[800];
    snprintf(want, sizeof want, "shard 1/3 (%s/s1/interference): tokens.csv ends inside a row",
             root);
    if (!strstr(problems, want))
        fail_msg("problems '%s' lack '%s'", problems, want);
    free(problems);
    report_set set;
    assert_int_equal(report_set_load(&set, mc.out, 50, true, NULL, err), 0);
    assert_false(report_set_main(&set)->summary.complete);
    report_set_free(&set);
    remove_root(root);
}

/* Rewrite dir's rows: user 0's request still open at the end (t_end_ns -1, no count yet),
 * or every request sent at t = 0 (not carried over from a warm-up). */
static void edit_requests(const char *dir, bool open_user0, bool sent_at_0)
{
    char err[ERR_LEN] = "";
    tokenlog log;
    if (tokenlog_read_dir(&log, dir, NULL, err) != 0)
        fail_msg("%s", err);
    for (int64_t i = 0; i < log.n_requests; i++) {
        tokenlog_request *q = &log.requests[i];
        if (open_user0 && q->user == 0) {
            q->t_end_ns = -1;
            q->completion_tokens = 0;
        }
        if (sent_at_0 && q->t_send_ns < 0)
            q->t_plan_ns = q->t_send_ns = 0;
    }
    if (tokenlog_write_dir(&log, dir, err) != 0)
        fail_msg("%s", err);
    tokenlog_free(&log);
}

/* Cuts at a row boundary, found by the cross-check of requests.csv against tokens.csv:
 * shard 1's tokens.csv without its last 9 rows (its requests, sent at t = 0, count more
 * tokens than their rows carry), shard 2's baseline requests.csv without its last row (tokens
 * of a request it does not list). Not checked: the count of a request the run never saw end
 * (t_end_ns -1), and a shortfall in one carried over from the warm-up (shard 2's
 * interference run cut too: its requests were sent before t = 0, their first tokens counted
 * but not logged). */
static void test_cut_shard_at_row_boundary(void **state)
{
    (void)state;
    char root[64], err[ERR_LEN] = "", path[700], want[800];
    make_root(root, sizeof root);
    const char *names[SHARDS] = {"s0", "s1", "s2"};
    for (int i = 0; i < SHARDS; i++)
        write_shard(root, names[i], &ONE_HOST[i]);
    snprintf(path, sizeof path, "%s/s0/interference", root);
    edit_requests(path, true, false);
    snprintf(path, sizeof path, "%s/s1/interference", root);
    edit_requests(path, false, true);
    merge_call mc;
    bool complete = false;
    if (run_merge(&mc, root, names, SHARDS, false, &complete, err) != 0)
        fail_msg("%s", err);
    assert_true(complete);

    snprintf(path, sizeof path, "%s/s1/interference/tokens.csv", root);
    cut_file(path, 9, false);
    snprintf(path, sizeof path, "%s/s2/baseline/requests.csv", root);
    cut_file(path, 1, false);
    snprintf(path, sizeof path, "%s/s2/interference/tokens.csv", root);
    cut_file(path, 9, false);
    complete = true;
    if (run_merge(&mc, root, names, SHARDS, false, &complete, err) != 0)
        fail_msg("%s", err);
    assert_false(complete);
    assert_false(run_complete(mc.out, "interference"));
    assert_false(run_complete(mc.out, "baseline"));
    /* What the cut shard's files say of its first request (user 1). */
    tokenlog log;
    snprintf(path, sizeof path, "%s/s1/interference", root);
    assert_int_equal(tokenlog_read_dir(&log, path, NULL, err), 0);
    int64_t carried = 0;
    for (int64_t i = 0; i < log.n_events; i++)
        carried += log.events[i].request == 0 ? log.events[i].n_tokens : 0;
    char *problems = merge_problems(mc.out);
    snprintf(want, sizeof want,
             "shard 1/3 (%s/s1/interference): request 0 (user 1): requests.csv counts %d "
             "tokens, its rows in tokens.csv carry %lld",
             root, log.requests[0].completion_tokens, (long long)carried);
    assert_true(carried < log.requests[0].completion_tokens);
    if (!strstr(problems, want))
        fail_msg("problems '%s' lack '%s'", problems, want);
    tokenlog_free(&log);
    snprintf(want, sizeof want, "shard 2/3 (%s/s2/baseline): tokens.csv has tokens of request 1 "
             "(user 5), which requests.csv does not list", root);
    if (!strstr(problems, want))
        fail_msg("problems '%s' lack '%s'", problems, want);
    /* user 5's rows have no merged id: left out, not put on another shard's */
    snprintf(path, sizeof path, "%s/baseline", mc.out);
    assert_int_equal(tokenlog_read_dir(&log, path, NULL, err), 0);
    for (int64_t i = 0; i < log.n_events; i++)
        assert_int_not_equal(log.events[i].user, 5);
    tokenlog_free(&log);
    assert_null(strstr(problems, "shard 0/3"));
    assert_null(strstr(problems, "s2/interference"));
    free(problems);
    remove_root(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_equals_single_run),
        cmocka_unit_test(test_cross_host_bounds),
        cmocka_unit_test(test_refusals_and_partial),
        cmocka_unit_test(test_one_shard_is_a_copy),
        cmocka_unit_test(test_bad_row_in_a_shard),
        cmocka_unit_test(test_cut_shard_mid_row),
        cmocka_unit_test(test_cut_shard_at_row_boundary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
