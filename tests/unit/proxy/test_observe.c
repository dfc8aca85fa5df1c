/* proxy/observe: the live analysis on made-up streams. The rule (steady streams, the lesson's
 * signature, the quarter rule, unexplained gaps), when a stall is decided (deferred until its
 * windows are known; pobs_flush), the threshold (absolute, min_gaps, the rolling p50 against
 * a sorted reference), the culprit callback once per request, bounded memory, and the same
 * stalls, causes and culprits as run's analysis (analysis_summarize) on a random log. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "analysis/analysis.h"
#include "common/err.h"
#include "common/tokenlog.h"
#include "proxy/observe.h"

#define MS 1000000LL
#define US 1000LL

static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rnd(uint64_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state % n;
}

/* ---- what the sink saw ----------------------------------------------------------------- */

typedef struct recorder {
    int64_t gaps;
    pobs_stall *stalls;
    int64_t n_stalls, cap_stalls;
    int64_t n_culprits;         /* culprit callbacks */
    int64_t culprit_request[64];
    int32_t culprit_prompt[64];
} recorder;

static void on_gap(void *ctx, int64_t request, int64_t gap_ns)
{
    (void)request;
    assert_true(gap_ns >= 0);
    ((recorder *)ctx)->gaps++;
}

static void on_stall(void *ctx, const pobs_stall *s)
{
    recorder *rec = ctx;
    if (rec->n_stalls == rec->cap_stalls) {
        rec->cap_stalls = rec->cap_stalls ? rec->cap_stalls * 2 : 64;
        rec->stalls = realloc(rec->stalls, (size_t)rec->cap_stalls * sizeof *rec->stalls);
        assert_non_null(rec->stalls);
    }
    rec->stalls[rec->n_stalls++] = *s;
}

static void on_culprit(void *ctx, int64_t request, int32_t prompt_tokens)
{
    recorder *rec = ctx;
    assert_true(rec->n_culprits < 64);
    rec->culprit_request[rec->n_culprits] = request;
    rec->culprit_prompt[rec->n_culprits++] = prompt_tokens;
}

static pobs *observer(const pobs_config *cfg, recorder *rec)
{
    memset(rec, 0, sizeof *rec);
    pobs_sink sink = {.ctx = rec, .gap = on_gap, .stall = on_stall, .culprit = on_culprit};
    pobs *o = pobs_new(cfg, &sink);
    assert_non_null(o);
    return o;
}

/* The observer and what its sink kept, freed. */
static void finish(pobs *o, recorder *rec)
{
    pobs_free(o);
    free(rec->stalls);
    memset(rec, 0, sizeof *rec);
}

static pobs_config absolute(int64_t threshold_ns)
{
    pobs_config cfg;
    pobs_config_default(&cfg);
    cfg.stall_abs_ns = threshold_ns;
    return cfg;
}

static pobs_stats stats(const pobs *o)
{
    pobs_stats s;
    pobs_get_stats(o, &s);
    return s;
}

/* ---- scripts: what the proxy would see, played in time order --------------------------- */

typedef enum { ACT_START = 0, ACT_PROMPT = 1, ACT_TOKEN = 2, ACT_END = 3 } act_kind;

typedef struct act {
    int64_t t_ns;
    int kind;
    int64_t request;
    int32_t user, prompt;
} act;

typedef struct script {
    act *acts;
    int64_t n, cap;
} script;

static void add(script *sc, act a)
{
    if (sc->n == sc->cap) {
        sc->cap = sc->cap ? sc->cap * 2 : 256;
        sc->acts = realloc(sc->acts, (size_t)sc->cap * sizeof *sc->acts);
        assert_non_null(sc->acts);
    }
    sc->acts[sc->n++] = a;
}

static void start(script *sc, int64_t request, int32_t user, int64_t t_ns, int32_t prompt)
{
    add(sc, (act){t_ns, ACT_START, request, user, prompt});
}

/* Token events of request every every_ns in [from_ns, to_ns]. */
static void tokens(script *sc, int64_t request, int64_t from_ns, int64_t to_ns, int64_t every_ns)
{
    for (int64_t t = from_ns; t <= to_ns; t += every_ns)
        add(sc, (act){t, ACT_TOKEN, request, 0, 0});
}

static int cmp_act(const void *x, const void *y)
{
    const act *a = x, *b = y;
    if (a->t_ns != b->t_ns)
        return (a->t_ns > b->t_ns) - (a->t_ns < b->t_ns);
    if (a->kind != b->kind)
        return a->kind - b->kind;
    return (a->request > b->request) - (a->request < b->request);
}

