/* calib_target — probe a black-box server for its step model (calib_target.h): the probe
 * streams on one transport, each probe, and their order. What the probes become is
 * calib_target_fit.c's. */
#include "calibrate/calib_target.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "calibrate/calib_target_admin.h"
#include "client/driver.h"
#include "client/fetch.h"
#include "common/clock.h"
#include "common/err.h"
#include "workload/workload.h"

#define PROBE_TIMEOUT_NS (30 * CLOCK_NS_PER_S) /* driver_probe's requests */
#define MODELS_TIMEOUT_NS (5 * CLOCK_NS_PER_S)
#define PUMP_SLICE_NS (20 * CLOCK_NS_PER_MS)   /* run() slices: interrupts are seen this often */
#define SETTLE_NS (300 * CLOCK_NS_PER_MS)      /* after a probe's cancel; around an injection */
#define ANSWER_TOKENS_MAX 2048                 /* a decode stream's max_tokens at most */
#define STALLED_FACTOR 3.0                     /* a stream "stalled": gap > this x its steady gap */

void calib_target_config_init(calib_target_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->max_streams = 128;
    cfg->contexts[0] = 64;
    cfg->contexts[1] = 1024;
    cfg->min_prompt_tokens = 256;
    cfg->max_prompt_tokens = 16384;
    cfg->interference_streams = 32;
    cfg->window_ns = CLOCK_NS_PER_S;
    cfg->repeats = 3;
    cfg->skip = 4;
    cfg->weight_bound = 4;
    cfg->max_drift = 0.10;
    cfg->timeout_ns = 120 * CLOCK_NS_PER_S;
}

int calib_target_count_parse(calib_target_config *cfg, const char *text, char *err)
{
    for (int i = CALIB_TARGET_COUNT_AUTO; i <= CALIB_TARGET_COUNT_USAGE; i++)
        if (strcmp(text, calib_target_count_name((calib_target_count)i)) == 0) {
            cfg->count_tokens = (calib_target_count)i;
            return 0;
        }
    return err_set(err, "'%s' is not auto, stream or usage", text);
}

/* ---- probing: streams on one transport --------------------------------------------------------- */

typedef struct probe_stream {
    int64_t t_post;
    int64_t *t_ns;
    int *cum;
    int n, cap;
    bool ended, failed;
    int http_status;
    char error[160];
} probe_stream;

struct calib_target {
    calib_target_config cfg;
    transport_options so;
    transport t;
    transport_handlers handlers; /* ctx: this */
    calib_target_tokens tokens; /* every probe stream's, as they come */
    driver_api api;
    workload_config wl;
    uint64_t salt;
    int64_t next_index;
    int64_t max_model_len;
    calib_target_kept *kept; /* the result's, while calib_target_run runs: the reset */
    bool no_metrics;         /* /metrics did not answer: not asked again */
    /* The last decode probe's ramp (all streams started): bounds the next one's wait */
    int64_t last_ramp_ns;
    double last_ramp_tokens; /* its streams x prompt */
};

static void on_token(void *ctx, void *user, const transport_token *tok)
{
    calib_target *ct = ctx;
    probe_stream *s = user;
    /* One token per event, as streamed, unless told to believe usage; usage counted beside
     * it either way (calib_target_tokens_agree). */
    const int usage = tok->n_tokens > 0 ? tok->n_tokens : 1;
    const int tokens = ct->cfg.count_tokens == CALIB_TARGET_COUNT_USAGE ? usage : 1;
    ct->tokens.streamed++;
    ct->tokens.usage += usage;
    /* Events completed by one read share its stamp (the client read late, or the kernel
     * coalesced the segments): one event of their tokens, so the next gap averages over
     * them instead of a gap of 0 counting as a step. */
    if (s->n > 0 && s->t_ns[s->n - 1] == tok->t_ns) {
        s->cum[s->n - 1] += tokens;
        return;
    }
    if (s->n == s->cap) {
        const int cap = s->cap ? s->cap * 2 : 64;
        int64_t *t = realloc(s->t_ns, sizeof *t * (size_t)cap);
        if (t)
            s->t_ns = t;
        int *c = realloc(s->cum, sizeof *c * (size_t)cap);
        if (c)
            s->cum = c;
        if (!t || !c)
            return; /* out of memory: the token is not counted; the probe sees fewer gaps */
        s->cap = cap;
    }
    s->t_ns[s->n] = tok->t_ns;
    s->cum[s->n] = (s->n ? s->cum[s->n - 1] : 0) + tokens;
    s->n++;
}

static void on_end(void *ctx, void *user, const transport_end *end)
{
    calib_target *ct = ctx;
    probe_stream *s = user;
    if (end->protocol_violations > 0) {
        if (ct->tokens.violations == 0)
            snprintf(ct->tokens.first_violation, sizeof ct->tokens.first_violation, "%s",
                     end->violation ? end->violation : "?");
        ct->tokens.violations += end->protocol_violations;
    }
    s->ended = true;
    s->http_status = end->http_status;
    if (end->error[0] && strcmp(end->finish_reason, "abort") != 0) {
        s->failed = true;
        snprintf(s->error, sizeof s->error, "%s", end->error);
    }
}

static void streams_free(probe_stream *s, int n)
{
    for (int i = 0; s && i < n; i++) {
        free(s[i].t_ns);
        free(s[i].cum);
    }
    free(s);
}

