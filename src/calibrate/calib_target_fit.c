/* calib_target_fit — calibrate --target's probes into figures, a step model, a policy and a
 * profile (calib_target_fit.h). */
#include "calibrate/calib_target_fit.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"
#include "engine/profile.h"
#include "engine/sched.h"
#include "experiment/shard.h"

static const char *const COUNT_NAMES[] = {"auto", "stream", "usage"};

const char *calib_target_count_name(calib_target_count count)
{
    return count >= CALIB_TARGET_COUNT_AUTO && count <= CALIB_TARGET_COUNT_USAGE
               ? COUNT_NAMES[count]
               : "?";
}

/* ---- pure pieces ------------------------------------------------------------------------------ */

int calib_target_batches(int max_streams, int *out, int cap)
{
    int n = 0;
    for (int b = 1; b < max_streams && n < cap; b *= 2)
        out[n++] = b;
    if (max_streams >= 1 && n < cap)
        out[n++] = max_streams;
    return n;
}

int calib_target_prompts(int min_tokens, int max_tokens, int *out, int cap)
{
    int n = 0;
    for (int64_t p = min_tokens; p > 0 && p < max_tokens && n < cap; p *= 2)
        out[n++] = (int)p;
    if (min_tokens > 0 && max_tokens >= min_tokens && n < cap)
        out[n++] = max_tokens;
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v (sorted in place), n > 0: the lower middle for an even count, as the
 * analysis' nearest-rank p50 takes it. */
double calib_target_median(double *v, int64_t n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[(n - 1) / 2];
}

int calib_target_steady_gap(const calib_target_series *s, int n_streams, int skip, int prompt_tokens,
                            int64_t from_ns, int64_t to_ns, double *gap_ns,
                            double *mean_context, int64_t *samples)
{
    int64_t n = 0;
    for (int k = 0; k < n_streams; k++)
        for (int i = skip > 1 ? skip : 1; i < s[k].n; i++)
            if (s[k].t_ns[i - 1] >= from_ns && s[k].t_ns[i] <= to_ns)
                n += s[k].cum[i] - s[k].cum[i - 1] > 0 ? s[k].cum[i] - s[k].cum[i - 1] : 1;
    if (n == 0)
        return -1;
    double *gaps = malloc(sizeof *gaps * (size_t)n);
    if (!gaps)
        return -1;
    int64_t m = 0;
    double context = 0;
    for (int k = 0; k < n_streams; k++)
        for (int i = skip > 1 ? skip : 1; i < s[k].n; i++) {
            if (!(s[k].t_ns[i - 1] >= from_ns && s[k].t_ns[i] <= to_ns))
                continue;
            const int tokens = s[k].cum[i] - s[k].cum[i - 1] > 0 ? s[k].cum[i] - s[k].cum[i - 1] : 1;
            const double gap = (double)(s[k].t_ns[i] - s[k].t_ns[i - 1]) / tokens;
            for (int j = 0; j < tokens; j++) {
                gaps[m++] = gap;
                context += prompt_tokens + s[k].cum[i - 1] + j;
            }
        }
    *gap_ns = calib_target_median(gaps, m);
    *mean_context = context / (double)m;
    *samples = m;
    free(gaps);
    return 0;
}

/* One stream's view: its longest gap overlapping [send, first] (-1: none), and the steps of
 * the prefill counted back from the one that emitted the prompt's first token (this stream's
 * last event within tol of anchor_ns, the latest that step can have ended): that step, then
 * each step before it that was slowed (a gap over slow_ns: it carried prefill), that began
 * at or after the send (its previous event: a step whose batch formed before the prompt
 * arrived cannot carry it, however slow the server's handling of the request or of anything
 * else made it), and that took at least CALIB_TARGET_CHUNK_ALIKE of the steps counted after
 * it (the final step for the first one counted, the shortest of the others after that): a
 * prompt's chunks are the same size and cost alike step to step, while a decode step the
 * server slowed before the first chunk is far shorter than one — counted, it would add a
 * step to every stream. *wait: from the send to the first counted step's start (0 when it
 * began before the send; -1 when the stream has no event there). */
static void stream_seen(const calib_target_series *s, int64_t send_ns, int64_t first_ns,
                        double anchor_ns, double slow_ns, double tol_ns, double *worst,
                        double *wait, int *steps)
{
    *worst = -1;
    *wait = -1;
    *steps = 0;
    int last = -1;
    for (int i = 1; i < s->n; i++) {
        if (s->t_ns[i] > send_ns && s->t_ns[i - 1] < first_ns) {
            const double gap = (double)(s->t_ns[i] - s->t_ns[i - 1]);
            *worst = gap > *worst ? gap : *worst;
        }
        if ((double)s->t_ns[i] <= anchor_ns + tol_ns && s->t_ns[i] > send_ns)
            last = i;
    }
    if (last < 1)
        return;
    int i = last;
    *steps = 1;
    double alike = (double)(s->t_ns[last] - s->t_ns[last - 1]); /* the final step's gap */
    for (bool first_counted = true; i - 1 >= 1 && s->t_ns[i - 2] >= send_ns; first_counted = false) {
        const double gap = (double)(s->t_ns[i - 1] - s->t_ns[i - 2]);
        if (gap <= slow_ns || gap < CALIB_TARGET_CHUNK_ALIKE * alike)
            break;
        alike = first_counted || gap < alike ? gap : alike;
        i--;
        (*steps)++;
    }
    const int64_t start = s->t_ns[i - 1] - send_ns;
    *wait = start > 0 ? (double)start : 0;
}

int calib_target_stall_of(const calib_target_series *s, int n_streams, int64_t send_ns,
                          int64_t first_ns, int64_t next_ns, double gap_ns, double threshold_ns,
                          calib_target_seen *out)
{
    /* The step that emitted the first token ended by the time that token was received, and
     * a step before the one that emitted the second (no server emits a prompt's first two
     * tokens in one step: the second needs a pass over the first): a stamp is only ever
     * late, so the earlier of the two bounds it */
    double anchor_ns = (double)first_ns;
    if (next_ns > 0 && next_ns >= first_ns && (double)next_ns - gap_ns < anchor_ns)
        anchor_ns = (double)next_ns - gap_ns;
    const size_t cap = (size_t)(n_streams > 0 ? n_streams : 1);
    double *longest = malloc(sizeof *longest * cap), *queue = malloc(sizeof *queue * cap);
    double *steps = malloc(sizeof *steps * cap);
    memset(out, 0, sizeof *out);
    if (!longest || !queue || !steps) {
        free(longest);
        free(queue);
        free(steps);
        return -1;
    }
    int n = 0, n_queue = 0;
    for (int k = 0; k < n_streams; k++) {
        double worst, wait;
        int k_steps;
        stream_seen(&s[k], send_ns, first_ns, anchor_ns, CALIB_TARGET_SLOWED * gap_ns, gap_ns / 2,
                    &worst, &wait, &k_steps);
        if (worst < 0)
            continue;
        steps[n] = k_steps;
        longest[n++] = worst;
        out->stalled += worst > threshold_ns;
        if (wait >= 0)
            queue[n_queue++] = wait;
    }
    if (n > 0) {
        out->stall_ns = calib_target_median(longest, n);
        out->steps = (int)calib_target_median(steps, n);
    }
    if (n_queue > 0)
        out->queue_ns = calib_target_median(queue, n_queue);
    free(longest);
    free(queue);
    free(steps);
    return n > 0 ? 0 : -1;
}

bool calib_target_tokens_agree(const calib_target_tokens *t, char *why, size_t size)
{
    const int64_t diff = t->usage > t->streamed ? t->usage - t->streamed : t->streamed - t->usage;
    const bool counts = (double)diff <= CALIB_TARGET_COUNT_TOLERANCE * (double)t->streamed;
    if (counts && t->violations == 0)
        return true;
    int len = 0;
    if (!counts)
        len = snprintf(why, size, "usage counted %lld tokens where %lld streamed, %.2f per event",
                       (long long)t->usage, (long long)t->streamed,
                       t->streamed > 0 ? (double)t->usage / (double)t->streamed : 0.0);
    if (t->violations > 0 && len >= 0 && (size_t)len < size)
        snprintf(why + len, size - (size_t)len, "%s%lld protocol violation%s, the first: %s",
                 counts ? "" : "; ", (long long)t->violations, t->violations == 1 ? "" : "s",
                 t->first_violation);
    return false;
}

void calib_target_mark_weight_bound(calib_target_result *r, double decode_1_ns, double factor)
{
    for (int i = 0; i < r->n_prefill; i++)
        r->prefill[i].fitted = r->prefill[i].ttft_ns >= factor * decode_1_ns;
}

bool calib_target_cells_said(const calib_target_result *r)
{
    return !r->kept.reset_path[0];
}

double calib_target_cells_seen(const calib_target_result *r)
{
    double most = 0;
    for (int i = 0; i < r->n_decode; i++)
        if (r->decode[i].occupied_cells > most)
            most = r->decode[i].occupied_cells;
    for (int i = 0; i < r->n_prefill; i++)
        if (r->prefill[i].cells_met > most)
            most = r->prefill[i].cells_met;
    return most;
}

double calib_target_stall_cells(const calib_target_result *r, int i)
{
    const calib_target_stall *st = &r->stall[i];
    return calib_target_cells_said(r) && st->cells_seen > 0 ? st->cells_seen
                                                             : st->streams * st->mean_context;
}

int calib_target_fit_probes(const calib_target_result *r, bool unified, fit_probe *out, int cap)
{
    int n = 0;
    const bool said = calib_target_cells_said(r);
    for (int i = 0; i < r->n_decode && n < cap; i++) {
        const calib_target_decode *d = &r->decode[i];
        /* unified: each of the B sequences attends over the occupied cells, the B streams'
         * (a reset cleared the rest) or what /metrics said */
        const double own = d->batch * d->mean_context;
        const double cells = said && d->occupied_cells > own ? d->occupied_cells : own;
        out[n++] = (fit_probe){.batch = d->batch,
                               .context_sum = unified ? d->batch * cells : own,
                               .ns = d->gap_ns};
    }
    for (int i = 0; i < r->n_prefill && n < cap; i++) {
        const calib_target_prefill *f = &r->prefill[i];
        /* unified, no reset: the prompt's attention spans the cells left before it */
        const double left = unified && said && f->cells_met > 0 ? f->cells_met : 0;
        if (f->fitted)
            out[n++] = (fit_probe){.batch = 1,
                                   .context_sum = left,
                                   .prompt_tokens = f->prompt_tokens,
                                   .ns = f->ttft_ns};
    }
    return n;
}

/* The budget whose longest chunk step is stall_ns under the fitted model (bisection: the
 * chunk step grows with the budget). */
static int budget_for_stall(const cost_params *cost, const calib_target_stall *st)
{
    const int decodes = st->streams;
    const int context = (int)(st->mean_context + 0.5);
    int lo = decodes + 1, hi = st->prompt_tokens + decodes;
    for (int iter = 0; iter < 40 && lo < hi; iter++) {
        const int mid = lo + (hi - lo) / 2;
        int64_t longest = 0;
        cost_injection_prefill_cells_ns(cost, st->prompt_tokens, decodes, context, mid,
                                        (int64_t)st->occupied_cells, &longest);
        if ((double)longest < st->stall_ns)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool calib_target_budget_bounds(const calib_target_stall *stalls, const bool *chunked, int n,
                                double *lo, double *hi)
{
    double a[CALIB_TARGET_MAX_PROMPTS], b[CALIB_TARGET_MAX_PROMPTS];
    int m = 0, streams = 0;
    for (int i = 0; i < n && i < CALIB_TARGET_MAX_PROMPTS; i++) {
        const int k = stalls[i].steps;
        if (!chunked[i] || k < 2)
            continue;
        a[m] = (double)stalls[i].prompt_tokens / k;
        b[m++] = (double)stalls[i].prompt_tokens / (k - 1);
        streams = stalls[i].streams;
    }
    if (m == 0)
        return false;
    /* The chunk most counts agree on: of the intervals' left ends, the one inside the most
     * intervals, and the intersection of those intervals. Of equals, the largest chunk: a
     * count errs by a step added (a decode step the machine slowed), which shrinks its chunk,
     * far more often than by one lost (a chunk step would have to look like a decode step). */
    int best = -1, best_count = 0;
    for (int x = 0; x < m; x++) {
        int count = 0;
        for (int j = 0; j < m; j++)
            count += a[j] <= a[x] && a[x] < b[j];
        if (count > best_count || (count == best_count && a[x] > a[best]))
            best = x, best_count = count;
    }
    *lo = 0;
    *hi = 1e18;
    for (int j = 0; j < m; j++)
        if (a[j] <= a[best] && a[best] < b[j]) {
            *lo = a[j] > *lo ? a[j] : *lo;
            *hi = b[j] < *hi ? b[j] : *hi;
        }
    *lo += streams;
    *hi += streams;
    return true;
}

void calib_target_infer_policy(const cost_params *cost, const calib_target_stall *stalls, int n,
                               calib_target_policy *out)
{
    memset(out, 0, sizeof *out);
    int budgets[CALIB_TARGET_MAX_PROMPTS], n_chunked = 0, one_step_longest = 0, n_no_stall = 0;
    bool chunked[CALIB_TARGET_MAX_PROMPTS] = {false};
    for (int i = 0; i < n && i < CALIB_TARGET_MAX_PROMPTS; i++) {
        const calib_target_stall *st = &stalls[i];
        int64_t one_step_ns = 0;
        cost_injection_prefill_cells_ns(cost, st->prompt_tokens, st->streams,
                                        (int)(st->mean_context + 0.5), 0,
                                        (int64_t)st->occupied_cells, &one_step_ns);
        const double one_step = (double)one_step_ns;
        const double own = st->ttft_ns - st->queue_ns;
        out->ratio[i] = one_step > 0 ? st->stall_ns / one_step : 0;
        out->own_ratio[i] = own > 0 ? st->stall_ns / own : 0;
        out->n = i + 1;
        if (st->stall_ns < CALIB_TARGET_NO_STALL * st->gap_ns) {
            n_no_stall++;
            continue;
        }
        if (own < CALIB_TARGET_INFORMATIVE * st->gap_ns)
            continue; /* a prefill of a few decode steps: its stall cannot tell */
        out->informative[i] = true;
        out->n_informative++;
        if (out->own_ratio[i] >= CALIB_TARGET_ONE_STEP)
            one_step_longest = st->prompt_tokens > one_step_longest ? st->prompt_tokens
                                                                    : one_step_longest;
        else {
            chunked[i] = true;
            budgets[n_chunked++] = budget_for_stall(cost, st);
        }
    }
    if (out->n == 0)
        return;
    if (n_no_stall == out->n) {
        snprintf(out->policy, sizeof out->policy, "none");
    } else if (n_chunked > 0) {
        /* A prompt can be chunked only where it is longer than the budget: the median of
         * the chunked prompts' budgets, and never below the longest one-step prompt. */
        double b[CALIB_TARGET_MAX_PROMPTS];
        for (int i = 0; i < n_chunked; i++)
            b[i] = budgets[i];
        double budget = calib_target_median(b, n_chunked), lo, hi;
        if ((out->budget_counted = calib_target_budget_bounds(stalls, chunked, out->n, &lo, &hi))) {
            if (budget < lo || budget >= hi) /* a fit the counts contradict: their middle */
                budget = floor((lo + hi) / 2);
        }
        snprintf(out->policy, sizeof out->policy, "chunked");
        out->budget = (int)budget > one_step_longest ? (int)budget : one_step_longest;
    } else if (one_step_longest > 0) {
        snprintf(out->policy, sizeof out->policy, "mixed");
        out->budget = one_step_longest;
        out->budget_is_lower_bound = true;
    }
}

void calib_target_check_probes(const cost_params *cost, const calib_target_policy *pol,
                               const calib_target_stall *stalls, int n, double max_miss,
                               calib_target_check *out)
{
    memset(out, 0, sizeof *out);
    out->worst = -1;
    out->ok = true;
    const bool mixed = strcmp(pol->policy, "mixed") == 0;
    const bool chunked = strcmp(pol->policy, "chunked") == 0;
    double worst_miss = 0;
    for (int i = 0; i < n && i < CALIB_TARGET_MAX_PROMPTS; i++) {
        const calib_target_stall *st = &stalls[i];
        int64_t longest = 0;
        out->prefill_ns[i] = (double)cost_injection_prefill_cells_ns(
            cost, st->prompt_tokens, st->streams, (int)(st->mean_context + 0.5),
            chunked ? pol->budget : 0, (int64_t)st->occupied_cells, &longest);
        out->stall_ns[i] = (double)longest;
        const double own = st->ttft_ns - st->queue_ns;
        out->stall_miss[i] = st->stall_ns > 0 ? out->stall_ns[i] / st->stall_ns - 1 : 0;
        out->prefill_miss[i] = own > 0 ? out->prefill_ns[i] / own - 1 : 0;
        out->n = i + 1;
        if (!(mixed || chunked) || i >= pol->n || !pol->informative[i])
            continue;
        out->judged[i] = true;
        out->n_judged++;
        const double s = fabs(out->stall_miss[i]), f = fabs(out->prefill_miss[i]);
        if (s > max_miss || f > max_miss)
            out->ok = false;
        if (s > worst_miss || f > worst_miss || out->worst < 0) {
            out->worst = i;
            out->worst_is_stall = s >= f;
            worst_miss = s > f ? s : f;
        }
    }
}

bool calib_target_fit_ok(const fit_result *fr, const double *residual, int n, double max_rms,
                         int *worst)
{
    *worst = -1;
    for (int i = 0; i < n; i++)
        if (*worst < 0 || fabs(residual[i]) > fabs(residual[*worst]))
            *worst = i;
    return fr->decode_rms <= max_rms && fr->prefill_rms <= max_rms;
}

int calib_target_arch(const char *served, cost_arch *out, char *err)
{
    char why[ERR_LEN];
    if (cost_arch_find(served, out, why) == 0)
        return 0;
    const char *base = strrchr(served, '/');
    base = base ? base + 1 : served;
    char name[128];
    size_t len = 0;
    for (; base[len] && len + 1 < sizeof name; len++)
        name[len] = (char)tolower((unsigned char)base[len]);
    name[len] = '\0';
    static const char *const suffixes[] = {"-instruct", "-chat"};
    for (int i = 0; i < 2; i++) {
        const size_t sl = strlen(suffixes[i]);
        if (len > sl && strcmp(name + len - sl, suffixes[i]) == 0)
            name[len - sl] = '\0';
    }
    if (cost_arch_find(name, out, why) == 0)
        return 0;
    return err_set(err, "the target serves '%s', which is not a model of the catalog: name its "
                        "architecture with --model M (see 'stallscope model --list')",
                   served);
}

/* A number, or null where it is negative (not said). */
static json_t *said(double x, double scale)
{
    return x < 0 ? json_null() : json_real(x * scale);
}

/* What /metrics said before a probe, flattened into its object o. */
static void metrics_into(json_t *o, const calib_target_metrics *m)
{
    json_object_set_new(o, "kv_usage", said(m->kv_usage, 1));
    json_object_set_new(o, "prefix_cache_queries", said(m->cache_queries, 1));
    json_object_set_new(o, "prefix_cache_hits", said(m->cache_hits, 1));
    json_object_set_new(o, "occupied_cells", said(m->kv_cells, 1));
}

/* "sentinel": the series and its drift (calib_target_state.h); NULL when none ran. */
static json_t *sentinel_json(const calib_target_result *r)
{
    if (r->n_sentinel == 0)
        return NULL;
    json_t *points = json_array();
    for (int i = 0; i < r->n_sentinel; i++)
    {
        json_t *p = json_pack("{s:s, s:f, s:f}", "after", r->sentinel[i].after, "ttft_ms",
                              r->sentinel[i].ttft_ns / 1e6, "step_ms", r->sentinel[i].step_ns / 1e6);
        if (p)
            metrics_into(p, &r->sentinel[i].metrics);
        json_array_append_new(points, p);
    }
    calib_target_drift d;
    calib_target_drift_of(r->sentinel, r->n_sentinel, r->max_drift, &d);
    json_t *o = json_pack("{s:i, s:i, s:o, s:f, s:f, s:f}", "prompt_tokens", r->sentinel_tokens,
                          "answer_tokens", CALIB_TARGET_SENTINEL_ANSWER, "points", points,
                          "max_drift", r->max_drift, "ttft_drift", d.ttft, "step_drift", d.step);
    if (!o)
        return NULL;
    if (r->sentinel_note[0])
        json_object_set_new(o, "note", json_string(r->sentinel_note));
    json_object_set_new(o, "moved_after",
                        d.moved >= 0 ? json_string(r->sentinel[d.moved].after) : json_null());
    json_object_set_new(o, "moved", d.moved >= 0 ? json_string(d.moved_ttft ? "ttft" : "step")
                                                  : json_null());
    json_object_set_new(o, "moved_by", d.moved >= 0 ? json_real(d.by) : json_null());
    return o;
}

/* "state": the reset used, the prefix-caching probe, the prefill after a fill. */
static json_t *kept_json(const calib_target_kept *k)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "reset", k->reset_path[0] ? json_string(k->reset_path) : json_null());
    json_object_set_new(o, "reset_server",
                        k->reset_path[0] ? json_string(k->reset_server) : json_null());
    json_object_set_new(o, "resets", json_integer(k->resets));
    json_object_set_new(o, "reset_slots", k->reset_path[0] ? json_integer(k->reset_slots)
                                                           : json_null());
    json_object_set_new(o, "props_slots",
                        k->props_slots > 0 ? json_integer(k->props_slots) : json_null());
    json_object_set_new(o, "prompt_tokens", json_integer(k->prompt_tokens));
    const int caching = calib_target_prefix_caching(k);
    json_object_set_new(o, "prefix_caching", caching < 0 ? json_null() : json_boolean(caching));
    json_object_set_new(o, "first_ttft_ms",
                        k->cache_first_ns > 0 ? json_real(k->cache_first_ns / 1e6) : json_null());
    json_object_set_new(o, "repeat_ttft_ms",
                        k->cache_second_ns > 0 ? json_real(k->cache_second_ns / 1e6) : json_null());
    json_object_set_new(o, "quiet_ttft_ms",
                        k->quiet_ns > 0 ? json_real(k->quiet_ns / 1e6) : json_null());
    json_object_set_new(o, "after_fill_ttft_ms",
                        k->after_fill_ns > 0 ? json_real(k->after_fill_ns / 1e6) : json_null());
    json_object_set_new(o, "kv_usage_before_fill", said(k->before_fill.kv_usage, 1));
    json_object_set_new(o, "after_fill_ratio", calib_target_retained_ratio(k) > 0
                                                   ? json_real(calib_target_retained_ratio(k))
                                                   : json_null());
    return o;
}

json_t *calib_target_measured_json(const calib_target_result *r, const calib_target_policy *pol,
                                   const calib_target_check *check)
{
    json_t *m = json_object(), *dec = json_array(), *pre = json_array(), *st = json_array();
    if (!m || !dec || !pre || !st) {
        json_decref(m);
        json_decref(dec);
        json_decref(pre);
        json_decref(st);
        return NULL;
    }
    json_object_set_new(m, "served_model", json_string(r->served_model));
    if (r->max_model_len > 0)
        json_object_set_new(m, "max_model_len", json_integer(r->max_model_len));
    json_object_set_new(m, "prompts", json_string(r->token_ids ? "token ids" : "calibrated text"));
    json_object_set_new(m, "seconds", json_real(r->seconds));
    for (int i = 0; i < r->n_decode; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "streams", json_integer(r->decode[i].batch));
        json_object_set_new(o, "prompt_tokens", json_integer(r->decode[i].prompt_tokens));
        json_object_set_new(o, "mean_context", json_real(r->decode[i].mean_context));
        json_object_set_new(o, "gap_ms", json_real(r->decode[i].gap_ns / 1e6));
        json_object_set_new(o, "gaps", json_integer(r->decode[i].samples));
        json_object_set_new(o, "occupied_cells", said(r->decode[i].occupied_cells, 1));
        json_array_append_new(dec, o);
    }
    for (int i = 0; i < r->n_prefill; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "prompt_tokens", json_integer(r->prefill[i].prompt_tokens));
        json_object_set_new(o, "ttft_ms", json_real(r->prefill[i].ttft_ns / 1e6));
        json_object_set_new(o, "fitted", json_boolean(r->prefill[i].fitted));
        metrics_into(o, &r->prefill[i].metrics);
        json_object_set_new(o, "cells_met", said(r->prefill[i].cells_met, 1));
        json_array_append_new(pre, o);
    }
    for (int i = 0; i < r->n_stall; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "prompt_tokens", json_integer(r->stall[i].prompt_tokens));
        json_object_set_new(o, "streams", json_integer(r->stall[i].streams));
        json_object_set_new(o, "stall_ms", json_real(r->stall[i].stall_ns / 1e6));
        json_object_set_new(o, "steady_gap_ms", json_real(r->stall[i].gap_ns / 1e6));
        json_object_set_new(o, "streams_stalled", json_integer(r->stall[i].streams_stalled));
        json_object_set_new(o, "ttft_ms", json_real(r->stall[i].ttft_ns / 1e6));
        json_object_set_new(o, "queue_ms", json_real(r->stall[i].queue_ns / 1e6));
        json_object_set_new(o, "steps", json_integer(r->stall[i].steps));
        json_object_set_new(o, "occupied_cells", said(r->stall[i].cells_seen, 1));
        if (pol && i < pol->n) {
            json_object_set_new(o, "ratio_to_one_step", json_real(pol->ratio[i]));
            json_object_set_new(o, "ratio_to_own_prefill", json_real(pol->own_ratio[i]));
            json_object_set_new(o, "informative", json_boolean(pol->informative[i]));
        }
        if (check && i < check->n) {
            json_object_set_new(o, "predicted_stall_ms", json_real(check->stall_ns[i] / 1e6));
            json_object_set_new(o, "predicted_prefill_ms", json_real(check->prefill_ns[i] / 1e6));
            json_object_set_new(o, "judged", json_boolean(check->judged[i]));
        }
        json_array_append_new(st, o);
    }
    json_object_set_new(m, "decode", dec);
    json_object_set_new(m, "prefill", pre);
    json_object_set_new(m, "interference", st);
    if (r->decode_note[0])
        json_object_set_new(m, "decode_note", json_string(r->decode_note));
    if (r->prefill_note[0])
        json_object_set_new(m, "prefill_note", json_string(r->prefill_note));
    if (r->stall_note[0])
        json_object_set_new(m, "interference_note", json_string(r->stall_note));
    json_object_set_new(m, "tokens",
                        json_pack("{s:s, s:I, s:I, s:I}", "counted_from",
                                  calib_target_count_name(r->tokens.counted), "streamed",
                                  (json_int_t)r->tokens.streamed, "usage",
                                  (json_int_t)r->tokens.usage, "protocol_violations",
                                  (json_int_t)r->tokens.violations));
    json_t *sentinel = sentinel_json(r);
    if (sentinel)
        json_object_set_new(m, "sentinel", sentinel);
    calib_target_metrics pm[CALIB_TARGET_MAX_PROMPTS];
    for (int i = 0; i < r->n_prefill; i++)
        pm[i] = r->prefill[i].metrics;
    json_object_set_new(m, "kv_usage_spread", said(calib_target_kv_spread(pm, r->n_prefill, NULL, NULL), 1));
    json_t *kept = kept_json(&r->kept);
    if (kept)
        json_object_set_new(m, "state", kept);
    if (pol && pol->policy[0]) {
        json_object_set_new(m, "policy_inferred", json_string(pol->policy));
        if (pol->budget > 0)
            json_object_set_new(m, "budget_inferred", json_integer(pol->budget));
        json_object_set_new(m, "budget_is_lower_bound", json_boolean(pol->budget_is_lower_bound));
        json_object_set_new(m, "budget_counted", json_boolean(pol->budget_counted));
    }
    return m;
}