/* Every act in time order, pobs_advance after each; the script is freed. */
static void play(pobs *o, script *sc)
{
    qsort(sc->acts, (size_t)sc->n, sizeof *sc->acts, cmp_act);
    for (int64_t i = 0; i < sc->n; i++) {
        const act *a = &sc->acts[i];
        switch (a->kind) {
        case ACT_START:
            assert_int_equal(pobs_request_start(o, a->request, a->user, a->t_ns, a->prompt), 0);
            break;
        case ACT_PROMPT: pobs_request_prompt(o, a->request, a->prompt); break;
        case ACT_TOKEN: pobs_tokens(o, a->request, a->t_ns, 1); break;
        default: pobs_request_end(o, a->request, a->t_ns); break;
        }
        pobs_advance(o, a->t_ns);
    }
    free(sc->acts);
    memset(sc, 0, sizeof *sc);
}

/* ---- the rule -------------------------------------------------------------------------- */

/* 12 streams, a token every 30 ms (a stream's first 10 + i ms after its send at i ms), paused
 * over [pause_from, pause_to) when pause_to > 0: each resumes at pause_to + 1 + i ms. */
static void twelve_streams(script *sc, int64_t pause_from, int64_t pause_to, int64_t until)
{
    for (int i = 0; i < 12; i++) {
        const int64_t id = 1 + i;
        start(sc, id, i, i * MS, 100);
        int64_t t = (10 + i) * MS;
        for (; t <= until && (pause_to == 0 || t < pause_from); t += 30 * MS)
            add(sc, (act){t, ACT_TOKEN, id, 0, 0});
        if (pause_to > 0)
            tokens(sc, id, pause_to + (1 + i) * MS, until, 30 * MS);
        add(sc, (act){until + 5 * MS, ACT_END, id, 0, 0});
    }
}

/* Stream i's last token before the pause at from, and its first after it (to). */
static int64_t last_before(int i, int64_t from)
{
    int64_t t = (10 + i) * MS;
    while (t + 30 * MS < from)
        t += 30 * MS;
    return t;
}

static void test_steady_streams_no_stalls(void **state)
{
    (void)state;
    recorder rec;
    pobs *o = observer(NULL, &rec);
    script sc = {0};
    /* 12 streams with 25-35 ms between tokens for 10 s. */
    int64_t expect_gaps = 0;
    for (int i = 0; i < 12; i++) {
        start(&sc, 1 + i, i, i * MS, 50);
        int64_t t = (10 + i) * MS, n = 0;
        for (; t <= 10000 * MS; t += (25 + (int64_t)rnd(11)) * MS, n++)
            add(&sc, (act){t, ACT_TOKEN, 1 + i, 0, 0});
        expect_gaps += n - 1;
        add(&sc, (act){t, ACT_END, 1 + i, 0, 0});
    }
    play(o, &sc);
    pobs_flush(o, 10100 * MS);
    const pobs_stats s = stats(o);
    assert_int_equal(rec.gaps, expect_gaps);
    assert_int_equal(s.gaps, expect_gaps);
    assert_int_equal(rec.n_stalls, 0);
    assert_int_equal(s.stalls, 0);
    assert_int_equal(s.open, 0);
    assert_int_equal(s.pending, 0);
    /* 5 x a p50 of 25-35 ms. */
    assert_in_range(pobs_threshold_ns(o), 5 * 29 * MS, 5 * 31 * MS);
    finish(o, &rec);
}

/* The lesson: an 8,000-token prompt sent at 2 s holds the batch for 1.5 s; every one of the
 * 12 streams' gaps across it is a stall, its cause the prefill, its culprit that request. The
 * estimate of its prompt (7,800) is replaced by the server's count before the stalls end. */
static void test_lesson_signature(void **state)
{
    (void)state;
    recorder rec;
    pobs *o = observer(NULL, &rec);
    script sc = {0};
    twelve_streams(&sc, 2000 * MS, 3500 * MS, 5000 * MS);
    start(&sc, 100, 12, 2000 * MS, 7800);
    add(&sc, (act){2500 * MS, ACT_PROMPT, 100, 0, 8000});
    tokens(&sc, 100, 3500 * MS, 4000 * MS, 30 * MS);
    add(&sc, (act){4000 * MS, ACT_END, 100, 0, 0});
    play(o, &sc);

    assert_int_equal(rec.n_stalls, 12);
    for (int i = 0; i < 12; i++) {
        const pobs_stall *st = &rec.stalls[i];
        /* Decided in the order the gaps ended: stream 1 resumes first. */
        assert_int_equal(st->request, 1 + i);
        assert_int_equal(st->user, i);
        assert_int_equal(st->t_ns, last_before(i, 2000 * MS));
        assert_int_equal(st->t_ns + st->gap_ns, 3500 * MS + (1 + i) * MS);
        assert_int_equal(st->threshold_ns, 150 * MS); /* 5 x 30 ms */
        assert_int_equal(st->cause, POBS_CAUSE_PREFILL);
        assert_string_equal(pobs_cause_name(st->cause), "prefill");
        assert_int_equal(st->n_culprits, 1);
        assert_int_equal(st->culprit[0], 100);
        assert_int_equal(st->culprit_prompt[0], 8000);
    }
    assert_int_equal(rec.n_culprits, 1);
    assert_int_equal(rec.culprit_request[0], 100);
    assert_int_equal(rec.culprit_prompt[0], 8000);
    const pobs_stats s = stats(o);
    assert_int_equal(s.stalls, 12);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.open, 0);
    finish(o, &rec);
}

