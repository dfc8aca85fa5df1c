/* merge — shards into one run, and the cross-shard figures with their clock uncertainty
 * (merge.h). */
#include "report/merge.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/fsio.h"
#include "client/chunk.h"
#include "common/units.h"
#include "experiment/outdir.h"
#include "experiment/pair.h"
#include "experiment/shard.h"
#include "report/table.h"

/* The runs of a shard's directory: its baseline, and its interference run (--no-inject's
 * traffic run: experiment/pair.h). */
#define N_LABELS 2
#define MAX_INJECTION_LINES 20

/* A request of a shard's requests.csv, against its rows in tokens.csv (the cross-check). */
typedef struct request_count {
    int64_t request;   /* the shard's own id */
    int32_t user;
    int32_t counted;   /* completion_tokens: the tokens requests.csv says it streamed */
    bool open;         /* never ended (t_end_ns -1): no final count */
    bool before_t0;    /* sent before t = 0 (t_send_ns -1, the warm-up's): its first tokens
                          are counted but not in tokens.csv */
    int64_t carried;   /* the tokens its rows in tokens.csv carry */
} request_count;

/* One run (baseline or interference) of one shard's directory. */
typedef struct shard_run {
    bool present;          /* DIR/<label>/config.json was read */
    char dir[4200];        /* DIR/<label> */
    experiment_config cfg;
    experiment_meta meta;
    int64_t offset_ns;     /* its t = 0 on the merged axis */
    int64_t id_from;       /* its first request id in the merged run */
    int64_t requests, events, out_of_order;
    int64_t tokens_cut, requests_cut; /* last rows cut short (no newline), dropped */
    request_count *counts; /* requests.csv's rows by id */
    int64_t n_counts, cap_counts;
    int64_t unlisted_rows;            /* token rows of requests requests.csv does not list */
    int64_t unlisted_request;         /* the first of them */
    int32_t unlisted_user;
} shard_run;

typedef struct merge_state {
    const report_merge_options *opt;
    const char *dir;            /* where the merged run is built (beside opt->out) */
    int count;                  /* N: shards in the experiment */
    shard_run *runs[N_LABELS];  /* [label][dir] */
    int *by_index;              /* shard index -> dir, -1 when not given */
    json_t *problems;           /* what keeps the merge partial, in words */
    bool label_complete[N_LABELS];
    const char *label[N_LABELS]; /* the runs' labels (their directories' names) */
} merge_state;

static int bad_input(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, ERR_LEN, fmt, ap);
    va_end(ap);
    return -2;
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int64_t moved(int64_t t, int64_t offset)
{
    return t < 0 ? t : t + offset; /* -1: never happened */
}

/* ---- reading and checking the shards ------------------------------------------------------ */

static int load_dirs(merge_state *st, char *err)
{
    const report_merge_options *opt = st->opt;
    for (int d = 0; d < opt->n_dirs; d++) {
        struct stat sb;
        if (stat(opt->dirs[d], &sb) != 0)
            return bad_input(err, "%s: %s", opt->dirs[d], strerror(errno));
        if (!S_ISDIR(sb.st_mode))
            return bad_input(err, "%s: not a directory", opt->dirs[d]);
        const shard_run *first = NULL;
        for (int l = 0; l < N_LABELS; l++) {
            shard_run *r = &st->runs[l][d];
            char path[4300], why[ERR_LEN];
            snprintf(r->dir, sizeof r->dir, "%s/%s", opt->dirs[d], st->label[l]);
            snprintf(path, sizeof path, "%s/config.json", r->dir);
            if (l == 1 && !is_file(path)) {
                /* Shards run with --no-inject: the traffic run alone (the config check below
                 * holds every shard to the first's). */
                snprintf(path, sizeof path, "%s/" EXPERIMENT_RUN_TRAFFIC "/config.json",
                         opt->dirs[d]);
                if (is_file(path)) {
                    st->label[l] = EXPERIMENT_RUN_TRAFFIC;
                    snprintf(r->dir, sizeof r->dir, "%s/%s", opt->dirs[d], st->label[l]);
                }
            }
            if (!is_file(path))
                continue;
            if (experiment_config_read(path, &r->cfg, &r->meta, why) != 0)
                return bad_input(err, "%s", why);
            r->present = true;
            if (!first)
                first = r;
        }
        if (!first)
            return bad_input(err, "%s: no baseline/config.json or interference/config.json "
                                  "(give each shard's --out directory)",
                             opt->dirs[d]);
        if (first->cfg.wl.shard.count <= 0)
            return bad_input(err, "%s: not a shard (its config.json has no shard section: run "
                                  "with --shard I/N --start-at TIME)",
                             first->dir);
    }
    return 0;
}