static bool interrupted(const calib_target *ct)
{
    return ct->cfg.interrupted && *ct->cfg.interrupted;
}

/* Post one stream of the index-th prompt (prompt_tokens) asking max_tokens. 0, or -1 with err. */
static int post_index(calib_target *ct, probe_stream *s, int64_t index, int prompt_tokens,
                      int max_tokens, char *err)
{
    size_t len = 0;
    char *body = driver_build_body(&ct->api, &ct->wl, ct->salt, 0, index, prompt_tokens,
                                   max_tokens, -1, &len, err);
    if (!body)
        return -1;
    const transport_request req = {driver_endpoint_path(ct->api.endpoint), body, len, &ct->handlers,
                                s, max_tokens};
    s->t_post = clock_now_ns();
    const int rc = ct->t.post(ct->t.impl, &req, err);
    free(body);
    return rc;
}

/* Post a fresh prompt: every probe's prompt is its own (calib_target.h). */
static int post(calib_target *ct, probe_stream *s, int prompt_tokens, int max_tokens, char *err)
{
    return post_index(ct, s, ct->next_index++, prompt_tokens, max_tokens, err);
}

/* Pump the transport until done(ctx) or until_ns. 0, or -1 with err (transport, interrupt). */
static int pump(calib_target *ct, int64_t until_ns, bool (*done)(void *), void *ctx, char *err)
{
    for (;;) {
        if (interrupted(ct))
            return err_set(err, "interrupted");
        if (done && done(ctx))
            return 0;
        const int64_t now = clock_now_ns();
        if (now >= until_ns)
            return 0;
        const int64_t slice = now + PUMP_SLICE_NS < until_ns ? now + PUMP_SLICE_NS : until_ns;
        if (ct->t.run(ct->t.impl, slice, err) != 0)
            return -1;
    }
}

/* End every stream (a planned stop) and give the server a moment to drop them. */
static int finish(calib_target *ct, char *err)
{
    char scratch[ERR_LEN];
    ct->t.cancel_all(ct->t.impl, "");
    return pump(ct, clock_now_ns() + SETTLE_NS, NULL, NULL, err ? err : scratch);
}

/* Reset the server's cache where it offers one (calib_target_admin.h). */
static void reset_state(calib_target *ct)
{
    if (ct->kept)
        calib_target_reset(&ct->so, MODELS_TIMEOUT_NS, ct->kept);
}

/* /metrics into *out where the target offers it (all -1 once it did not answer). */
static void scrape(calib_target *ct, calib_target_metrics *out)
{
    char why[ERR_LEN];
    *out = CALIB_TARGET_METRICS_NONE;
    if (!ct->no_metrics && calib_target_metrics_scrape(&ct->so, MODELS_TIMEOUT_NS, out, why) != 0)
        ct->no_metrics = true;
}

typedef struct ramp_ctx {
    probe_stream *s;
    int n, skip;
} ramp_ctx;

static bool any_ended(void *ctx)
{
    const ramp_ctx *r = ctx;
    for (int i = 0; i < r->n; i++)
        if (r->s[i].ended)
            return true;
    return false;
}

/* Every stream has its first skip tokens, or one has ended (refused, failed, done early:
 * no use waiting for the others). */
static bool ramped(void *ctx)
{
    const ramp_ctx *r = ctx;
    if (any_ended(ctx))
        return true;
    for (int i = 0; i < r->n; i++)
        if (r->s[i].n < r->skip)
            return false;
    return true;
}

static void series_of(const probe_stream *s, int n, calib_target_series *out)
{
    for (int i = 0; i < n; i++)
        out[i] = (calib_target_series){s[i].t_ns, s[i].cum, s[i].n};
}

/* The answer's length: what the window needs, within the model's length. */
static int answer_tokens(const calib_target *ct, int prompt_tokens)
{
    int64_t room = ANSWER_TOKENS_MAX;
    if (ct->max_model_len > 0 && ct->max_model_len - prompt_tokens - 1 < room)
        room = ct->max_model_len - prompt_tokens - 1;
    return room > 1 ? (int)room : 1;
}

/* The first failed stream's reason, or NULL. */
static const probe_stream *failed_stream(const probe_stream *s, int n)
{
    for (int i = 0; i < n; i++)
        if (s[i].failed)
            return &s[i];
    return NULL;
}

/* One decode probe: B streams of prompt_tokens. 0 (*out filled), 1 (the target would not
 * run it: note says why), -1 with err. */