/* Behind the 8,000-token prompt a 100-token request queued as long (sent at 2010, its first
 * token at 3520): no culprit (100 x 4 < 8,000). A 2,500-token one beside it is (2,500 x 4 >=
 * 8,000), second. */
static void test_quarter_rule(void **state)
{
    (void)state;
    recorder rec;
    pobs *o = observer(NULL, &rec);
    script sc = {0};
    twelve_streams(&sc, 2000 * MS, 3500 * MS, 5000 * MS);
    start(&sc, 100, 12, 2000 * MS, 8000);
    tokens(&sc, 100, 3500 * MS, 4000 * MS, 30 * MS);
    start(&sc, 101, 13, 2010 * MS, 100);
    tokens(&sc, 101, 3520 * MS, 4000 * MS, 30 * MS);
    start(&sc, 102, 14, 2005 * MS, 2500);
    tokens(&sc, 102, 3510 * MS, 4000 * MS, 30 * MS);
    for (int64_t id = 100; id <= 102; id++)
        add(&sc, (act){4100 * MS, ACT_END, id, 0, 0});
    play(o, &sc);

    assert_int_equal(rec.n_stalls, 12);
    for (int i = 0; i < 12; i++) {
        const pobs_stall *st = &rec.stalls[i];
        assert_int_equal(st->cause, POBS_CAUSE_PREFILL);
        assert_int_equal(st->n_culprits, 2);
        assert_int_equal(st->culprit[0], 100);
        assert_int_equal(st->culprit_prompt[0], 8000);
        assert_int_equal(st->culprit[1], 102);
        assert_int_equal(st->culprit_prompt[1], 2500);
    }
    assert_int_equal(rec.n_culprits, 2);
    assert_int_equal(rec.culprit_request[0], 100);
    assert_int_equal(rec.culprit_request[1], 102);
    finish(o, &rec);
}

/* Every stream pauses 500 ms and no request waited long for its first token (one sent in the
 * pause got it in 50 ms): the stalls are unexplained, without culprits. */
static void test_unexplained(void **state)
{
    (void)state;
    recorder rec;
    pobs *o = observer(NULL, &rec);
    script sc = {0};
    twelve_streams(&sc, 2000 * MS, 2500 * MS, 4000 * MS);
    start(&sc, 100, 12, 2100 * MS, 9000);
    tokens(&sc, 100, 2150 * MS, 3000 * MS, 30 * MS);
    add(&sc, (act){3000 * MS, ACT_END, 100, 0, 0});
    play(o, &sc);

    assert_int_equal(rec.n_stalls, 12);
    for (int i = 0; i < 12; i++) {
        assert_int_equal(rec.stalls[i].cause, POBS_CAUSE_UNEXPLAINED);
        assert_string_equal(pobs_cause_name(rec.stalls[i].cause), "unexplained");
        assert_int_equal(rec.stalls[i].n_culprits, 0);
        assert_int_equal(rec.stalls[i].gap_ns,
                         2500 * MS + (1 + i) * MS - last_before(i, 2000 * MS));
    }
    assert_int_equal(rec.n_culprits, 0);
    finish(o, &rec);
}

/* ---- when a stall is decided ----------------------------------------------------------- */

/* Request 1 streams every 20 ms to 1000 ms, then its next token comes at 1300 (threshold
 * 100 ms: a stall). Request 2 was sent at 1250, before the gap's end, and has no first token
 * then: it may yet turn out a long window, so the stall waits. */
static pobs *deferred_setup(recorder *rec, pobs_config *cfg)
{
    *cfg = absolute(100 * MS);
    pobs *o = observer(cfg, rec);
    assert_int_equal(pobs_request_start(o, 1, 7, 0, 50), 0);
    for (int64_t t = 0; t <= 1000 * MS; t += 20 * MS) {
        pobs_tokens(o, 1, t, 1);
        pobs_advance(o, t);
    }
    assert_int_equal(pobs_request_start(o, 2, 8, 1250 * MS, 3000), 0);
    pobs_tokens(o, 1, 1300 * MS, 1);
    pobs_advance(o, 1300 * MS);
    assert_int_equal(rec->n_stalls, 0);
    assert_int_equal(stats(o).pending, 1);
    return o;
}