static const shard_run *first_run(const merge_state *st, int d)
{
    for (int l = 0; l < N_LABELS; l++)
        if (st->runs[l][d].present)
            return &st->runs[l][d];
    return NULL;
}

/* A problem's words: a shard's directory and what is wrong with it. */
#define PROBLEM_LEN 5000

/* A problem in merge.json's "problems": label incomplete. With damage (a merged shard's
 * files, found while merging) it is said on opt->warn at once. */
static void add_problem(merge_state *st, int label, bool damage, const char *fmt, ...)
{
    char text[PROBLEM_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    json_array_append_new(st->problems, json_string(text));
    st->label_complete[label] = false;
    if (damage && st->opt->warn)
        fprintf(st->opt->warn, "stallscope report: warning: %s; the merged run is incomplete\n",
                text);
}

/* One experiment, each index once, every run complete (else the problems). */
static int check_shards(merge_state *st, char *err)
{
    const report_merge_options *opt = st->opt;
    const shard_run *ref = first_run(st, 0);
    st->count = ref->cfg.wl.shard.count;
    for (int d = 0; d < opt->n_dirs; d++)
        for (int l = 0; l < N_LABELS; l++) {
            const shard_run *r = &st->runs[l][d];
            char field[240];
            if (r->present && experiment_config_differ(&ref->cfg, &r->cfg, field, sizeof field))
                return bad_input(err, "%s is not a shard of the experiment in %s: they differ in %s",
                                 r->dir, ref->dir, field);
        }
    if (!(st->by_index = malloc((size_t)st->count * sizeof *st->by_index)))
        return err_set(err, "out of memory");
    for (int i = 0; i < st->count; i++)
        st->by_index[i] = -1;
    for (int d = 0; d < opt->n_dirs; d++) {
        int index = first_run(st, d)->cfg.wl.shard.index;
        if (st->by_index[index] >= 0)
            return bad_input(err, "shard %d/%d is given twice: %s and %s", index, st->count,
                             opt->dirs[st->by_index[index]], opt->dirs[d]);
        st->by_index[index] = d;
    }
    for (int l = 0; l < N_LABELS; l++) {
        bool used = false;
        for (int d = 0; d < opt->n_dirs; d++)
            used = used || st->runs[l][d].present;
        st->label_complete[l] = true;
        if (!used)
            continue; /* no shard ran it (--no-baseline) */
        for (int i = 0; i < st->count; i++) {
            int d = st->by_index[i];
            if (d < 0)
                add_problem(st, l, false, "shard %d/%d: not given (its %s run is missing)", i,
                            st->count, st->label[l]);
            else if (!st->runs[l][d].present)
                add_problem(st, l, false, "shard %d/%d (%s): no %s run (it stopped before it)", i,
                            st->count, opt->dirs[d], st->label[l]);
            else if (!st->runs[l][d].meta.complete)
                add_problem(st, l, false,
                            "shard %d/%d (%s): incomplete (it stopped early, most of its "
                            "requests failed, or it was killed: its summary.json says which)",
                            i, st->count, st->runs[l][d].dir);
        }
    }
    size_t n = json_array_size(st->problems);
    if (n > 0 && !opt->allow_partial)
        return bad_input(err, "cannot merge: %s%s; --allow-partial merges the complete shards "
                              "and marks the merged run incomplete",
                         json_string_value(json_array_get(st->problems, 0)),
                         n > 1 ? " (and more like it)" : "");
    const shard_run *usable_x = NULL;
    for (int d = 0; d < opt->n_dirs && !usable_x; d++) {
        const shard_run *r = &st->runs[1][d];
        if (r->present && r->meta.complete)
            usable_x = r;
    }
    if (!usable_x)
        return bad_input(err, "no shard has a complete interference run: nothing to merge");
    return 0;
}

/* ---- writing one merged run ----------------------------------------------------------------- */

/* The usable runs of a label in shard order; their count. */
static int usable_runs(const merge_state *st, int l, shard_run **out)
{
    int k = 0;
    for (int i = 0; i < st->count; i++) {
        int d = st->by_index[i];
        if (d >= 0 && st->runs[l][d].present && st->runs[l][d].meta.complete)
            out[k++] = &st->runs[l][d];
    }
    return k;
}

static int cmp_request_count(const void *a, const void *b)
{
    const request_count *x = a, *y = b;
    return (x->request > y->request) - (x->request < y->request);
}

/* The count of request id in r's requests.csv, or NULL. The ids a run writes are dense
 * (0, 1, 2 ...): the row at id - first is it, else a binary search. */
static request_count *find_count(shard_run *r, int64_t id)
{
    if (r->n_counts == 0 || id < r->counts[0].request)
        return NULL;
    if (id - r->counts[0].request < r->n_counts &&
        r->counts[id - r->counts[0].request].request == id)
        return &r->counts[id - r->counts[0].request];
    request_count key = {.request = id};
    return bsearch(&key, r->counts, (size_t)r->n_counts, sizeof key, cmp_request_count);
}

/* The merged ids stay below this: a run's ids count its requests, and a shard's shifted past
 * the previous shards' may not overflow. */
#define MAX_REQUEST_ID (INT64_MAX / 4)

/* 0; -2 with err when a shard's requests.csv cannot be read (bad input); -1 with err when
 * writing failed. */
static int merge_requests(shard_run **runs, int k, const char *dir, char *err)
{
    char path[4300];
    fsio_file out;
    if (fsio_join(path, sizeof path, dir, "requests.csv", err) != 0 || fsio_create(&out, path, err) != 0)
        return -1;
    setvbuf(out.f, NULL, _IOFBF, 1 << 20);
    tokenlog_write_requests_header(out.f);
    int64_t id_from = 0;
    int rc = -2;
    for (int s = 0; s < k; s++) {
        shard_run *r = runs[s];
        char src[4300];
        snprintf(src, sizeof src, "%s/requests.csv", r->dir);
        tokenlog_reader *in = tokenlog_reader_open(src, TOKENLOG_REQUESTS_CSV, err);
        if (!in)
            goto fail;
        r->id_from = id_from;
        int64_t max_id = -1;
        tokenlog_request q;
        int got;
        while ((got = tokenlog_reader_request(in, &q, err)) == 1) {
            if (q.request < 0 || q.request > MAX_REQUEST_ID - id_from) {
                err_set(err, "%s: request id %lld is negative or too large", src,
                        (long long)q.request);
                got = -1;
                break;
            }
            if (r->n_counts == r->cap_counts &&
                buf_grow_items((void **)&r->counts, &r->cap_counts, r->n_counts + 1,
                               sizeof *r->counts) != 0) {
                err_set(err, "out of memory");
                rc = -1;
                got = -1;
                break;
            }
            r->counts[r->n_counts++] = (request_count){q.request, q.user, q.completion_tokens,
                                                       q.t_end_ns < 0, q.t_send_ns < 0, 0};
            if (q.request > max_id)
                max_id = q.request;
            q.request += id_from;
            q.t_plan_ns = moved(q.t_plan_ns, r->offset_ns);
            q.t_send_ns = moved(q.t_send_ns, r->offset_ns);
            q.t_first_ns = moved(q.t_first_ns, r->offset_ns);
            q.t_end_ns = moved(q.t_end_ns, r->offset_ns);
            tokenlog_write_request(out.f, &q);
            r->requests++;
        }
        r->requests_cut += tokenlog_reader_close(in);
        if (got < 0)
            goto fail;
        id_from += max_id + 1; /* the next shard's ids start past this one's */
        /* A run writes its rows in id order: sorted already, but nothing relies on it. */
        bool sorted = true;
        for (int64_t i = 1; i < r->n_counts && sorted; i++)
            sorted = r->counts[i - 1].request <= r->counts[i].request;
        if (!sorted)
            qsort(r->counts, (size_t)r->n_counts, sizeof *r->counts, cmp_request_count);
    }
    return fsio_commit(&out, err);
fail:
    fsio_abandon(&out);
    return rc;
}

/* A min-heap of the next row of each shard, by (time, shard). */
typedef struct head {
    tokenlog_event ev;
    int src;
} head;

static bool head_before(const head *a, const head *b)
{
    return a->ev.t_ns != b->ev.t_ns ? a->ev.t_ns < b->ev.t_ns : a->src < b->src;
}

static void heap_push(head *heap, int *n, head h)
{
    int i = (*n)++;
    while (i > 0 && head_before(&h, &heap[(i - 1) / 2])) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = h;
}

static head heap_pop(head *heap, int *n)
{
    head top = heap[0], last = heap[--(*n)];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && head_before(&heap[c + 1], &heap[c]))
            c++;
        if (!head_before(&heap[c], &last))
            break;
        heap[i] = heap[c];
        i = c;
    }
    if (*n > 0)
        heap[i] = last;
    return top;
}