/* ---- the fit and the profile ---------------------------------------------------------------- */

/* out's device on arch with the step model fit: the policy its stalls imply and its
 * predictions of them (out->cost, out->policy, out->check). */
static void judge(calib_target_fitted *out, const cost_arch *arch, const cost_step_fit *fit,
                  int n_stall)
{
    out->gpu.fit = *fit;
    cost_params_init(&out->cost, &out->gpu, arch);
    calib_target_infer_policy(&out->cost, out->stall, n_stall, &out->policy);
    calib_target_check_probes(&out->cost, &out->policy, out->stall, n_stall,
                              CALIB_TARGET_MAX_MISS, &out->check);
}

/* The judged probes' rms miss (stalls and prefills alike); -1 when none was judged. */
static double check_rms(const calib_target_check *ck)
{
    double sum = 0;
    int n = 0;
    for (int i = 0; i < ck->n; i++)
        if (ck->judged[i]) {
            sum += ck->stall_miss[i] * ck->stall_miss[i] + ck->prefill_miss[i] * ck->prefill_miss[i];
            n += 2;
        }
    return n > 0 ? sqrt(sum / n) : -1;
}

int calib_target_fit_model(const calib_target_result *r, const cost_arch *arch, const char *name,
                           double mem_bytes, double max_rms, calib_target_fitted *out, char *err)
{
    memset(out, 0, sizeof *out);
    out->max_rms = max_rms;
    out->kv_layout = SCHED_KV_PAGED;
    out->paged_decode_rms = out->unified_decode_rms = -1;
    out->n = calib_target_fit_probes(r, false, out->probes, CALIB_TARGET_MAX_PROBES);
    if (fit_step_model(out->probes, out->n, arch->name, false, &out->fit, out->residual, err) != 0)
        return -1;
    out->paged_decode_rms = out->fit.decode_rms;
    if (calib_target_retained_ratio(&r->kept) >= CALIB_TARGET_RETAINED ||
        calib_target_cells_seen(r) > 0) {
        /* what the streams left slowed a fresh prompt, or /metrics said occupied cells of a
         * unified cache: fit the decode steps over the cells */
        fit_probe probes[CALIB_TARGET_MAX_PROBES];
        double residual[CALIB_TARGET_MAX_PROBES];
        fit_result fit;
        char why[ERR_LEN];
        const int n = calib_target_fit_probes(r, true, probes, CALIB_TARGET_MAX_PROBES);
        if (fit_step_model(probes, n, arch->name, false, &fit, residual, why) == 0) {
            out->unified_decode_rms = fit.decode_rms;
            if (fit.decode_rms < out->fit.decode_rms) {
                out->kv_layout = SCHED_KV_UNIFIED;
                out->fit = fit;
                memcpy(out->probes, probes, sizeof probes);
                memcpy(out->residual, residual, sizeof residual);
            }
        }
    }
    for (int i = 0; i < r->n_stall && i < CALIB_TARGET_MAX_PROMPTS; i++) {
        out->stall[i] = r->stall[i];
        out->stall[i].occupied_cells =
            out->kv_layout == SCHED_KV_UNIFIED ? calib_target_stall_cells(r, i) : 0;
    }
    snprintf(out->gpu.name, sizeof out->gpu.name, "%s", name);
    out->gpu.mem_bytes = mem_bytes;
    /* the step model's terms added, then overlapped (fitted so): the mixed steps measured
     * decide */
    fit_result fits[2];
    double residuals[2][CALIB_TARGET_MAX_PROBES], miss[2] = {-1, -1};
    fits[0] = out->fit;
    memcpy(residuals[0], out->residual, sizeof residuals[0]);
    char why[ERR_LEN];
    const bool overlap_fitted = fit_step_model(out->probes, out->n, arch->name, true, &fits[1],
                                               residuals[1], why) == 0;
    for (int k = overlap_fitted ? 1 : 0; k >= 0; k--) { /* the added one judged last */
        judge(out, arch, &fits[k].fit, r->n_stall);
        miss[k] = check_rms(&out->check);
    }
    out->sum_miss = miss[0];
    out->overlap_miss = miss[1];
    if (miss[1] >= 0 && miss[1] < miss[0]) { /* overlapped */
        out->fit = fits[1];
        memcpy(out->residual, residuals[1], sizeof out->residual);
        judge(out, arch, &fits[1].fit, r->n_stall);
    }
    out->accepted = calib_target_fit_ok(&out->fit, out->residual, out->n, max_rms, &out->worst);
    return 0;
}