/* Its first token comes at 1340, after the stalled stream's token at 1300: a 90 ms window,
 * short. Decided then, not before: unexplained. */
static void test_deferred_until_first_token(void **state)
{
    (void)state;
    recorder rec;
    pobs_config cfg;
    pobs *o = deferred_setup(&rec, &cfg);
    pobs_advance(o, 1339 * MS);
    assert_int_equal(rec.n_stalls, 0);
    pobs_tokens(o, 2, 1340 * MS, 1);
    pobs_advance(o, 1340 * MS);
    assert_int_equal(rec.n_stalls, 1);
    assert_int_equal(stats(o).pending, 0);
    const pobs_stall *st = &rec.stalls[0];
    assert_int_equal(st->request, 1);
    assert_int_equal(st->user, 7);
    assert_int_equal(st->t_ns, 1000 * MS);
    assert_int_equal(st->gap_ns, 300 * MS);
    assert_int_equal(st->threshold_ns, 100 * MS);
    assert_int_equal(st->cause, POBS_CAUSE_UNEXPLAINED);
    assert_int_equal(st->n_culprits, 0);
    assert_int_equal(rec.n_culprits, 0);
    finish(o, &rec);

    /* Its first token at 1350 exactly: a window of the threshold itself is long (at least
     * the threshold), a culprit. */
    o = deferred_setup(&rec, &cfg);
    pobs_advance(o, 1349 * MS);
    pobs_tokens(o, 2, 1350 * MS, 1);
    pobs_advance(o, 1350 * MS);
    assert_int_equal(rec.n_stalls, 1);
    assert_int_equal(rec.stalls[0].cause, POBS_CAUSE_PREFILL);
    assert_int_equal(rec.stalls[0].culprit[0], 2);
    finish(o, &rec);
}

/* No first token by 1350: it has waited the threshold, a long window whenever its token
 * comes. Decided at 1350 (not at 1349): prefill, request 2 its culprit; its first token at
 * 1600 changes nothing. */
static void test_deferred_until_threshold(void **state)
{
    (void)state;
    recorder rec;
    pobs_config cfg;
    pobs *o = deferred_setup(&rec, &cfg);
    pobs_advance(o, 1349 * MS);
    assert_int_equal(rec.n_stalls, 0);
    pobs_advance(o, 1350 * MS);
    assert_int_equal(rec.n_stalls, 1);
    assert_int_equal(rec.stalls[0].cause, POBS_CAUSE_PREFILL);
    assert_int_equal(rec.stalls[0].n_culprits, 1);
    assert_int_equal(rec.stalls[0].culprit[0], 2);
    assert_int_equal(rec.stalls[0].culprit_prompt[0], 3000);
    assert_int_equal(rec.n_culprits, 1);
    assert_int_equal(rec.culprit_request[0], 2);
    pobs_tokens(o, 2, 1600 * MS, 1);
    pobs_request_end(o, 2, 1700 * MS);
    pobs_request_end(o, 1, 1700 * MS);
    pobs_advance(o, 1700 * MS);
    assert_int_equal(rec.n_stalls, 1);
    assert_int_equal(rec.n_culprits, 1);
    assert_int_equal(stats(o).open, 0);
    finish(o, &rec);
}

/* At shutdown the pending stall is decided with what is known: request 2 waited 60 ms of its
 * 100, not a culprit. A second flush finds nothing. */
static void test_flush(void **state)
{
    (void)state;
    recorder rec;
    pobs_config cfg;
    pobs *o = deferred_setup(&rec, &cfg);
    pobs_flush(o, 1310 * MS);
    assert_int_equal(rec.n_stalls, 1);
    assert_int_equal(rec.stalls[0].cause, POBS_CAUSE_UNEXPLAINED);
    assert_int_equal(rec.stalls[0].gap_ns, 300 * MS);
    pobs_stats s = stats(o);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.stalls, 1);
    pobs_flush(o, 1320 * MS);
    assert_int_equal(rec.n_stalls, 1);
    finish(o, &rec);

    /* Flushed at 1360, it had waited 110 ms: a culprit. */
    o = deferred_setup(&rec, &cfg);
    pobs_flush(o, 1360 * MS);
    assert_int_equal(rec.n_stalls, 1);
    assert_int_equal(rec.stalls[0].cause, POBS_CAUSE_PREFILL);
    assert_int_equal(rec.stalls[0].culprit[0], 2);
    finish(o, &rec);
}

/* ---- the threshold --------------------------------------------------------------------- */