/* The next row of shard s onto the heap (moved onto the common axis), its tokens counted to
 * its request: 0, or -1 with err. A row of a request requests.csv does not list has no place
 * among the merged ids (it could land on another shard's): left out, and counted. */
static int pull(shard_run *r, tokenlog_reader *in, int s, int64_t *last_t, head *heap, int *n,
                char *err)
{
    tokenlog_event ev;
    int got;
    /* Bounded by the rows of the file. */
    while ((got = tokenlog_reader_event(in, &ev, err)) == 1) {
        if (ev.t_ns < *last_t)
            r->out_of_order++;
        *last_t = ev.t_ns;
        request_count *c = find_count(r, ev.request);
        if (c) {
            c->carried += ev.n_tokens;
            ev.t_ns = moved(ev.t_ns, r->offset_ns);
            ev.request += r->id_from;
            heap_push(heap, n, (head){ev, s});
            return 0;
        }
        if (r->unlisted_rows++ == 0) {
            r->unlisted_request = ev.request;
            r->unlisted_user = ev.user;
        }
    }
    return got;
}

/* 0; -2 with err when a shard's tokens.csv cannot be read (bad input); -1 with err when
 * writing failed. */
static int merge_tokens(shard_run **runs, int k, const char *dir, char *err)
{
    char path[4300];
    fsio_file out;
    tokenlog_reader **in = calloc((size_t)k, sizeof *in);
    int64_t *last_t = calloc((size_t)k, sizeof *last_t);
    head *heap = malloc((size_t)k * sizeof *heap);
    if (!in || !last_t || !heap) {
        free(in), free(last_t), free(heap);
        return err_set(err, "out of memory");
    }
    int rc = -1, n = 0;
    bool created = false;
    if (fsio_join(path, sizeof path, dir, "tokens.csv", err) != 0 || fsio_create(&out, path, err) != 0)
        goto done;
    created = true;
    setvbuf(out.f, NULL, _IOFBF, 1 << 20);
    tokenlog_write_events_header(out.f);
    for (int s = 0; s < k; s++) {
        char src[4300];
        snprintf(src, sizeof src, "%s/tokens.csv", runs[s]->dir);
        last_t[s] = INT64_MIN;
        if (!(in[s] = tokenlog_reader_open(src, TOKENLOG_TOKENS_CSV, err)) ||
            pull(runs[s], in[s], s, &last_t[s], heap, &n, err) != 0) {
            rc = -2;
            goto done;
        }
    }
    /* Each pass writes one row and reads at most one: bounded by the rows of the files. */
    while (n > 0) {
        head h = heap_pop(heap, &n);
        tokenlog_write_event(out.f, &h.ev);
        runs[h.src]->events++;
        if (pull(runs[h.src], in[h.src], h.src, &last_t[h.src], heap, &n, err) != 0) {
            rc = -2;
            goto done;
        }
    }
    rc = fsio_commit(&out, err);
    created = false;
done:
    if (created)
        fsio_abandon(&out);
    for (int s = 0; s < k; s++)
        runs[s]->tokens_cut += tokenlog_reader_close(in[s]);
    free(in);
    free(last_t);
    free(heap);
    return rc;
}