static int probe_decode(calib_target *ct, int batch, int prompt_tokens, calib_target_decode *out,
                        char *note, size_t note_size, char *err)
{
    const calib_target_config *c = &ct->cfg;
    probe_stream *s = calloc((size_t)batch, sizeof *s);
    if (!s)
        return err_set(err, "out of memory for %d streams", batch);
    int rc = -1;
    const int answer = answer_tokens(ct, prompt_tokens);
    /* on a clean cache: under a unified one the cells are then the streams' own */
    reset_state(ct);
    for (int i = 0; i < batch; i++)
        if (post(ct, &s[i], prompt_tokens, answer, err) != 0)
            goto done;
    ramp_ctx r = {s, batch, c->skip};
    const int64_t start = clock_now_ns();
    /* A target that caps concurrent requests below the batch starts the rest only as others
     * end (thousands of tokens later): wait 4 x what the last ramp's prompts predict + 10 s,
     * not the whole timeout. */
    int64_t limit = c->timeout_ns;
    if (ct->last_ramp_ns > 0) {
        const double scaled = 4.0 * (double)ct->last_ramp_ns * batch * prompt_tokens /
                                  ct->last_ramp_tokens + 10e9;
        limit = scaled < (double)limit ? (int64_t)scaled : limit;
    }
    if (pump(ct, start + limit, ramped, &r, err) != 0)
        goto done;
    const probe_stream *bad = failed_stream(s, batch);
    if (bad || !ramped(&r) || any_ended(&r)) { /* ramped() alone: all started, or one ended */
        if (bad)
            snprintf(note, note_size, "%d streams of %d-token prompts: the target answered: %s",
                     batch, prompt_tokens, bad->error);
        else if (!ramped(&r))
            snprintf(note, note_size, "%d streams of %d-token prompts did not all start within "
                     "%.0f s (does the target cap concurrent requests?)",
                     batch, prompt_tokens, (double)limit / 1e9);
        else
            snprintf(note, note_size, "%d streams of %d-token prompts: a stream ended before "
                     "the window (the target ignores ignore_eos?)", batch, prompt_tokens);
        rc = 1;
        goto done;
    }
    /* a unified cache's occupied cells at both ends of the window (kernel stamps keep the
     * gaps of tokens that wait in the socket meanwhile) */
    calib_target_metrics cells_from, cells_to = CALIB_TARGET_METRICS_NONE;
    scrape(ct, &cells_from);
    const int64_t from = clock_now_ns();
    ct->last_ramp_ns = from - start;
    ct->last_ramp_tokens = (double)batch * prompt_tokens;
    if (pump(ct, from + c->window_ns, any_ended, &r, err) != 0)
        goto done;
    const int64_t to = clock_now_ns();
    if (cells_from.kv_cells >= 0) /* a server that says no cells is not asked again */
        scrape(ct, &cells_to);
    out->occupied_cells = cells_from.kv_cells >= 0 && cells_to.kv_cells >= 0
                              ? (cells_from.kv_cells + cells_to.kv_cells) / 2
                              : -1;
    calib_target_series *series = malloc(sizeof *series * (size_t)batch);
    if (!series) {
        err_set(err, "out of memory");
        goto done;
    }
    series_of(s, batch, series);
    out->batch = batch;
    out->prompt_tokens = prompt_tokens;
    const int got = calib_target_steady_gap(series, batch, c->skip, prompt_tokens, from, to,
                                            &out->gap_ns, &out->mean_context, &out->samples);
    free(series);
    if (got != 0) {
        snprintf(note, note_size, "%d streams of %d-token prompts: no token gap in the %.1f s "
                 "window", batch, prompt_tokens, (double)c->window_ns / 1e9);
        rc = 1;
        goto done;
    }
    rc = 0;
done:
    if (finish(ct, rc < 0 ? NULL : err) != 0 && rc >= 0)
        rc = -1;
    streams_free(s, batch);
    return rc;
}

static bool ended(void *ctx)
{
    return ((const probe_stream *)ctx)->ended;
}

/* The cells a lone prompt of prompt_tokens met in a unified cache: those /metrics said before
 * it, or, when fewer, those said once it was in less its own (the slot it took dropped its
 * earlier cells); -1 when not said. */
static double cells_met(double before, double after, int prompt_tokens)
{
    if (before < 0)
        return -1;
    if (after >= 0 && after - prompt_tokens < before)
        return after - prompt_tokens > 0 ? after - prompt_tokens : 0;
    return before;
}

/* The median TTFT of `repeats` lone prompts, each the index-th prompt (-1: a fresh one each),
 * each after a reset where offered when reset; /metrics before the first into *before, and the
 * cells the median one met (cells_met; may be NULL) into *met. 0, 1 (refused: note), -1. */
static int probe_lone(calib_target *ct, int prompt_tokens, int64_t index, int repeats_asked,
                      bool reset, calib_target_metrics *before, double *met, double *ttft_ns,
                      char *note, size_t note_size, char *err)
{
    const calib_target_config *c = &ct->cfg;
    double ttft[16], sorted[16], cells[16];
    const int repeats = repeats_asked < 16 ? repeats_asked : 16;
    for (int k = 0; k < repeats; k++) {
        probe_stream s;
        memset(&s, 0, sizeof s);
        /* the 1-token answer's end follows its token at once: wait for it, so the next
         * prompt finds the server idle (and, where it offers a reset, emptied) */
        if (reset)
            reset_state(ct);
        calib_target_metrics m0, m1 = CALIB_TARGET_METRICS_NONE;
        scrape(ct, &m0);
        if (k == 0)
            *before = m0;
        int rc = post_index(ct, &s, index >= 0 ? index : ct->next_index++, prompt_tokens, 1, err);
        if (rc == 0)
            rc = pump(ct, clock_now_ns() + c->timeout_ns, ended, &s, err);
        if (!s.ended)
            ct->t.cancel_all(ct->t.impl, "");
        else if (m0.kv_cells >= 0)
            scrape(ct, &m1);
        const bool answered = s.n > 0;
        const double took = answered ? (double)(s.t_ns[0] - s.t_post) : 0;
        char why[200];
        snprintf(why, sizeof why, "%s", s.failed ? s.error : "no token within the timeout");
        free(s.t_ns);
        free(s.cum);
        if (rc != 0)
            return -1;
        if (!answered) {
            snprintf(note, note_size, "the target refused a %d-token prompt (%s)", prompt_tokens,
                     why);
            return 1;
        }
        ttft[k] = sorted[k] = took;
        cells[k] = cells_met(m0.kv_cells, m1.kv_cells, prompt_tokens);
    }
    *ttft_ns = calib_target_median(sorted, repeats);
    for (int k = 0; met && k < repeats; k++)
        if (ttft[k] == *ttft_ns)
            *met = cells[k];
    return 0;
}

