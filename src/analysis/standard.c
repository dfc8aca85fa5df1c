/* standard — the benchmark world's metrics (standard.h). */
#include "analysis/standard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/sketch.h"
#include "analysis/timeline.h"
#include "common/buf.h"
#include "common/err.h"

bool standard_request_completed(const tokenlog_request *r)
{
    return r->t_send_ns >= 0 && !r->error[0] && r->t_end_ns >= 0 && r->t_first_ns >= 0 &&
           r->finish_reason[0] && strcmp(r->finish_reason, "abort") != 0;
}

void standard_defaults(standard_options *opt)
{
    memset(opt, 0, sizeof *opt);
    static const double p[] = {50, 90, 99, 99.9};
    opt->n_percentiles = 4;
    memcpy(opt->percentiles, p, sizeof p);
}

int standard_parse_percentiles(const char *text, standard_options *opt, char *err)
{
    int n = 0;
    const char *s = text;
    while (*s) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || !(v > 0 && v <= 100))
            return err_set(err, "'%s': percentiles are numbers in (0, 100], e.g. 50,90,99,99.9",
                           text);
        if (n == STANDARD_MAX_PERCENTILES)
            return err_set(err, "at most %d percentiles", STANDARD_MAX_PERCENTILES);
        opt->percentiles[n++] = v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return err_set(err, "'%s': percentiles separated by commas", text);
    }
    if (n == 0)
        return err_set(err, "no percentiles in '%s'", text);
    opt->n_percentiles = n;
    return 0;
}

int standard_parse_goodput(const char *text, standard_options *opt, char *err)
{
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", text) >= (int)sizeof buf)
        return err_set(err, "--goodput: too long");
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, " ,", &save); tok;
         tok = strtok_r(NULL, " ,", &save), n++) {
        char *colon = strchr(tok, ':');
        char *end = NULL;
        double v = colon ? strtod(colon + 1, &end) : 0;
        if (!colon || end == colon + 1 || *end || !(v > 0) || !isfinite(v))
            return err_set(err, "'%s' is not KEY:MS (e.g. ttft:2000 tpot:100)", tok);
        *colon = '\0';
        if (strcmp(tok, "ttft") == 0)
            opt->slo_ttft_ms = v;
        else if (strcmp(tok, "tpot") == 0)
            opt->slo_tpot_ms = v;
        else if (strcmp(tok, "e2el") == 0)
            opt->slo_e2el_ms = v;
        else if (strcmp(tok, "itl") == 0)
            opt->slo_itl_ms = v;
        else
            return err_set(err, "no SLO '%s' (ttft, tpot, e2el, itl)", tok);
    }
    if (n == 0)
        return err_set(err, "no SLO in '%s'", text);
    return 0;
}

/* ---- statistics -------------------------------------------------------------------------- */

typedef struct dvec {
    double *v;
    int64_t n, cap;
} dvec;

static int push(dvec *d, double x)
{
    if (d->n == d->cap && buf_grow_items((void **)&d->v, &d->cap, d->n + 1, sizeof *d->v) != 0)
        return -1;
    d->v[d->n++] = x;
    return 0;
}

/* numpy.percentile's default: linear between the order statistics around p/100 (n - 1). */
static double interpolate(const double *sorted, int64_t n, double p)
{
    if (n == 0)
        return 0;
    double rank = p / 100 * (double)(n - 1);
    int64_t lo = (int64_t)floor(rank);
    if (lo >= n - 1)
        return sorted[n - 1];
    double frac = rank - (double)lo;
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}

static void stat_of(dvec *d, const standard_options *opt, standard_stat *out)
{
    memset(out, 0, sizeof *out);
    out->count = d->n;
    if (d->n == 0)
        return;
    analysis_sort_doubles(d->v, d->n);
    double sum = 0;
    for (int64_t i = 0; i < d->n; i++)
        sum += d->v[i];
    out->mean = sum / (double)d->n;
    double ss = 0;
    for (int64_t i = 0; i < d->n; i++)
        ss += (d->v[i] - out->mean) * (d->v[i] - out->mean);
    out->std = sqrt(ss / (double)d->n);
    out->median = interpolate(d->v, d->n, 50);
    out->max = d->v[d->n - 1];
    for (int k = 0; k < opt->n_percentiles; k++)
        out->p[k] = interpolate(d->v, d->n, opt->percentiles[k]);
}