static void join_indices(shard_run **runs, int k, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int s = 0; s < k && len < size; s++)
        len += (size_t)snprintf(buf + len, size - len, "%s%d", s ? "," : "",
                                runs[s]->cfg.wl.shard.index);
}

/* The shard indices of the experiment not in runs[0..k), "" when none. */
static void join_missing(const merge_state *st, shard_run **runs, int k, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0, s = 0; i < st->count && len < size; i++) {
        if (s < k && runs[s]->cfg.wl.shard.index == i) {
            s++;
            continue;
        }
        len += (size_t)snprintf(buf + len, size - len, "%s%d", len ? "," : "", i);
    }
}

/* What a merged shard's files say of themselves and of each other. A last row cut short was
 * dropped; every token row must belong to a request requests.csv lists; a request's rows
 * must carry the tokens requests.csv counts for it (completion_tokens: the tokens its
 * stream carried, plus the stop token a final usage may count without streaming it:
 * CHUNK_STOP_TOKEN_SLACK fewer rows' worth is whole), at most that many for a request sent
 * before t = 0 (the warm-up's tokens are counted, not logged), and any number for one the
 * run never saw end (t_end_ns -1: no final count). Each disagreement makes the merged label incomplete. */
static void check_files(merge_state *st, int l, const shard_run *r)
{
    char who[4400];
    snprintf(who, sizeof who, "shard %d/%d (%s)", r->cfg.wl.shard.index, st->count, r->dir);
    const int64_t cut[2] = {r->tokens_cut, r->requests_cut};
    static const char *const files[2] = {"tokens.csv", "requests.csv"};
    for (int f = 0; f < 2; f++)
        if (cut[f] > 0)
            add_problem(st, l, true, "%s: %s ends inside a row (a file cut short): %lld row%s "
                                     "dropped",
                        who, files[f], (long long)cut[f], cut[f] == 1 ? "" : "s");
    if (r->unlisted_rows > 0)
        add_problem(st, l, true, "%s: tokens.csv has tokens of request %lld (user %d), which "
                                 "requests.csv does not list (%lld row%s of unlisted requests, "
                                 "left out)",
                who, (long long)r->unlisted_request, r->unlisted_user, (long long)r->unlisted_rows,
                r->unlisted_rows == 1 ? "" : "s");
    const request_count *first = NULL;
    int64_t disagree = 0, twice = -1;
    for (int64_t i = 0; i < r->n_counts; i++) {
        const request_count *c = &r->counts[i];
        if (twice < 0 && i > 0 && c->request == r->counts[i - 1].request)
            twice = c->request;
        if (c->open || c->carried == c->counted || (c->before_t0 && c->carried < c->counted) ||
            (c->carried < c->counted && c->counted - c->carried <= CHUNK_STOP_TOKEN_SLACK))
            continue;
        if (disagree++ == 0)
            first = c;
    }
    if (twice >= 0)
        add_problem(st, l, true, "%s: requests.csv lists request %lld twice", who,
                    (long long)twice);
    if (!first)
        return;
    char more[64] = "", violations[160] = "";
    if (disagree > 1)
        snprintf(more, sizeof more, " (and %lld more request%s)", (long long)(disagree - 1),
                 disagree == 2 ? "" : "s");
    if (r->meta.protocol_violations > 0)
        snprintf(violations, sizeof violations, "; the shard recorded %lld protocol violations "
                 "(a server's usage count past its stream would read the same)",
                 (long long)r->meta.protocol_violations);
    add_problem(st, l, true, "%s: request %lld (user %d): requests.csv counts %d tokens, its "
                             "rows in tokens.csv carry %lld%s%s",
            who, (long long)first->request, first->user, first->counted,
            (long long)first->carried, more, violations);
}