/* One prefill probe: the median TTFT of `repeats` fresh lone prompts. 0, 1 (refused), -1. */
static int probe_prefill(calib_target *ct, int prompt_tokens, calib_target_prefill *f,
                         char *note, size_t note_size, char *err)
{
    return probe_lone(ct, prompt_tokens, -1, ct->cfg.repeats, true, &f->metrics, &f->cells_met,
                      &f->ttft_ns, note, note_size, err);
}

/* The sentinel (calib_target_state.h): lone fresh prompts of r->sentinel_tokens, answered
 * CALIB_TARGET_SENTINEL_ANSWER tokens each; their median TTFT and median gap, recorded as
 * following stage `after`; one the target did not answer (or whose tokens came with no gap)
 * is skipped, and r->sentinel_note says so. 0, or -1 with err (transport, interrupt). */
static int probe_sentinel(calib_target *ct, calib_target_result *r, const char *after, char *err)
{
    if (r->n_sentinel == CALIB_TARGET_MAX_SENTINELS)
        return 0;
    const calib_target_config *c = &ct->cfg;
    probe_stream s[CALIB_TARGET_SENTINEL_REPEATS];
    calib_target_series series[CALIB_TARGET_SENTINEL_REPEATS];
    double ttft[CALIB_TARGET_SENTINEL_REPEATS];
    memset(s, 0, sizeof s);
    calib_target_sentinel *out = &r->sentinel[r->n_sentinel];
    char skipped[160] = ""; /* a sentinel the target did not answer is skipped, not fatal */
    int rc = 0;
    for (int k = 0; k < CALIB_TARGET_SENTINEL_REPEATS && rc == 0 && !skipped[0]; k++) {
        reset_state(ct);
        if (k == 0)
            scrape(ct, &out->metrics);
        rc = post(ct, &s[k], r->sentinel_tokens, CALIB_TARGET_SENTINEL_ANSWER, err);
        if (rc == 0)
            rc = pump(ct, clock_now_ns() + c->timeout_ns, ended, &s[k], err);
        if (rc == 0 && (s[k].n == 0 || s[k].failed))
            snprintf(skipped, sizeof skipped, "%s", s[k].failed ? s[k].error : "no token");
        ttft[k] = s[k].n > 0 ? (double)(s[k].t_ns[0] - s[k].t_post) : 0;
    }
    int64_t samples = 0;
    double context = 0;
    series_of(s, CALIB_TARGET_SENTINEL_REPEATS, series);
    if (rc == 0 && !skipped[0] &&
        calib_target_steady_gap(series, CALIB_TARGET_SENTINEL_REPEATS, 1, r->sentinel_tokens,
                                INT64_MIN, INT64_MAX, &out->step_ns, &context, &samples) != 0)
        snprintf(skipped, sizeof skipped, "no token gap (its answers came in one read each)");
    if (rc == 0 && skipped[0]) {
        snprintf(r->sentinel_note, sizeof r->sentinel_note, "the sentinel after %s was skipped: %s",
                 after, skipped);
        if (c->progress)
            fprintf(c->progress, "  sentinel (%s): skipped: %s\n", after, skipped);
    } else if (rc == 0) {
        out->ttft_ns = calib_target_median(ttft, CALIB_TARGET_SENTINEL_REPEATS);
        snprintf(out->after, sizeof out->after, "%s", after);
        r->n_sentinel++;
        if (c->progress)
            fprintf(c->progress, "  sentinel (%s): %d-token prompt alone: TTFT %.2f ms, step %.3f "
                    "ms\n", after, r->sentinel_tokens, out->ttft_ns / 1e6, out->step_ns / 1e6);
    }
    if (finish(ct, rc < 0 ? NULL : err) != 0)
        rc = -1;
    for (int k = 0; k < CALIB_TARGET_SENTINEL_REPEATS; k++) {
        free(s[k].t_ns);
        free(s[k].cum);
    }
    return rc;
}

typedef struct inject_wait {
    const probe_stream *inject;
    const probe_stream *bg;
    int n;
} inject_wait;

/* An injection's answer: its second token bounds when the step that emitted its first
 * ended (calib_target_stall_of), should the first be delivered late. */
#define INJECT_ANSWER 2

static bool injected(void *ctx)
{
    const inject_wait *w = ctx;
    if ((w->inject->n > 0 && w->inject->cum[w->inject->n - 1] >= INJECT_ANSWER) ||
        w->inject->ended)
        return true;
    for (int i = 0; i < w->n; i++)
        if (w->bg[i].ended)
            return true;
    return false;
}