/* ITL of one class: the gaps themselves up to a budget (numpy's interpolated percentiles),
 * then the sketch's histogram (nearest rank within SKETCH_RELATIVE_ERROR); count, mean, std
 * and max exact either way (sums in ns). */
typedef struct itl_acc {
    sketch gaps;
    double sum_ms, sum_sq_ms;
} itl_acc;

static int itl_stat(itl_acc *a, const standard_options *opt, standard_stat *out, bool *histogram)
{
    memset(out, 0, sizeof *out);
    sketch *g = &a->gaps;
    if (sketch_finish(g) != 0)
        return -1;
    out->count = g->n;
    if (g->n == 0)
        return 0;
    out->mean = a->sum_ms / (double)g->n;
    double var = a->sum_sq_ms / (double)g->n - out->mean * out->mean;
    out->std = var > 0 ? sqrt(var) : 0;
    out->max = analysis_ns_to_ms(g->max);
    if (sketch_exact(g)) { /* values sorted in place: interpolate as numpy does */
        dvec d = {0};
        for (int64_t i = 0; i < g->n; i++)
            if (push(&d, analysis_ns_to_ms(g->values[i])) != 0)
                break;
        if (d.n == g->n) {
            out->median = interpolate(d.v, d.n, 50);
            for (int k = 0; k < opt->n_percentiles; k++)
                out->p[k] = interpolate(d.v, d.n, opt->percentiles[k]);
            free(d.v);
            return 0;
        }
        free(d.v);
    }
    *histogram = true;
    out->median = sketch_quantile_ns(g, 0.5) / 1e6;
    for (int k = 0; k < opt->n_percentiles; k++)
        out->p[k] = sketch_quantile_ns(g, opt->percentiles[k] / 100) / 1e6;
    return 0;
}

/* ---- the accumulator ------------------------------------------------------------------------ */

/* One request's running state: together, one cache line for both per event. */
typedef struct slot_state {
    int64_t last_ns;    /* its last event, -1 none */
    int64_t max_gap_ns; /* its longest gap so far (the itl SLO) */
} slot_state;

struct standard_acc {
    standard_options opt;
    analysis_idmap slot_of; /* request id -> slot, for ids dense[] does not cover */
    int64_t *dense;         /* (n_dense) request id -> slot, -1: ids are usually 0, 1, 2 ... */
    int64_t n_dense;
    slot_state *slots;      /* (cap) */
    int64_t n, cap;
    itl_acc itl[3];         /* all, background, injected */
};

#define DENSE_IDS ((int64_t)1 << 24) /* ids below this are looked up in an array */

/* The slot of request id; next >= 0: added as that slot when absent; -1 when absent (next
 * -1), -2 out of memory. An array for small ids (every event looks one up), a hash past it. */
static int64_t slot_of(standard_acc *a, int64_t id, int64_t next)
{
    if (id < 0 || id >= DENSE_IDS)
        return next >= 0 ? analysis_idmap_get_or_add(&a->slot_of, id, next)
                         : analysis_idmap_get(&a->slot_of, id);
    if (id >= a->n_dense) {
        if (next < 0)
            return -1;
        int64_t n = a->n_dense ? a->n_dense : 1024;
        while (n <= id)
            n *= 2;
        int64_t *d = realloc(a->dense, (size_t)n * sizeof *d);
        if (!d)
            return -2;
        for (int64_t i = a->n_dense; i < n; i++)
            d[i] = -1;
        a->dense = d;
        a->n_dense = n;
    }
    if (a->dense[id] < 0 && next >= 0)
        a->dense[id] = next;
    return a->dense[id];
}