json_t *calib_target_profile_json(const calib_target_result *r, const calib_target_fitted *m,
                                  const cost_arch *arch, const char *target_shown)
{
    profile_info info = {.version = PROFILE_VERSION,
                         .prefix_caching = calib_target_prefix_caching(&r->kept),
                         .kv_layout = m->kv_layout,
                         .slots = m->kv_layout != SCHED_KV_UNIFIED ? 0
                                  : r->kept.reset_slots > 1 ? r->kept.reset_slots
                                                            : r->kept.props_slots};
    snprintf(info.source, sizeof info.source, "%s", PROFILE_SOURCE_TARGET);
    snprintf(info.target, sizeof info.target, "%s", target_shown);
    json_t *root = profile_to_json(&m->gpu, &info, &m->fit, m->probes, m->residual, m->n);
    json_t *measured = root ? calib_target_measured_json(r, &m->policy, &m->check) : NULL;
    if (!measured) {
        json_decref(root);
        return NULL;
    }
    char when[48];
    experiment_format_utc((int64_t)time(NULL) * CLOCK_NS_PER_S, when, sizeof when);
    json_object_set_new(measured, "when", json_string(when));
    json_object_set_new(measured, "fit_model", json_string(arch->name));
    json_object_set_new(measured, "max_rms", json_real(m->max_rms));
    json_object_set_new(measured, "max_miss", json_real(CALIB_TARGET_MAX_MISS));
    json_object_set_new(measured, "predicts_probes", json_boolean(m->check.ok));
    json_t *layout = json_object();
    json_object_set_new(layout, "inferred",
                        json_string(sched_kv_layout_name((sched_kv_layout)m->kv_layout)));
    json_object_set_new(layout, "retained_ratio", json_real(calib_target_retained_ratio(&r->kept)));
    json_object_set_new(layout, "paged_decode_rms", said(m->paged_decode_rms, 1));
    json_object_set_new(layout, "unified_decode_rms", said(m->unified_decode_rms, 1));
    json_object_set_new(layout, "cells_said", json_boolean(calib_target_cells_said(r) &&
                                                           calib_target_cells_seen(r) > 0));
    json_object_set_new(measured, "kv_layout", layout);
    json_t *mixed = json_object();
    json_object_set_new(mixed, "overlap", json_boolean(m->gpu.fit.overlap));
    json_object_set_new(mixed, "sum_miss_rms", said(m->sum_miss, 1));
    json_object_set_new(mixed, "overlap_miss_rms", said(m->overlap_miss, 1));
    json_object_set_new(measured, "mixed_step", mixed);
    json_object_set_new(measured, "accepted", json_boolean(m->accepted && m->check.ok));
    json_object_set_new(root, "measured", measured);
    return root;
}