/* An absolute threshold applies from the first gap (no min_gaps), strictly: a gap of exactly
 * 50 ms is no stall, 50 ms + 1 ns is. */
static void test_absolute_threshold(void **state)
{
    (void)state;
    recorder rec;
    pobs_config cfg = absolute(50 * MS);
    cfg.min_gaps = 1000;
    pobs *o = observer(&cfg, &rec);
    assert_int_equal(pobs_threshold_ns(o), 50 * MS);
    assert_int_equal(pobs_request_start(o, 1, 0, 0, 10), 0);
    const int64_t t[] = {10 * MS, 20 * MS, 70 * MS, 120 * MS + 1, 130 * MS};
    for (int i = 0; i < 5; i++) {
        pobs_tokens(o, 1, t[i], 1);
        pobs_advance(o, t[i]);
    }
    assert_int_equal(rec.gaps, 4);
    assert_int_equal(rec.n_stalls, 1);
    assert_int_equal(rec.stalls[0].t_ns, 70 * MS);
    assert_int_equal(rec.stalls[0].gap_ns, 50 * MS + 1);
    assert_int_equal(rec.stalls[0].threshold_ns, 50 * MS);
    finish(o, &rec);
}

/* Fewer than min_gaps gaps: no threshold, no stall, however long the gap. */
static void test_min_gaps(void **state)
{
    (void)state;
    recorder rec;
    pobs_config cfg;
    pobs_config_default(&cfg);
    cfg.window_gaps = 64;
    cfg.min_gaps = 32;
    pobs *o = observer(&cfg, &rec);
    assert_int_equal(pobs_request_start(o, 1, 0, 0, 10), 0);
    int64_t t = 0;
    pobs_tokens(o, 1, t, 1);
    for (int gap = 1; gap <= 40; gap++) {
        t += gap == 11 || gap == 35 ? 1000 * MS : 10 * MS;
        pobs_tokens(o, 1, t, 1);
        pobs_advance(o, t);
        /* 0 through the 31st gap; from the 32nd, 5 x the p50 (10 ms: one long gap of 32). */
        assert_int_equal(pobs_threshold_ns(o), gap < 32 ? 0 : 50 * MS);
    }
    /* The 11th gap's second passed unnoticed; the 35th's is a stall. */
    assert_int_equal(rec.n_stalls, 1);
    assert_int_equal(rec.stalls[0].gap_ns, 1000 * MS);
    assert_int_equal(rec.stalls[0].threshold_ns, 50 * MS);
    assert_int_equal(rec.stalls[0].t_ns, t - 5 * 10 * MS - 1000 * MS);
    finish(o, &rec);
}