standard_acc *standard_acc_begin(const standard_options *opt, int64_t exact_max, char *err)
{
    standard_acc *a = calloc(1, sizeof *a);
    if (!a || analysis_idmap_init(&a->slot_of, 1024) != 0) {
        free(a);
        err_set(err, "out of memory for the request metrics");
        return NULL;
    }
    if (opt && opt->n_percentiles > 0) {
        a->opt = *opt;
    } else {
        standard_defaults(&a->opt);
        if (opt) { /* the SLOs given, the default percentiles */
            a->opt.slo_ttft_ms = opt->slo_ttft_ms;
            a->opt.slo_tpot_ms = opt->slo_tpot_ms;
            a->opt.slo_e2el_ms = opt->slo_e2el_ms;
            a->opt.slo_itl_ms = opt->slo_itl_ms;
        }
    }
    for (int k = 0; k < 3; k++)
        sketch_init(&a->itl[k].gaps, exact_max > 0 ? exact_max : INT64_MAX);
    return a;
}

void standard_acc_free(standard_acc *a)
{
    if (!a)
        return;
    analysis_idmap_free(&a->slot_of);
    free(a->dense);
    free(a->slots);
    for (int k = 0; k < 3; k++)
        sketch_free(&a->itl[k].gaps);
    free(a);
}

/* count equal gaps of one class (kind) into all and the class, as count events one by
 * one: the sums in ms added in that order (so the mean and std are the same to the bit). */
static int itl_add(standard_acc *a, int kind, int64_t gap, int64_t count, char *err)
{
    const double ms = analysis_ns_to_ms(gap), sq = ms * ms;
    itl_acc *all = &a->itl[0], *cls = &a->itl[kind == TOKENLOG_INJECT ? 2 : 1];
    double sum0 = all->sum_ms, sq0 = all->sum_sq_ms, sum1 = cls->sum_ms, sq1 = cls->sum_sq_ms;
    for (int64_t i = 0; i < count; i++) {
        sum0 += ms;
        sq0 += sq;
        sum1 += ms;
        sq1 += sq;
    }
    all->sum_ms = sum0;
    all->sum_sq_ms = sq0;
    cls->sum_ms = sum1;
    cls->sum_sq_ms = sq1;
    const int bucket = sketch_bucket(gap);
    if (sketch_add_n(&all->gaps, gap, bucket, count) != 0 ||
        sketch_add_n(&cls->gaps, gap, bucket, count) != 0)
        return err_set(err, "out of memory for the request metrics");
    return 0;
}

/* The gap an event closes (-1: none, the request's first or an event out of order; -2 with
 * err: out of memory). */
static inline int64_t event_gap(standard_acc *a, const tokenlog_event *ev, char *err)
{
    const uint64_t id = (uint64_t)ev->request;
    int64_t slot;
    if (id < (uint64_t)a->n_dense && (uint64_t)a->dense[id] < (uint64_t)a->n) {
        slot = a->dense[id]; /* the usual case: a request seen before */
    } else {
        slot = slot_of(a, ev->request, a->n);
        if (slot == a->n &&
            buf_grow_items((void **)&a->slots, &a->cap, a->n + 1, sizeof *a->slots) != 0)
            slot = -2;
        if (slot == -2) {
            err_set(err, "out of memory for the request metrics");
            return -2;
        }
        if (slot == a->n)
            a->slots[a->n++] = (slot_state){.last_ns = -1, .max_gap_ns = 0};
    }
    const int64_t prev = a->slots[slot].last_ns;
    a->slots[slot].last_ns = ev->t_ns;
    if (prev < 0 || ev->t_ns < prev)
        return -1;
    const int64_t gap = ev->t_ns - prev;
    if (gap > a->slots[slot].max_gap_ns)
        a->slots[slot].max_gap_ns = gap;
    return gap;
}

int standard_acc_event(standard_acc *a, const tokenlog_event *ev, char *err)
{
    return standard_acc_events(a, ev, 1, err);
}

int standard_acc_events(standard_acc *a, const tokenlog_event *evs, int64_t n, char *err)
{
    /* Runs of equal gaps of one class go in at once. */
    int64_t run_gap = -1, run_n = 0;
    int run_kind = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t gap = event_gap(a, &evs[i], err);
        if (gap == -2)
            return -1;
        if (gap < 0)
            continue;
        const int kind = evs[i].kind == TOKENLOG_INJECT ? TOKENLOG_INJECT : TOKENLOG_BG;
        if (run_n > 0 && (gap != run_gap || kind != run_kind)) {
            if (itl_add(a, run_kind, run_gap, run_n, err) != 0)
                return -1;
            run_n = 0;
        }
        run_gap = gap;
        run_kind = kind;
        run_n++;
    }
    if (run_n > 0 && itl_add(a, run_kind, run_gap, run_n, err) != 0)
        return -1;
    return 0;
}