/* The interference probes: the streams, and one prompt of each length sent into them. */
static int probe_interference(calib_target *ct, calib_target_result *r, char *err)
{
    const calib_target_config *c = &ct->cfg;
    const int n = c->interference_streams;
    const int prompt = c->contexts[0];
    probe_stream *bg = calloc((size_t)n, sizeof *bg);
    calib_target_series *series = calloc((size_t)n, sizeof *series);
    int rc = -1;
    if (!bg || !series) {
        err_set(err, "out of memory for %d streams", n);
        goto done;
    }
    const int answer = answer_tokens(ct, prompt);
    reset_state(ct);
    for (int i = 0; i < n; i++)
        if (post(ct, &bg[i], prompt, answer, err) != 0)
            goto done;
    ramp_ctx rw = {bg, n, c->skip};
    if (pump(ct, clock_now_ns() + c->timeout_ns, ramped, &rw, err) != 0 ||
        pump(ct, clock_now_ns() + SETTLE_NS, any_ended, &rw, err) != 0)
        goto done;
    for (int p = 0; p < r->n_prefill; p++) {
        if (any_ended(&rw)) {
            snprintf(r->stall_note, sizeof r->stall_note, "the %d streams ended (answers of %d "
                     "tokens) before the %d-token injection", n, answer,
                     r->prefill[p].prompt_tokens);
            break;
        }
        probe_stream inj;
        memset(&inj, 0, sizeof inj);
        /* what the last injection left behind goes (a unified cache's free slots): each
         * prompt meets the streams alone; where nothing can be reset, /metrics says what
         * it meets */
        reset_state(ct);
        calib_target_metrics cells;
        scrape(ct, &cells);
        if (post(ct, &inj, r->prefill[p].prompt_tokens, INJECT_ANSWER, err) != 0)
            goto done;
        inject_wait w = {&inj, bg, n};
        /* alone it took ttft: a prompt that waits far longer beside the streams is one the
         * scheduler does not admit beside them (a budget under prompt + streams) */
        const int64_t wait_ns = (int64_t)(4 * r->prefill[p].ttft_ns) + 2 * CLOCK_NS_PER_S;
        int prc = pump(ct, clock_now_ns() + (wait_ns < c->timeout_ns ? wait_ns : c->timeout_ns),
                       injected, &w, err);
        const int64_t send = inj.t_post, first = inj.n > 0 ? inj.t_ns[0] : 0;
        /* the event that carried the second token (the first's too, when one read took both:
         * it was received no earlier than the step after the first's ended) */
        int64_t next = 0;
        for (int q = 0; q < inj.n && next == 0; q++)
            next = inj.cum[q] >= INJECT_ANSWER ? inj.t_ns[q] : 0;
        /* the prompt took a slot whose earlier cells went: what it met is what is occupied
         * once it is in, less its own cells, at most what was before it */
        calib_target_metrics cells_after = CALIB_TARGET_METRICS_NONE;
        if (first > 0 && cells.kv_cells >= 0)
            scrape(ct, &cells_after);
        free(inj.t_ns);
        free(inj.cum);
        if (prc != 0 || pump(ct, clock_now_ns() + SETTLE_NS, any_ended, &rw, err) != 0)
            goto done;
        if (first == 0) {
            if (any_ended(&rw))
                snprintf(r->stall_note, sizeof r->stall_note, "the %d streams ended (answers of "
                         "%d tokens) during the %d-token injection", n, answer,
                         r->prefill[p].prompt_tokens);
            else
                snprintf(r->stall_note, sizeof r->stall_note, "a %d-token prompt got no token "
                         "beside %d streams within %.1f s (alone: %.0f ms): the scheduler does not "
                         "admit it beside them (a budget under %d tokens?)",
                         r->prefill[p].prompt_tokens, n, (double)wait_ns / 1e9,
                         r->prefill[p].ttft_ns / 1e6, r->prefill[p].prompt_tokens + n);
            ct->t.cancel_all(ct->t.impl, ""); /* the streams too: the loop ends here */
            break;
        }
        calib_target_stall *st = &r->stall[r->n_stall];
        memset(st, 0, sizeof *st);
        st->prompt_tokens = r->prefill[p].prompt_tokens;
        st->cells_seen = cells_met(cells.kv_cells, cells_after.kv_cells, st->prompt_tokens);
        st->ttft_ns = (double)(first - send);
        st->streams = n;
        series_of(bg, n, series);
        int64_t samples = 0;
        calib_target_seen seen;
        if (calib_target_steady_gap(series, n, c->skip, prompt, send - SETTLE_NS, send, &st->gap_ns,
                                    &st->mean_context, &samples) != 0 ||
            calib_target_stall_of(series, n, send, first, next, st->gap_ns,
                                  STALLED_FACTOR * st->gap_ns, &seen) != 0)
            continue;
        st->stall_ns = seen.stall_ns;
        st->streams_stalled = seen.stalled;
        st->queue_ns = seen.queue_ns;
        st->steps = seen.steps;
        r->n_stall++;
        if (c->progress)
            fprintf(c->progress, "  interference: %d-token prompt into %d streams: stall %.2f ms "
                    "(steady gap %.2f ms, %d of %d streams stalled), TTFT %.2f ms (queued "
                    "%.2f ms, %d step%s)\n",
                    st->prompt_tokens, n, st->stall_ns / 1e6, st->gap_ns / 1e6,
                    st->streams_stalled, n, st->ttft_ns / 1e6, st->queue_ns / 1e6, st->steps,
                    st->steps == 1 ? "" : "s");
    }
    rc = 0;
done:
    if (finish(ct, rc < 0 ? NULL : err) != 0 && rc == 0)
        rc = -1;
    streams_free(bg, n);
    free(series);
    return rc;
}