static int cmp_i64(const void *x, const void *y)
{
    const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* The naive reference: 5 x the nearest-rank p50 (rank ceil(n / 2)) of the last n gaps,
 * sorted. */
static int64_t reference_threshold(const int64_t *gaps, int64_t seen, int64_t n)
{
    int64_t last[64];
    memcpy(last, gaps + seen - n, (size_t)n * sizeof *last);
    qsort(last, (size_t)n, sizeof *last, cmp_i64);
    return 5 * last[(n + 1) / 2 - 1];
}

/* The rolling p50 over the last 64 gaps, recomputed every 4 (64 / 16), equals the sorted
 * reference at each recompute and holds between them; it follows the pace from 5-15 ms to
 * 35-45 ms, and a 100 ms gap is a stall at the first pace, not at the second. */
static void test_rolling_median(void **state)
{
    (void)state;
    recorder rec;
    pobs_config cfg;
    pobs_config_default(&cfg);
    cfg.window_gaps = 64;
    cfg.min_gaps = 64;
    pobs *o = observer(&cfg, &rec);
    assert_int_equal(pobs_request_start(o, 1, 0, 0, 10), 0);
    enum { N = 600 };
    int64_t gaps[N], t = 0, held = 0;
    pobs_tokens(o, 1, t, 1);
    int stalls_at_100ms[2] = {0, 0};
    for (int64_t n = 1; n <= N; n++) {
        const bool slow = n > N / 2;
        const bool probe = n == 250 || n == 550; /* a 100 ms gap at each pace */
        gaps[n - 1] = probe ? 100 * MS
                            : (slow ? 35 * MS : 5 * MS) + (int64_t)rnd(10001) * US;
        const int64_t before = rec.n_stalls;
        t += gaps[n - 1];
        pobs_tokens(o, 1, t, 1);
        pobs_advance(o, t);
        if (probe)
            stalls_at_100ms[slow] = (int)(rec.n_stalls - before);
        const int64_t thr = pobs_threshold_ns(o);
        if (n < 64)
            assert_int_equal(thr, 0);
        else if ((n - 64) % 4 == 0)
            assert_int_equal(thr, held = reference_threshold(gaps, n, 64));
        else
            assert_int_equal(thr, held);
    }
    assert_int_equal(stalls_at_100ms[0], 1);
    assert_int_equal(stalls_at_100ms[1], 0);
    assert_in_range(pobs_threshold_ns(o), 5 * 35 * MS, 5 * 45 * MS);
    assert_int_equal(rec.n_stalls, 1);
    finish(o, &rec);
}

/* ---- culprits -------------------------------------------------------------------------- */

/* Request 100's wait (2.0 - 3.5 s) spans two gaps of each stream (one token at 2.7 s), and
 * request 200's (6.0 - 7.0 s) one more: 36 stalls, two culprit callbacks, once each. */
static void test_culprit_once_per_request(void **state)
{
    (void)state;
    recorder rec;
    pobs *o = observer(NULL, &rec);
    script sc = {0};
    for (int i = 0; i < 12; i++) {
        const int64_t id = 1 + i;
        start(&sc, id, i, i * MS, 100);
        for (int64_t t = (10 + i) * MS; t <= 9000 * MS; t += 30 * MS)
            if ((t < 2000 * MS || t > 3500 * MS) && (t < 6000 * MS || t > 7000 * MS))
                add(&sc, (act){t, ACT_TOKEN, id, 0, 0});
        add(&sc, (act){2700 * MS + i * MS, ACT_TOKEN, id, 0, 0});
        add(&sc, (act){9100 * MS, ACT_END, id, 0, 0});
    }
    start(&sc, 100, 12, 2000 * MS, 8000);
    tokens(&sc, 100, 3500 * MS, 3600 * MS, 30 * MS);
    add(&sc, (act){3600 * MS, ACT_END, 100, 0, 0});
    start(&sc, 200, 13, 6000 * MS, 6000);
    tokens(&sc, 200, 7000 * MS, 7100 * MS, 30 * MS);
    add(&sc, (act){7100 * MS, ACT_END, 200, 0, 0});
    play(o, &sc);

    assert_int_equal(rec.n_stalls, 36);
    int by_culprit[2] = {0, 0};
    for (int64_t i = 0; i < rec.n_stalls; i++) {
        assert_int_equal(rec.stalls[i].n_culprits, 1);
        by_culprit[rec.stalls[i].culprit[0] == 200]++;
    }
    assert_int_equal(by_culprit[0], 24);
    assert_int_equal(by_culprit[1], 12);
    assert_int_equal(rec.n_culprits, 2);
    assert_int_equal(rec.culprit_request[0], 100);
    assert_int_equal(rec.culprit_prompt[0], 8000);
    assert_int_equal(rec.culprit_request[1], 200);
    assert_int_equal(rec.culprit_prompt[1], 6000);
    finish(o, &rec);
}

/* ---- memory ---------------------------------------------------------------------------- */

/* One stream stops at 0 without ending (its next gap could still overlap anything), so ten
 * long windows may all matter: four are kept (max_windows), six dropped and counted. Once it
 * ends, none can matter. */
static void test_max_windows(void **state)
{
    (void)state;
    recorder rec;
    pobs_config cfg = absolute(100 * MS);
    cfg.max_windows = 4;
    pobs *o = observer(&cfg, &rec);
    assert_int_equal(pobs_request_start(o, 1, 0, 0, 10), 0);
    pobs_tokens(o, 1, 0, 1);
    for (int64_t k = 0; k < 10; k++) {
        const int64_t send = 1000 * MS + k * 300 * MS;
        assert_int_equal(pobs_request_start(o, 10 + k, 1, send, 5000), 0);
        pobs_tokens(o, 10 + k, send + 200 * MS, 1);
        pobs_request_end(o, 10 + k, send + 250 * MS);
        pobs_advance(o, send + 250 * MS);
    }
    pobs_stats s = stats(o);
    assert_int_equal(s.windows_kept, 4);
    assert_int_equal(s.windows_dropped, 6);
    assert_int_equal(s.open, 1);
    pobs_request_end(o, 1, 5000 * MS);
    pobs_advance(o, 5000 * MS);
    s = stats(o);
    assert_int_equal(s.windows_kept, 0);
    assert_int_equal(s.windows_dropped, 6);
    assert_int_equal(s.open, 0);
    finish(o, &rec);
}

/* 10,000 streams open at once, each with its first token before any gap (threshold 0: every
 * window kept) and max_windows 1,000: the first window leaves once no gap can overlap it, the
 * next 8,999 are dropped. Three more tokens each, then all end: nothing open, nothing kept. */
static void test_ten_thousand_streams(void **state)
{
    (void)state;
    recorder rec;
    pobs_config cfg;
    pobs_config_default(&cfg);
    cfg.max_windows = 1000;
    pobs *o = observer(&cfg, &rec);
    enum { STREAMS = 10000 };
    for (int64_t i = 0; i < STREAMS; i++)
        assert_int_equal(pobs_request_start(o, 1000000 + i * 7, (int32_t)i, i * US, 100), 0);
    assert_int_equal(pobs_request_start(o, 1000000, 0, 0, 100), -1); /* open already */
    assert_int_equal(stats(o).open, STREAMS);
    for (int64_t i = 0; i < STREAMS; i++)
        pobs_tokens(o, 1000000 + i * 7, 20 * MS + i * US, 1);
    pobs_stats s = stats(o);
    assert_int_equal(s.windows_kept, 1000);
    assert_int_equal(s.windows_dropped, 8999);
    for (int64_t round = 1; round <= 3; round++) {
        for (int64_t i = 0; i < STREAMS; i++)
            pobs_tokens(o, 1000000 + i * 7, 20 * MS + round * 30 * MS + i * US, 1);
        pobs_advance(o, 20 * MS + round * 30 * MS + STREAMS * US);
    }
    for (int64_t i = 0; i < STREAMS; i++)
        pobs_request_end(o, 1000000 + i * 7, 200 * MS + i * US);
    pobs_advance(o, 200 * MS + STREAMS * US);
    s = stats(o);
    assert_int_equal(s.open, 0);
    assert_int_equal(s.windows_kept, 0);
    assert_int_equal(s.gaps, 3 * STREAMS);
    assert_int_equal(rec.gaps, 3 * STREAMS);
    assert_int_equal(s.stalls, 0);
    assert_int_equal(pobs_threshold_ns(o), 150 * MS);
    /* The ids are free again. */
    assert_int_equal(pobs_request_start(o, 1000000, 0, 300 * MS, 100), 0);
    pobs_tokens(o, 1000000 + 7, 300 * MS, 1); /* ended: ignored */
    assert_int_equal(stats(o).open, 1);
    finish(o, &rec);
}

/* ---- the same decisions as run's analysis ---------------------------------------------- */

enum { SYNTH_REQUESTS = 200 };

typedef struct synth {
    int64_t send, first, end; /* first -1: cut before its first token */
    int32_t prompt;
} synth;

/* Inside another request's long prefill (send, first), a token waits for its end. */
static int64_t after_prefills(const synth *r, int n, int self, int64_t t)
{
    for (bool moved = true; moved;) {
        moved = false;
        for (int j = 0; j < n; j++)
            if (j != self && r[j].prompt >= 3000 && r[j].first > 0 && t > r[j].send &&
                t < r[j].first) {
                t = r[j].first + 1 * MS + (int64_t)rnd(10000) * US;
                moved = true;
            }
    }
    return t;
}

static int cmp_stall(const void *x, const void *y)
{
    const pobs_stall *a = x, *b = y;
    if (a->request != b->request)
        return (a->request > b->request) - (a->request < b->request);
    return (a->t_ns > b->t_ns) - (a->t_ns < b->t_ns);
}

/* 200 requests over 30 s, seeded: most prompts short (a few queued long behind the others),
 * 15 % long (3,000 - 12,000 tokens in whole thousands, so equal ones meet; 150 us a token of
 * prefill, during which every other stream waits), 4 % cut before their first token; streams
 * of 15 - 45 ms with random pauses.
 * Played through observe with a fixed 150 ms threshold and summarized by run's analysis with
 * the same: the same stalls, the same causes, the same culprits in the same order. */
static void test_equals_run_analysis(void **state)
{
    (void)state;
    rng_state = 0x9e3779b97f4a7c15ULL;
    synth r[SYNTH_REQUESTS];
    for (int i = 0; i < SYNTH_REQUESTS; i++) {
        r[i].send = (int64_t)rnd(30000000) * US;
        const bool long_prompt = rnd(100) < 15;
        r[i].prompt = long_prompt ? 1000 * (3 + (int32_t)rnd(10)) : 20 + (int32_t)rnd(1500);
        const int64_t ttft = long_prompt      ? r[i].prompt * 150 * US + (int64_t)rnd(50000) * US
                             : rnd(100) < 8 ? (200 + (int64_t)rnd(700)) * MS
                                            : (5 + (int64_t)rnd(55)) * MS;
        r[i].first = rnd(100) < 4 ? -1 : r[i].send + ttft;
        r[i].end = r[i].first < 0 ? r[i].send + (int64_t)rnd(1500000) * US : -1;
    }
    tokenlog log;
    tokenlog_init(&log);
    script sc = {0};
    for (int i = 0; i < SYNTH_REQUESTS; i++) {
        start(&sc, i, i, r[i].send, r[i].prompt);
        if (r[i].first >= 0) {
            int64_t t = r[i].first;
            const int n = 10 + (int)rnd(100);
            for (int k = 0; k < n; k++) {
                add(&sc, (act){t, ACT_TOKEN, i, 0, 0});
                tokenlog_event ev = {.t_ns = t, .request = i, .user = i, .n_tokens = 1,
                                     .kind = TOKENLOG_BG};
                assert_int_equal(tokenlog_add_event(&log, &ev), 0);
                t += (15 + (int64_t)rnd(30)) * MS + (int64_t)rnd(1000) * US;
                if (rnd(100) < 3)
                    t += (int64_t)rnd(600) * MS;
                t = after_prefills(r, SYNTH_REQUESTS, i, t);
            }
            r[i].end = t;
        }
        add(&sc, (act){r[i].end, ACT_END, i, 0, 0});
        tokenlog_request row = {.request = i, .user = i, .kind = TOKENLOG_BG,
                                .t_plan_ns = r[i].send, .t_send_ns = r[i].send,
                                .t_first_ns = r[i].first, .t_end_ns = r[i].end,
                                .prompt_tokens_requested = r[i].prompt,
                                .prompt_tokens = r[i].prompt};
        assert_int_equal(tokenlog_add_request(&log, &row, NULL), 0);
    }
    int64_t t_last = 0;
    for (int64_t k = 0; k < sc.n; k++)
        if (sc.acts[k].t_ns > t_last)
            t_last = sc.acts[k].t_ns;

    recorder rec;
    pobs_config cfg = absolute(150 * MS);
    pobs *o = observer(&cfg, &rec);
    play(o, &sc);
    pobs_flush(o, t_last);
    assert_int_equal(stats(o).open, 0);
    pobs_free(o);

    analysis_options opt;
    memset(&opt, 0, sizeof opt);
    opt.label = "observe";
    opt.engine = "none";
    opt.target = "";
    opt.duration_s = (double)t_last / 1e9;
    opt.threshold_ms = 150;
    opt.threshold_known = true;
    opt.complete = true;
    analysis_summary sum;
    char err[ERR_LEN] = "";
    if (analysis_summarize(&log, &opt, &sum, err) != 0)
        fail_msg("analysis_summarize: %s", err);

    qsort(rec.stalls, (size_t)rec.n_stalls, sizeof *rec.stalls, cmp_stall);
    assert_int_equal(rec.n_stalls, sum.n_stall_list);
    int64_t prefill = 0, unexplained = 0, several = 0;
    for (int64_t k = 0; k < sum.n_stall_list; k++) {
        const analysis_stall *want = &sum.stall_list[k];
        const pobs_stall *got = &rec.stalls[k];
        assert_int_equal(got->request, want->request);
        assert_int_equal(got->user, want->user);
        assert_int_equal(got->t_ns, want->t_ns);
        assert_int_equal(got->gap_ns, want->gap_ns);
        assert_string_equal(pobs_cause_name(got->cause),
                            analysis_cause_name((analysis_cause)want->cause));
        assert_int_equal(got->n_culprits, want->n_culprits);
        const int named = want->n_culprits < 3 ? want->n_culprits : 3;
        for (int c = 0; c < named; c++) {
            assert_int_equal(got->culprit[c], want->culprit[c]);
            assert_int_equal(got->culprit_prompt[c], want->culprit_prompt[c]);
        }
        prefill += got->cause == POBS_CAUSE_PREFILL;
        unexplained += got->cause == POBS_CAUSE_UNEXPLAINED;
        several += got->n_culprits > 1;
    }
    /* The log exercises every branch: both causes, stalls with several culprits. */
    assert_true(prefill >= 20);
    assert_true(unexplained >= 5);
    assert_true(several >= 5);
    analysis_summary_free(&sum);
    tokenlog_free(&log);
    free(rec.stalls);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* the rule */
        cmocka_unit_test(test_steady_streams_no_stalls),
        cmocka_unit_test(test_lesson_signature),
        cmocka_unit_test(test_quarter_rule),
        cmocka_unit_test(test_unexplained),
        /* when a stall is decided */
        cmocka_unit_test(test_deferred_until_first_token),
        cmocka_unit_test(test_deferred_until_threshold),
        cmocka_unit_test(test_flush),
        /* the threshold */
        cmocka_unit_test(test_absolute_threshold),
        cmocka_unit_test(test_min_gaps),
        cmocka_unit_test(test_rolling_median),
        /* culprits */
        cmocka_unit_test(test_culprit_once_per_request),
        /* memory */
        cmocka_unit_test(test_max_windows),
        cmocka_unit_test(test_ten_thousand_streams),
        /* run's analysis */
        cmocka_unit_test(test_equals_run_analysis),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