/* ---- per request ------------------------------------------------------------------------- */

/* A request's longest gap (ms), 0 when it had fewer than two events. */
static double max_gap_ms(standard_acc *a, int64_t request)
{
    int64_t slot = slot_of(a, request, -1);
    return slot >= 0 ? analysis_ns_to_ms(a->slots[slot].max_gap_ns) : 0;
}

typedef struct class_acc {
    dvec ttft, tpot, e2el;
    standard_class *out;
} class_acc;

int standard_acc_end(standard_acc *a, const tokenlog *rows, double duration_s,
                     standard_metrics *out, char *err)
{
    memset(out, 0, sizeof *out);
    out->opt = a->opt;
    out->duration_s = duration_s;
    const standard_options *o = &out->opt;
    const bool slo = o->slo_ttft_ms > 0 || o->slo_tpot_ms > 0 || o->slo_e2el_ms > 0 ||
                     o->slo_itl_ms > 0;
    class_acc acc[3] = {{.out = &out->all}, {.out = &out->background}, {.out = &out->injected}};
    int rc = -1;
    for (int64_t i = 0; i < rows->n_requests; i++) {
        const tokenlog_request *r = &rows->requests[i];
        if (r->t_send_ns < 0)
            continue; /* sent in the warm-up */
        class_acc *c = &acc[r->kind == TOKENLOG_INJECT ? 2 : 1];
        if (r->error[0]) {
            acc[0].out->failed++;
            c->out->failed++;
            continue;
        }
        if (!standard_request_completed(r)) {
            acc[0].out->unfinished++; /* cut by the run's end */
            c->out->unfinished++;
            continue;
        }
        const double ttft = analysis_ns_to_ms(r->t_first_ns - r->t_send_ns);
        const double e2el = analysis_ns_to_ms(r->t_end_ns - r->t_send_ns);
        const int out_tokens = r->completion_tokens > 0 ? r->completion_tokens : 0;
        const bool has_tpot = out_tokens > 1;
        const double tpot = has_tpot ? (e2el - ttft) / (out_tokens - 1) : 0;
        const bool good = (o->slo_ttft_ms <= 0 || ttft <= o->slo_ttft_ms) &&
                          (o->slo_tpot_ms <= 0 || !has_tpot || tpot <= o->slo_tpot_ms) &&
                          (o->slo_e2el_ms <= 0 || e2el <= o->slo_e2el_ms) &&
                          (o->slo_itl_ms <= 0 || max_gap_ms(a, r->request) <= o->slo_itl_ms);
        class_acc *both[2] = {&acc[0], c};
        for (int k = 0; k < 2; k++) {
            standard_class *sc = both[k]->out;
            sc->completed++;
            sc->input_tokens += r->prompt_tokens > 0 ? r->prompt_tokens : 0;
            sc->output_tokens += out_tokens;
            sc->good += slo && good;
            if (push(&both[k]->ttft, ttft) != 0 || push(&both[k]->e2el, e2el) != 0 ||
                (has_tpot && push(&both[k]->tpot, tpot) != 0))
                goto oom;
        }
    }
    for (int k = 0; k < 3; k++) {
        standard_class *sc = acc[k].out;
        stat_of(&acc[k].ttft, o, &sc->ttft_ms);
        stat_of(&acc[k].tpot, o, &sc->tpot_ms);
        stat_of(&acc[k].e2el, o, &sc->e2el_ms);
        if (itl_stat(&a->itl[k], o, &sc->itl_ms, &out->itl_histogram) != 0)
            goto oom;
        if (duration_s > 0) {
            sc->request_throughput = (double)sc->completed / duration_s;
            sc->output_throughput = (double)sc->output_tokens / duration_s;
            sc->total_token_throughput =
                (double)(sc->input_tokens + sc->output_tokens) / duration_s;
        }
        sc->has_goodput = slo;
        if (slo) {
            sc->request_goodput = duration_s > 0 ? (double)sc->good / duration_s : 0;
            sc->goodput = sc->completed > 0 ? (double)sc->good / (double)sc->completed : 0;
        }
    }
    rc = 0;
    goto done;
oom:
    err_set(err, "out of memory for the request metrics");
done:
    for (int k = 0; k < 3; k++) {
        free(acc[k].ttft.v);
        free(acc[k].tpot.v);
        free(acc[k].e2el.v);
    }
    standard_acc_free(a);
    return rc;
}