/* The prompt the state probes send: the longest prefill probe up to 4096 tokens (else the
 * shortest), with its quiet TTFT. 0 when no prefill probe ran. */
static int state_prompt(const calib_target_result *r, double *quiet_ns)
{
    int pick = -1;
    for (int i = 0; i < r->n_prefill; i++)
        if (pick < 0 || (r->prefill[i].prompt_tokens <= 4096 &&
                         r->prefill[i].prompt_tokens > r->prefill[pick].prompt_tokens))
            pick = i;
    if (pick < 0)
        return 0;
    *quiet_ns = r->prefill[pick].ttft_ns;
    return r->prefill[pick].prompt_tokens;
}

/* Prefix caching: one fresh prompt twice, alone, after a reset where offered. 0, or -1. */
static int probe_caching(calib_target *ct, calib_target_result *r, char *err)
{
    calib_target_kept *k = &r->kept;
    if (!(k->prompt_tokens = state_prompt(r, &k->quiet_ns)))
        return 0;
    reset_state(ct);
    const int64_t index = ct->next_index++;
    char note[256] = "";
    int rc = probe_lone(ct, k->prompt_tokens, index, 1, false, &k->before_first, NULL,
                        &k->cache_first_ns, note, sizeof note, err);
    if (rc == 0)
        rc = probe_lone(ct, k->prompt_tokens, index, 1, false, &k->before_repeat, NULL,
                        &k->cache_second_ns, note, sizeof note, err);
    if (rc < 0)
        return -1;
    if (rc > 0)
        return err_set(err, "the prefix-caching probe: %s", note);
    if (ct->cfg.progress)
        fprintf(ct->cfg.progress, "  caching: the same %d-token prompt twice, alone: TTFT %.2f ms, "
                "then %.2f ms\n", k->prompt_tokens, k->cache_first_ns / 1e6,
                k->cache_second_ns / 1e6);
    return 0;
}

/* What the interference probes left behind: a fresh lone prompt at once, no reset. */
static int probe_after_fill(calib_target *ct, calib_target_result *r, char *err)
{
    calib_target_kept *k = &r->kept;
    char note[256] = "";
    const int rc = k->prompt_tokens == 0 ? 0
                                         : probe_lone(ct, k->prompt_tokens, -1, 1, false,
                                                      &k->before_fill, NULL, &k->after_fill_ns, note,
                                                      sizeof note, err);
    if (rc > 0)
        return err_set(err, "the prefill after the interference probes: %s", note);
    return rc;
}

/* ---- open, run, close ----------------------------------------------------------------------- */

/* "what: " in front of err. -1. */
static int err_prefix(char *err, const char *what)
{
    char why[ERR_LEN];
    snprintf(why, sizeof why, "%s", err);
    return err_set(err, "%s: %s", what, why);
}

/* GET /v1/models: the first model's id and max_model_len; credentials refused said here. */
static int read_models(calib_target *ct, char *err)
{
    int status = 0;
    char *body = NULL, why[ERR_LEN];
    if (fetch_http(&ct->so, "GET", "/v1/models", NULL, MODELS_TIMEOUT_NS, &status, &body, why) != 0)
        return err_set(err, "the target at %s is not reachable: %s", ct->cfg.client->target, why);
    if (status == 401 || status == 403) {
        free(body);
        return err_set(err, "the target refused our credentials (HTTP %d on GET /v1/models): "
                            "%s (--api-key KEY or OPENAI_API_KEY, --header 'Name: value')",
                       status, ct->so.api_key && ct->so.api_key[0] ? "is the key right?"
                                                                   : "it needs a key");
    }
    json_t *root = status == 200 ? json_loads(body ? body : "", 0, NULL) : NULL;
    json_t *first = json_array_get(json_object_get(root, "data"), 0);
    const char *id = json_string_value(json_object_get(first, "id"));
    if (!ct->api.model[0] && id)
        snprintf(ct->api.model, sizeof ct->api.model, "%s", id);
    json_t *len = json_object_get(first, "max_model_len");
    if (json_is_integer(len) && json_integer_value(len) > 0)
        ct->max_model_len = json_integer_value(len);
    json_decref(root);
    free(body);
    return 0;
}