static json_t *shard_json(const shard_run *r)
{
    json_t *cfg = experiment_config_to_json(&r->cfg, &r->meta);
    json_t *clock = json_object_get(json_object_get(cfg, "shard"), "clock");
    json_t *j = json_pack("{s:i, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:O}", "index",
                          r->cfg.wl.shard.index, "dir", r->dir, "t0_realtime_ns",
                          (json_int_t)r->meta.t0_realtime_ns, "offset_ns", (json_int_t)r->offset_ns,
                          "start_late_ns", (json_int_t)r->meta.start_late_ns, "request_ids_from",
                          (json_int_t)r->id_from, "requests", (json_int_t)r->requests,
                          "token_events", (json_int_t)r->events, "rows_cut",
                          (json_int_t)(r->tokens_cut + r->requests_cut), "rows_out_of_order",
                          (json_int_t)r->out_of_order, "clock", clock ? clock : json_null());
    json_decref(cfg);
    return j;
}

/* Merge label l into <staging>/<label>/; its part of merge.json into *out. 1 merged, 0
 * nothing to merge (no shard ran it), -2 with err when a shard's file cannot be read (bad
 * input), -1 with err. */
static int merge_label(merge_state *st, int l, json_t **out, char *err)
{
    const report_merge_options *opt = st->opt;
    *out = NULL;
    shard_run **runs = malloc((size_t)st->count * sizeof *runs);
    if (!runs)
        return err_set(err, "out of memory");
    int k = usable_runs(st, l, runs), rc = -1;
    experiment_meta meta;
    memset(&meta, 0, sizeof meta);
    if (k == 0) {
        free(runs);
        return 0;
    }
    experiment_merge m;
    memset(&m, 0, sizeof m);
    m.shards = st->count;
    m.one_host = true;
    m.t0_realtime_ns = runs[0]->meta.t0_realtime_ns;
    for (int s = 1; s < k; s++)
        if (runs[s]->meta.t0_realtime_ns < m.t0_realtime_ns)
            m.t0_realtime_ns = runs[s]->meta.t0_realtime_ns;
    /* One kernel (every boot id the same): its CLOCK_MONOTONIC is every shard's clock, so
     * the shards are placed by their t = 0 on it, exactly; else by the wall clock. */
    for (int s = 1; s < k; s++)
        if (!runs[0]->meta.clock.boot_id[0] ||
            strcmp(runs[0]->meta.clock.boot_id, runs[s]->meta.clock.boot_id) != 0)
            m.one_host = false;
    int64_t first_mono = runs[0]->meta.t0_monotonic_ns;
    for (int s = 1; s < k; s++)
        if (runs[s]->meta.t0_monotonic_ns < first_mono)
            first_mono = runs[s]->meta.t0_monotonic_ns;
    int64_t protocol_violations = 0;
    for (int s = 0; s < k; s++) {
        const shard_run *a = runs[s];
        runs[s]->offset_ns = m.one_host ? a->meta.t0_monotonic_ns - first_mono
                                        : a->meta.t0_realtime_ns - m.t0_realtime_ns;
        m.users += workload_analysis_users(&a->cfg.wl);
        protocol_violations += a->meta.protocol_violations;
        for (int t = s + 1; t < k; t++) {
            const experiment_clock *ca = &a->meta.clock, *cb = &runs[t]->meta.clock;
            int64_t u = experiment_clock_uncertainty_ns(ca, cb, false);
            int64_t e = experiment_clock_uncertainty_ns(ca, cb, true);
            m.clock_uncertainty_ns = u > m.clock_uncertainty_ns ? u : m.clock_uncertainty_ns;
            m.clock_estimated_ns = e > m.clock_estimated_ns ? e : m.clock_estimated_ns;
        }
    }
    join_indices(runs, k, m.merged, sizeof m.merged);
    join_missing(st, runs, k, m.missing, sizeof m.missing);

    char dir[4300], config_path[4400];
    snprintf(dir, sizeof dir, "%s/%s", st->dir, st->label[l]);
    snprintf(config_path, sizeof config_path, "%s/config.json", dir);
    if (fsio_mkdirs(dir, err) != 0)
        goto done;
    int merged = merge_requests(runs, k, dir, err);
    if (merged == 0)
        merged = merge_tokens(runs, k, dir, err);
    if (merged != 0) {
        rc = merged;
        goto done;
    }
    for (int s = 0; s < k; s++)
        check_files(st, l, runs[s]);

    /* One unsharded run of the same experiment, with the merge's record. */
    experiment_config cfg = runs[0]->cfg;
    memset(&cfg.wl.shard, 0, sizeof cfg.wl.shard);
    memset(&cfg.shard, 0, sizeof cfg.shard);
    meta = runs[0]->meta;
    meta.argv = NULL;
    meta.argc = 0;
    if (experiment_meta_set_argv(&meta, opt->argc, opt->argv) != 0) {
        err_set(err, "out of memory");
        goto done;
    }
    meta.complete = st->label_complete[l];
    meta.protocol_violations = protocol_violations;
    meta.t0_monotonic_ns = 0; /* one machine's clock: meaningless for several */
    meta.t0_realtime_ns = meta.start_late_ns = 0;
    memset(&meta.clock, 0, sizeof meta.clock);
    meta.merge = m;
    if (experiment_config_write(config_path, &cfg, &meta, err) != 0)
        goto done;

    json_t *shards = json_array();
    int64_t first_t0 = INT64_MAX, last_t0 = INT64_MIN;
    for (int s = 0; s < k; s++) {
        json_array_append_new(shards, shard_json(runs[s]));
        /* on the clock the shards were placed by */
        first_t0 = runs[s]->offset_ns < first_t0 ? runs[s]->offset_ns : first_t0;
        last_t0 = runs[s]->offset_ns > last_t0 ? runs[s]->offset_ns : last_t0;
    }
    char t0_text[48];
    experiment_format_utc(m.t0_realtime_ns, t0_text, sizeof t0_text);
    *out = json_pack("{s:b, s:s, s:s, s:i, s:s, s:I, s:I, s:I, s:I, s:b, s:o}", "complete",
                     meta.complete, "merged", m.merged, "missing", m.missing, "users", m.users,
                     "t0", t0_text, "t0_realtime_ns", (json_int_t)m.t0_realtime_ns,
                     "t0_spread_ns", (json_int_t)(last_t0 - first_t0), "clock_uncertainty_ns",
                     (json_int_t)m.clock_uncertainty_ns, "clock_estimated_ns",
                     (json_int_t)m.clock_estimated_ns, "one_host", m.one_host, "shards", shards);
    if (opt->notes) {
        int64_t requests = 0, events = 0, disorder = 0;
        for (int s = 0; s < k; s++) {
            requests += runs[s]->requests;
            events += runs[s]->events;
            disorder += runs[s]->out_of_order;
        }
        char spread[32];
        units_format_duration(last_t0 - first_t0, spread, sizeof spread);
        /* Open-loop requests are streams of their own: m.users counts the closed users. */
        char users[64] = "";
        if (m.users > 0 || !workload_open_loop(&runs[0]->cfg.wl))
            snprintf(users, sizeof users, "%d users, ", m.users);
        fprintf(opt->notes, "  %-13s shards %s: %s%lld requests, %lld token events; the "
                            "shards' t = 0 within %s of each other\n",
                st->label[l], m.merged, users, (long long)requests, (long long)events, spread);
        if (m.missing[0])
            fprintf(opt->notes, "  %-13s left out: shard%s %s\n", "", strchr(m.missing, ',') ? "s" : "",
                    m.missing);
        if (disorder > 0)
            fprintf(opt->notes, "  %-13s warning: %lld token rows were earlier than the row "
                                "before them in their shard's file: merged in file order\n",
                    "", (long long)disorder);
    }
    rc = 1;
done:
    experiment_meta_free(&meta);
    free(runs);
    return rc;
}