int standard_compute(const tokenlog *log, const standard_options *opt, double duration_s,
                     standard_metrics *out, char *err)
{
    standard_acc *a = standard_acc_begin(opt, 0, err);
    if (!a)
        return -1;
    for (int64_t e = 0; e < log->n_events; e++)
        if (standard_acc_event(a, &log->events[e], err) != 0) {
            standard_acc_free(a);
            return -1;
        }
    return standard_acc_end(a, log, duration_s, out, err);
}

/* ---- JSON -------------------------------------------------------------------------------- */

void standard_percentile_word(double p, char *buf, size_t size)
{
    if (p == floor(p))
        snprintf(buf, size, "%d", (int)p);
    else
        snprintf(buf, size, "%g", p);
}

static json_t *stat_json(const standard_stat *s, const standard_options *o)
{
    json_t *j = json_pack("{s:I, s:f, s:f, s:f, s:f}", "count", (json_int_t)s->count, "mean",
                          s->mean, "median", s->median, "std", s->std, "max", s->max);
    for (int k = 0; k < o->n_percentiles; k++) {
        char key[32], w[16];
        standard_percentile_word(o->percentiles[k], w, sizeof w);
        snprintf(key, sizeof key, "p%s", w);
        json_object_set_new(j, key, json_real(s->p[k]));
    }
    return j;
}

static json_t *class_json(const standard_class *c, const standard_options *o)
{
    json_t *j = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "completed", (json_int_t)c->completed,
        "failed", (json_int_t)c->failed, "unfinished", (json_int_t)c->unfinished, "input_tokens", (json_int_t)c->input_tokens, "output_tokens",
        (json_int_t)c->output_tokens, "request_throughput", c->request_throughput,
        "output_throughput", c->output_throughput, "total_token_throughput",
        c->total_token_throughput);
    if (c->has_goodput) {
        json_object_set_new(j, "good", json_integer(c->good));
        json_object_set_new(j, "request_goodput", json_real(c->request_goodput));
        json_object_set_new(j, "goodput", json_real(c->goodput));
    }
    json_object_set_new(j, "ttft_ms", stat_json(&c->ttft_ms, o));
    json_object_set_new(j, "tpot_ms", stat_json(&c->tpot_ms, o));
    json_object_set_new(j, "itl_ms", stat_json(&c->itl_ms, o));
    json_object_set_new(j, "e2el_ms", stat_json(&c->e2el_ms, o));
    return j;
}

json_t *standard_to_json(const standard_metrics *m)
{
    const standard_options *o = &m->opt;
    json_t *pct = json_array();
    for (int k = 0; k < o->n_percentiles; k++)
        json_array_append_new(pct, json_real(o->percentiles[k]));
    json_t *slo = json_object();
    if (o->slo_ttft_ms > 0)
        json_object_set_new(slo, "ttft", json_real(o->slo_ttft_ms));
    if (o->slo_tpot_ms > 0)
        json_object_set_new(slo, "tpot", json_real(o->slo_tpot_ms));
    if (o->slo_e2el_ms > 0)
        json_object_set_new(slo, "e2el", json_real(o->slo_e2el_ms));
    if (o->slo_itl_ms > 0)
        json_object_set_new(slo, "itl", json_real(o->slo_itl_ms));
    return json_pack("{s:o, s:o, s:o, s:o, s:o}", "percentiles", pct, "slo_ms", slo, "all",
                     class_json(&m->all, o), "background", class_json(&m->background, o),
                     "injected", class_json(&m->injected, o));
}