calib_target *calib_target_open(const calib_target_config *cfg, char *err)
{
    if (!cfg->client || !cfg->client->target[0]) {
        err_set(err, "no target URL");
        return NULL;
    }
    calib_target *ct = calloc(1, sizeof *ct);
    if (!ct) {
        err_set(err, "out of memory");
        return NULL;
    }
    ct->cfg = *cfg;
    ct->handlers = (transport_handlers){ct, on_token, on_end};
    /* The gaps are the measurement: read them promptly (as run does; a note if not allowed). */
    errno = 0;
    const int nice_before = getpriority(PRIO_PROCESS, 0);
    if (nice_before > -10 && setpriority(PRIO_PROCESS, 0, -10) != 0 && cfg->progress)
        fprintf(cfg->progress, "stallscope: note: cannot raise priority (%s); timings may suffer "
                               "from other load on this machine\n",
                strerror(errno));
    const experiment_secrets *sec = cfg->secrets;
    ct->so = (transport_options){
        .base_url = cfg->client->target,
        .api_key = sec ? sec->api_key : NULL,
        .headers = sec ? sec->headers : NULL,
        .n_headers = sec ? sec->n_headers : 0,
        .idle_timeout_ns = cfg->timeout_ns,
        .max_streams = (cfg->max_streams > cfg->interference_streams ? cfg->max_streams
                                                                      : cfg->interference_streams) +
                       8,
        .insecure = cfg->client->insecure,
    };
    driver_api_defaults(&ct->api);
    snprintf(ct->api.model, sizeof ct->api.model, "%s", cfg->client->model_name);
    workload_default(&ct->wl);
    /* Prompts never repeat across calibrations: a prefix cache must not shorten a probe. */
    ct->salt = (uint64_t)time(NULL) ^ ((uint64_t)clock_now_ns() << 20);
    const transport_kind kind = transport_kind_resolve(cfg->client->transport,
                                                              cfg->client->target);
    if (transport_kind_create(kind, &ct->so, &ct->t, err) != 0) {
        free(ct);
        return NULL;
    }
    if (read_models(ct, err) != 0 ||
        driver_probe(&ct->t, &ct->api, &ct->wl, PROBE_TIMEOUT_NS, cfg->progress, err) != 0) {
        calib_target_close(ct);
        return NULL;
    }
    return ct;
}

const char *calib_target_model(const calib_target *ct)
{
    return ct->api.model;
}

void calib_target_close(calib_target *ct)
{
    if (!ct)
        return;
    if (ct->t.impl)
        ct->t.destroy(ct->t.impl);
    free(ct);
}

/* With --count-tokens auto, stop once usage and the stream disagree: every step would be
 * divided by a count nobody can vouch for. 0, or -1 with err. */
static int tokens_checked(const calib_target *ct, calib_target_result *out, char *err)
{
    out->tokens = ct->tokens;
    out->tokens.counted = ct->cfg.count_tokens == CALIB_TARGET_COUNT_USAGE
                              ? CALIB_TARGET_COUNT_USAGE
                              : CALIB_TARGET_COUNT_STREAM;
    char why[ERR_LEN];
    if (ct->cfg.count_tokens != CALIB_TARGET_COUNT_AUTO ||
        calib_target_tokens_agree(&ct->tokens, why, sizeof why))
        return 0;
    return err_set(err, "usage and the stream disagree (%s): the fit is refused; --count-tokens "
                        "stream or usage says which to trust",
                   why);
}

/* The decode grid: the batches at each context; a batch the target will not run ends the
 * grid for that context, and says so. 0, or -1 with err. */
static int decode_grid(calib_target *ct, calib_target_result *out, int64_t start, char *err)
{
    const calib_target_config *c = &ct->cfg;
    FILE *say = c->progress;
    int batches[CALIB_TARGET_MAX_BATCHES];
    const int n_batches = calib_target_batches(c->max_streams, batches, CALIB_TARGET_MAX_BATCHES);
    for (int k = 0; k < CALIB_TARGET_MAX_CONTEXTS; k++) {
        if (c->contexts[k] <= 0)
            continue;
        for (int b = 0; b < n_batches; b++) {
            calib_target_decode *d = &out->decode[out->n_decode];
            char note[256] = "";
            const int rc = probe_decode(ct, batches[b], c->contexts[k], d, note, sizeof note, err);
            if (rc < 0) {
                char what[64];
                snprintf(what, sizeof what, "decode probe %d x %d", batches[b], c->contexts[k]);
                return err_prefix(err, what);
            }
            if (rc > 0) {
                snprintf(out->decode_note, sizeof out->decode_note, "%s", note);
                if (say)
                    fprintf(say, "  decode: %s: the grid stops at %d streams\n", note,
                            b > 0 ? batches[b - 1] : 0);
                break;
            }
            out->n_decode++;
            if (say)
                fprintf(say, "  decode: %3d streams x %5d-token prompts: step %.3f ms (median of "
                        "%lld gaps, mean context %.0f) [%.0f s]\n",
                        d->batch, d->prompt_tokens, d->gap_ns / 1e6, (long long)d->samples,
                        d->mean_context, (double)(clock_now_ns() - start) / 1e9);
            if (tokens_checked(ct, out, err) != 0)
                return -1;
        }
    }
    if (tokens_checked(ct, out, err) != 0)
        return -1;
    if (out->n_decode < 3)
        return err_set(err, "only %d decode probe%s ran (the fit needs 3)%s%s", out->n_decode,
                       out->n_decode == 1 ? "" : "s", out->decode_note[0] ? ": " : "",
                       out->decode_note);
    return 0;
}

/* The prefill range: lone prompts, shortest first; a refusal ends the range. Then which of
 * them the fit takes. 0, or -1 with err. */