/* Shards on several hosts whose clocks are not synchronized: their figures are 16 s off. */
static void warn_clocks(const merge_state *st, FILE *out)
{
    const shard_run *x = NULL;
    for (int d = 0; d < st->opt->n_dirs && !x; d++)
        if (st->runs[1][d].present)
            x = &st->runs[1][d];
    if (!x)
        return;
    bool one_host = true;
    for (int d = 0; d < st->opt->n_dirs; d++) {
        const shard_run *r = &st->runs[1][d];
        if (!r->present)
            continue;
        if (!r->meta.clock.boot_id[0] || strcmp(r->meta.clock.boot_id, x->meta.clock.boot_id) != 0)
            one_host = false;
    }
    for (int d = 0; d < st->opt->n_dirs && !one_host; d++) {
        const experiment_clock *c = &st->runs[1][d].meta.clock;
        if (st->runs[1][d].present && !c->synchronized)
            fprintf(out, "stallscope report: warning: shard %d (%s): its clock is not "
                         "synchronized (adjtimex state %d%s): it counts as 16 s off, and so do the "
                         "cross-shard figures (docs/guide/shards.md: chrony or ntpd)\n",
                    st->runs[1][d].cfg.wl.shard.index, st->runs[1][d].dir, c->state,
                    c->state == 5 ? ", TIME_ERROR" : "");
    }
}

static int write_merge_json(const merge_state *st, json_t *labels, bool complete, char *err)
{
    json_t *dirs = json_array();
    for (int d = 0; d < st->opt->n_dirs; d++)
        json_array_append_new(dirs, json_string(st->opt->dirs[d]));
    json_t *root = json_pack("{s:i, s:b, s:o, s:O, s:O}", "shards", st->count, "complete",
                             complete, "dirs", dirs, "problems", st->problems, "runs", labels);
    char path[4300];
    int rc = fsio_join(path, sizeof path, st->dir, "merge.json", err);
    if (rc == 0)
        rc = fsio_write_json(path, root, 0, err);
    json_decref(root);
    return rc;
}

/* --out inside a shard's directory (or holding one) would let --force delete the input
 * before it is read. */
static bool out_is_input(const report_merge_options *opt, char *err)
{
    char out[PATH_MAX];
    if (fsio_absolute_path(opt->out, out) != 0)
        return false;
    size_t n_out = strlen(out);
    for (int d = 0; d < opt->n_dirs; d++) {
        char in[PATH_MAX];
        if (!realpath(opt->dirs[d], in))
            continue;
        size_t n_in = strlen(in);
        size_t n = n_in < n_out ? n_in : n_out;
        if (strncmp(in, out, n) == 0 && (in[n] == '\0' || in[n] == '/') &&
            (out[n] == '\0' || out[n] == '/')) {
            err_set(err, "--out %s overlaps the shard directory %s: give the merged run a "
                         "directory of its own",
                    opt->out, opt->dirs[d]);
            return true;
        }
    }
    return false;
}