static int prefill_range(calib_target *ct, calib_target_result *out, int64_t start, char *err)
{
    const calib_target_config *c = &ct->cfg;
    FILE *say = c->progress;
    int prompts[CALIB_TARGET_MAX_PROMPTS];
    int max_prompt = c->max_prompt_tokens;
    if (ct->max_model_len > 0 && ct->max_model_len - 1 < max_prompt) {
        max_prompt = (int)(ct->max_model_len - 1);
        snprintf(out->prefill_note, sizeof out->prefill_note, "the target's max_model_len is "
                 "%lld: prefill probes stop at %d tokens", (long long)ct->max_model_len,
                 max_prompt);
        if (say)
            fprintf(say, "  prefill: %s\n", out->prefill_note);
    }
    const int n_prompts = calib_target_prompts(c->min_prompt_tokens, max_prompt, prompts,
                                               CALIB_TARGET_MAX_PROMPTS);
    for (int p = 0; p < n_prompts; p++) {
        calib_target_prefill *f = &out->prefill[out->n_prefill];
        char note[256] = "";
        const int rc = probe_prefill(ct, prompts[p], f, note, sizeof note, err);
        if (rc < 0)
            return -1;
        if (rc > 0) {
            snprintf(out->prefill_note, sizeof out->prefill_note, "%s: prefill probes stop at "
                     "%d tokens", note, out->n_prefill ? out->prefill[out->n_prefill - 1].prompt_tokens
                                                       : 0);
            if (say)
                fprintf(say, "  prefill: %s\n", out->prefill_note);
            break;
        }
        f->prompt_tokens = prompts[p];
        out->n_prefill++;
        if (say)
            fprintf(say, "  prefill: %5d-token prompt alone: TTFT %.2f ms (median of %d) [%.0f s]\n",
                    f->prompt_tokens, f->ttft_ns / 1e6, c->repeats,
                    (double)(clock_now_ns() - start) / 1e9);
    }
    /* weight-bound prefills are shown, not fitted (see the top) */
    double decode_1 = 0;
    for (int i = 0; i < out->n_decode; i++)
        if (out->decode[i].batch == 1 && (decode_1 == 0 || out->decode[i].gap_ns < decode_1))
            decode_1 = out->decode[i].gap_ns;
    calib_target_mark_weight_bound(out, decode_1, c->weight_bound);
    int fitted = 0;
    for (int i = 0; i < out->n_prefill; i++)
        fitted += out->prefill[i].fitted;
    if (fitted < 2 && out->n_prefill >= 2) {
        /* too few long prompts: fit the two longest rather than none */
        for (int i = out->n_prefill - 2; i < out->n_prefill; i++)
            out->prefill[i].fitted = true;
        fitted = 2;
    }
    if (fitted < 2)
        return err_set(err, "only %d prefill probe%s ran (the fit needs 2)%s%s", out->n_prefill,
                       out->n_prefill == 1 ? "" : "s", out->prefill_note[0] ? ": " : "",
                       out->prefill_note);
    return 0;
}

int calib_target_run(calib_target *ct, calib_target_result *out, char *err)
{
    memset(out, 0, sizeof *out);
    snprintf(out->served_model, sizeof out->served_model, "%s", ct->api.model);
    out->max_model_len = ct->max_model_len;
    out->token_ids = ct->api.token_ids;
    out->max_drift = ct->cfg.max_drift;
    out->sentinel_tokens = CALIB_TARGET_SENTINEL_TOKENS;
    if (ct->max_model_len > 0 &&
        ct->max_model_len - CALIB_TARGET_SENTINEL_ANSWER - 1 < out->sentinel_tokens)
        out->sentinel_tokens = (int)(ct->max_model_len - CALIB_TARGET_SENTINEL_ANSWER - 1);
    if (out->sentinel_tokens < 16)
        out->sentinel_tokens = 16;
    const int64_t start = clock_now_ns();
    ct->kept = &out->kept;
    calib_target_find_reset(&ct->so, MODELS_TIMEOUT_NS, &out->kept);
    if (ct->cfg.progress)
        fprintf(ct->cfg.progress, "  reset: %s%s%s\n",
                out->kept.reset_path[0] ? out->kept.reset_server : "none offered (tried POST "
                                                                   "/reset_prefix_cache, "
                                                                   "/flush_cache, /slots/0?action=erase)",
                out->kept.reset_path[0] ? "'s POST " : "", out->kept.reset_path);
    int rc = -1;
    if (probe_sentinel(ct, out, "start", err) != 0 || decode_grid(ct, out, start, err) != 0 ||
        probe_sentinel(ct, out, "decode", err) != 0 || prefill_range(ct, out, start, err) != 0 ||
        probe_caching(ct, out, err) != 0 || probe_sentinel(ct, out, "prefill", err) != 0)
        goto done;
    if (ct->cfg.interference_streams > 0 && (probe_interference(ct, out, err) != 0 ||
                                             probe_after_fill(ct, out, err) != 0 ||
                                             probe_sentinel(ct, out, "interference", err) != 0)) {
        err_prefix(err, "interference probes");
        goto done;
    }
    rc = 0;
done:
    ct->kept = NULL;
    if (rc != 0)
        return -1;
    if (tokens_checked(ct, out, err) != 0)
        return -1;
    out->seconds = (double)(clock_now_ns() - start) / 1e9;
    return 0;
}