int report_merge(const report_merge_options *opt, bool *complete, char *err)
{
    *complete = false;
    if (opt->n_dirs < 1)
        return bad_input(err, "--merge needs the shards' directories");
    merge_state st;
    memset(&st, 0, sizeof st);
    st.opt = opt;
    st.label[0] = EXPERIMENT_RUN_BASELINE;
    st.label[1] = EXPERIMENT_RUN_INTERFERENCE;
    st.problems = json_array();
    json_t *labels = json_object();
    /* Built beside --out and moved in whole: a merge that fails leaves --out as it was. */
    experiment_staging stage;
    memset(&stage, 0, sizeof stage);
    int rc = -1;
    for (int l = 0; l < N_LABELS; l++)
        if (!(st.runs[l] = calloc((size_t)opt->n_dirs, sizeof *st.runs[l]))) {
            err_set(err, "out of memory");
            goto done;
        }
    rc = -2;
    if (out_is_input(opt, err))
        goto done;
    if ((rc = load_dirs(&st, err)) != 0 || (rc = check_shards(&st, err)) != 0)
        goto done;
    rc = -2;
    if (experiment_stage_dir(&stage, opt->out, opt->force, "merging", err) != 0)
        goto done;
    st.dir = stage.dir;
    rc = -1;
    size_t n_problems = json_array_size(st.problems);
    for (size_t i = 0; opt->warn && i < n_problems; i++)
        fprintf(opt->warn, "stallscope report: warning: %s: left out (--allow-partial)\n",
                json_string_value(json_array_get(st.problems, i)));
    if (opt->warn)
        warn_clocks(&st, opt->warn);
    if (opt->notes) {
        fprintf(opt->notes, "stallscope report: merging %d shard director%s of a %d-shard "
                            "experiment into %s\n",
                opt->n_dirs, opt->n_dirs == 1 ? "y" : "ies", st.count, opt->out);
    }
    for (int l = 0; l < N_LABELS; l++) {
        json_t *part;
        int got = merge_label(&st, l, &part, err);
        if (got < 0) {
            rc = got;
            goto done;
        }
        if (got > 0)
            json_object_set_new(labels, st.label[l], part);
    }
    /* the shards left out, and what the merged shards' files said of themselves */
    const bool whole = json_array_size(st.problems) == 0;
    if (write_merge_json(&st, labels, whole, err) != 0 ||
        (rc = experiment_stage_commit(&stage, opt->force, err)) != 0)
        goto done; /* -1, or the commit's -2 (--out refused) or -1 */
    *complete = whole;
    rc = 0;
done:
    experiment_stage_abandon(&stage);
    for (int l = 0; l < N_LABELS; l++) {
        for (int d = 0; st.runs[l] && d < opt->n_dirs; d++) {
            experiment_meta_free(&st.runs[l][d].meta);
            free(st.runs[l][d].counts);
        }
        free(st.runs[l]);
    }
    free(st.by_index);
    json_decref(st.problems);
    json_decref(labels);
    return rc;
}

/* ---- the cross-shard figures ------------------------------------------------------------------ */

static void range_text(char *buf, size_t size, double lo, double hi, bool ms)
{
    char a[32], b[32];
    if (ms) {
        report_format_ms(a, sizeof a, lo);
        report_format_ms(b, sizeof b, hi);
    } else {
        snprintf(a, sizeof a, "%.0f", lo);
        snprintf(b, sizeof b, "%.0f", hi);
    }
    snprintf(buf, size, "%s..%s", a, b);
}

void report_merge_print(FILE *out, const report_run *x)
{
    if (!x || !x->has_config || x->meta.merge.shards <= 0)
        return;
    const experiment_merge *m = &x->meta.merge;
    const analysis_summary *s = &x->summary;
    char u[32], est[32];
    units_format_duration(m->clock_uncertainty_ns, u, sizeof u);
    units_format_duration(m->clock_estimated_ns, est, sizeof est);
    fprintf(out, "shards merged: %s (of %d)%s%s\n", m->merged, m->shards,
            m->missing[0] ? "; left out: " : "", m->missing);
    if (m->one_host)
        fputs("clocks: one host: the shards are placed by its one monotonic clock (their "
              "t0_monotonic_ns), exactly\n",
              out);
    else
        fprintf(out, "clocks: the shards' t = 0 agree within ±%s (the kernels' maxerror; "
                     "estimated ±%s)\n",
                u, est);
    if (s->n_injections == 0) {
        fputs("no injections: no figure here sets one shard's tokens against another's\n", out);
        return;
    }
    const analysis_summary *lo = x->has_bounds ? &x->bound_lo : s;
    const analysis_summary *hi = x->has_bounds ? &x->bound_hi : s;
    char r[80];
    const char *who = report_users_word(s);
    fprintf(out, "cross-shard figures (the injections against every shard's %s), each with its "
                 "range for a clock offset within ±%s:\n",
            who, u);
    range_text(r, sizeof r, (double)lo->stalls.aligned, (double)hi->stalls.aligned, false);
    fprintf(out, "  stalls aligned with an injection: %lld of %lld (%s), %.1f %%\n",
            (long long)s->stalls.aligned, (long long)s->stalls.count, r,
            s->stalls.aligned_fraction * 100);
    for (int i = 0; i < s->n_injections && i < MAX_INJECTION_LINES; i++) {
        const analysis_injection *in = &s->injections[i];
        char gap[32], rg[80];
        range_text(r, sizeof r, lo->injections[i].users_stalled, hi->injections[i].users_stalled,
                   false);
        report_format_ms(gap, sizeof gap, in->max_gap_ms);
        range_text(rg, sizeof rg, lo->injections[i].max_gap_ms, hi->injections[i].max_gap_ms, true);
        fprintf(out, "  injection %d at %.3f s: %s stalled %d/%d (%s), longest gap %s ms (%s)\n",
                i + 1, in->t_send_s, who, in->users_stalled, s->users, r, gap, rg);
    }
    if (s->n_injections > MAX_INJECTION_LINES)
        fprintf(out, "  (first %d of %d injections; all are in summary.json)\n",
                MAX_INJECTION_LINES, s->n_injections);
}
