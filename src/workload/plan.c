/* plan — the open-loop arrivals of a run (workload.h, "the arrival plan"): drawn at a rate,
 * or read from a trace and windowed, scaled, looped, cut and capped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/rng.h"
#include "workload/workload.h"

/* rng streams: distinct from the users' (user + 1) and the injector's. */
#define STREAM_GAPS 0x6a9501ULL
#define STREAM_LENGTHS 0x0be91e7ULL

static int push(workload_plan *p, int64_t *cap, const workload_arrival *a, char *err)
{
    if (p->n_arrivals == *cap) {
        if (*cap >= WORKLOAD_MAX_ARRIVALS)
            return err_set(err, "more than %d open-loop requests planned (cap them with "
                                "--max-requests, or shorten --duration)",
                           WORKLOAD_MAX_ARRIVALS);
        int64_t c = *cap ? *cap * 2 : 1024;
        if (c > WORKLOAD_MAX_ARRIVALS)
            c = WORKLOAD_MAX_ARRIVALS;
        workload_arrival *grown = realloc(p->arrivals, (size_t)c * sizeof *grown);
        if (!grown)
            return err_set(err, "out of memory planning the open-loop requests");
        p->arrivals = grown;
        *cap = c;
    }
    p->arrivals[p->n_arrivals++] = *a;
    return 0;
}

/* The time at which the cumulative intensity reaches s: the rate grows linearly from 0 to R
 * over D (intensity R t^2 / 2D), then stays at R. */
static double time_of_intensity(double s, double rate, double ramp_s)
{
    if (ramp_s <= 0)
        return s / rate;
    double ramp_mass = rate * ramp_s / 2.0;
    if (s < ramp_mass)
        return sqrt(2.0 * ramp_s * s / rate);
    return ramp_s + (s - ramp_mass) / rate;
}

/* Unit-mean gamma gaps in the intensity's own time (1 = Poisson), mapped back through the
 * ramp: arrival i is the same whatever the duration, and never depends on timing. */
static int plan_rate(const workload_config *cfg, workload_plan *p, char *err)
{
    int64_t cap = 0;
    const double rate = cfg->request_rate, ramp_s = (double)cfg->ramp_up_ns / 1e9;
    const int64_t limit = workload_request_cap(cfg);
    double s = 0;
    for (int64_t i = 0;; i++) {
        /* No rate (--num-prompts alone): every request at t = 0, vLLM's --request-rate inf. */
        double t = 0;
        if (rate > 0) {
            uint64_t gap_state = rng_hash3(cfg->seed, STREAM_GAPS, (uint64_t)i);
            s += workload_gamma_unit(cfg->burstiness, &gap_state);
            t = time_of_intensity(s, rate, ramp_s) * 1e9;
        }
        if (t >= (double)cfg->duration_ns)
            break;
        if (limit > 0 && p->n_arrivals >= limit) {
            p->trace.capped = 1; /* at least one more would have come */
            break;
        }
        uint64_t len_state = rng_hash3(cfg->seed, STREAM_LENGTHS, (uint64_t)i);
        workload_arrival a = {0};
        a.t_ns = (int64_t)t;
        a.prompt_tokens = workload_dist_draw(&p->prompt_len, p->prompt_values,
                                             p->n_prompt_values, &len_state);
        a.max_tokens = workload_dist_draw(&p->answer_len, p->answer_values, p->n_answer_values,
                                          &len_state);
        if (push(p, &cap, &a, err) != 0)
            return -1;
    }
    return 0;
}

static int cmp_row(const void *x, const void *y)
{
    const trace_row *a = x, *b = y;
    if (a->t_ns != b->t_ns)
        return (a->t_ns > b->t_ns) - (a->t_ns < b->t_ns);
    return (a->line > b->line) - (a->line < b->line);
}

static int plan_trace(const workload_config *cfg, workload_plan *p, char *err)
{
    trace_row *rows = NULL;
    int64_t n = 0, cap = 0;
    const int64_t limit = workload_request_cap(cfg);
    trace_counts counts;
    workload_trace_stats *st = &p->trace;
    workload_tokenizer *tok = NULL;
    if (cfg->tokenizer[0] && workload_tokenizer_load(cfg->tokenizer, &tok, err) != 0)
        return -1;
    int loaded = trace_load_file(cfg->trace, (trace_format)cfg->trace_format, cfg->skip_bad_rows,
                                 tok, cfg->synthetic_prompts ? NULL : &p->texts, &rows, &n,
                                 &counts, err);
    workload_tokenizer_free(tok);
    if (loaded != 0)
        return -1;
    p->has_trace = true;
    st->format = counts.format;
    st->lines = counts.lines;
    st->bad = counts.bad;
    st->failed = counts.failed;
    snprintf(st->first_bad, sizeof st->first_bad, "%s", counts.first_bad);
    st->rows = n;
    /* Time order (a JSONL file may not be sorted), then the window, re-based to 0. */
    if (n > 1)
        qsort(rows, (size_t)n, sizeof *rows, cmp_row);
    int64_t kept = 0;
    const int64_t first_t = rows[0].t_ns, last_t = rows[n - 1].t_ns; /* n >= 1: trace.h */
    for (int64_t i = 0; i < n; i++) {
        if (rows[i].t_ns < cfg->trace_from_ns ||
            (cfg->trace_to_ns > 0 && rows[i].t_ns >= cfg->trace_to_ns)) {
            st->outside++;
            continue;
        }
        rows[kept] = rows[i];
        rows[kept].t_ns = (int64_t)llround((double)(rows[i].t_ns - cfg->trace_from_ns) /
                                           cfg->speedup);
        kept++;
    }
    if (kept == 0) {
        free(rows);
        return err_set(err, "%s: all %lld rows are outside --from/--to (they span %.3f to %.3f s "
                            "of trace time)",
                       cfg->trace, (long long)n, (double)first_t / 1e9, (double)last_t / 1e9);
    }
    /* One pass of the trace lasts the window (--to given), else up to the last row plus the
     * mean gap, so looped passes neither overlap nor bunch up at the seam. */
    double period = 0;
    if (kept > 0) {
        if (cfg->trace_to_ns > 0)
            period = (double)(cfg->trace_to_ns - cfg->trace_from_ns) / cfg->speedup;
        else {
            double last = (double)rows[kept - 1].t_ns;
            period = last + (kept > 1 ? last / (double)(kept - 1) : (double)CLOCK_NS_PER_S);
        }
        if (period < (double)CLOCK_NS_PER_MS)
            period = (double)CLOCK_NS_PER_MS; /* a trace all at one instant: once per ms */
    }
    int rc = 0;
    for (int64_t pass = 0; kept > 0 && rc == 0; pass++) {
        double base = (double)pass * period;
        if (base >= (double)cfg->duration_ns)
            break;
        st->loops++;
        for (int64_t i = 0; i < kept; i++) {
            double t = base + (double)rows[i].t_ns;
            if (t >= (double)cfg->duration_ns) {
                st->after_end += kept - i;
                break;
            }
            if (limit > 0 && p->n_arrivals >= limit) {
                st->capped++;
                continue;
            }
            workload_arrival a = {0};
            a.t_ns = (int64_t)t;
            a.prompt_tokens = rows[i].prompt_tokens;
            a.max_tokens = rows[i].max_tokens;
            a.line = rows[i].line;
            a.text_off = rows[i].text_off;
            a.text_len = rows[i].text_len;
            a.n_hash_ids = rows[i].n_hash_ids;
            a.hash_off = rows[i].hash_off;
            if ((rc = push(p, &cap, &a, err)) != 0)
                break;
        }
        if (!cfg->trace_loop)
            break;
        if (limit > 0 && p->n_arrivals >= limit)
            break;
    }
    /* An empty experiment is never what was meant: say why instead of running one. */
    if (rc == 0 && p->n_arrivals == 0)
        rc = err_set(err, "%s: every row is at or after --duration (%.3f s; the first at %.3f s "
                          "of the run)",
                     cfg->trace, (double)cfg->duration_ns / 1e9, (double)rows[0].t_ns / 1e9);
    free(rows);
    return rc;
}

int workload_until_end(workload_config *cfg, char *err)
{
    workload_config probe = *cfg;
    probe.until_trace_end = true;
    probe.inject = false; /* the options alone: the duration is what is decided here */
    probe.duration_ns = 1;
    if (workload_check(&probe, err) != 0)
        return -1;
    /* Every windowed row is planned: a duration of 73 years, past any replay's last row. */
    probe.duration_ns = INT64_MAX / 4;
    workload_plan plan;
    if (workload_plan_build(&probe, &plan, err) != 0)
        return -1;
    const int64_t last = plan.arrivals[plan.n_arrivals - 1].t_ns; /* >= 1 arrival: no error */
    workload_plan_free(&plan);
    cfg->until_trace_end = true;
    cfg->duration_ns =
        last + (cfg->num_prompts > 0 ? WORKLOAD_NUM_PROMPTS_TAIL_NS : WORKLOAD_TRACE_TAIL_NS);
    return 0;
}

int workload_plan_build(const workload_config *cfg, workload_plan *p, char *err)
{
    memset(p, 0, sizeof *p);
    p->prompt_len = cfg->prompt_len;
    p->answer_len = cfg->answer_len;
    if (workload_dist_load(&p->prompt_len, &p->prompt_values, &p->n_prompt_values, err) != 0 ||
        workload_dist_load(&p->answer_len, &p->answer_values, &p->n_answer_values, err) != 0)
        goto fail;
    if (workload_drawn_arrivals(cfg) && plan_rate(cfg, p, err) != 0)
        goto fail;
    if (cfg->trace[0] && plan_trace(cfg, p, err) != 0)
        goto fail;
    return 0;
fail:
    workload_plan_free(p);
    return -1;
}

void workload_plan_free(workload_plan *p)
{
    free(p->arrivals);
    free(p->prompt_values);
    free(p->answer_values);
    buf_free(&p->texts);
    memset(p, 0, sizeof *p);
}

workload_bg_request workload_plan_bg(const workload_plan *p, const workload_config *cfg,
                                     int user, int64_t k)
{
    uint64_t state = rng_hash3(cfg->seed, (uint64_t)user + 1, (uint64_t)k);
    workload_bg_request r;
    r.prompt_tokens = workload_dist_draw(&p->prompt_len, p->prompt_values, p->n_prompt_values,
                                         &state);
    r.max_tokens = workload_dist_draw(&p->answer_len, p->answer_values, p->n_answer_values,
                                      &state);
    return r;
}

void workload_plan_largest(const workload_plan *p, const workload_config *cfg,
                           workload_arrival *longest_prompt, workload_arrival *longest_total)
{
    memset(longest_prompt, 0, sizeof *longest_prompt);
    memset(longest_total, 0, sizeof *longest_total);
    /* Closed users and rate arrivals draw from the distributions. */
    if (cfg->users > 0 || workload_drawn_arrivals(cfg)) {
        longest_prompt->prompt_tokens = workload_dist_max(&p->prompt_len);
        longest_prompt->max_tokens = workload_dist_max(&p->answer_len);
        *longest_total = *longest_prompt;
    }
    for (int64_t i = 0; i < p->n_arrivals; i++) {
        const workload_arrival *a = &p->arrivals[i];
        if (a->prompt_tokens > longest_prompt->prompt_tokens)
            *longest_prompt = *a;
        if (a->prompt_tokens + a->max_tokens >
            longest_total->prompt_tokens + longest_total->max_tokens)
            *longest_total = *a;
    }
    /* Every background request starts with the system prompt (a conversation's later turns
     * are bounded by max_context: workload_conv_next). */
    if (longest_prompt->prompt_tokens > 0)
        longest_prompt->prompt_tokens += cfg->system_prompt_tokens;
    if (longest_total->prompt_tokens > 0)
        longest_total->prompt_tokens += cfg->system_prompt_tokens;
}

void workload_plan_describe(const workload_plan *p, const workload_config *cfg, char *buf,
                            size_t size)
{
    char prompt[300], answer[300];
    workload_dist_format(&cfg->prompt_len, prompt, sizeof prompt);
    workload_dist_format(&cfg->answer_len, answer, sizeof answer);
    if (workload_drawn_arrivals(cfg) && cfg->request_rate <= 0) {
        snprintf(buf, size, "open loop: %lld requests (--num-prompts) all at t = 0%s, prompt %s, "
                            "answer %s",
                 (long long)p->n_arrivals,
                 cfg->max_concurrency > 0 ? " through --max-concurrency slots" : "", prompt,
                 answer);
        return;
    }
    if (cfg->request_rate > 0) {
        char ramp[64] = "";
        if (cfg->ramp_up_ns > 0)
            snprintf(ramp, sizeof ramp, ", ramped up over %.3g s", (double)cfg->ramp_up_ns / 1e9);
        snprintf(buf, size,
                 "open loop: %lld requests at %.4g req/s (%s%s), prompt %s, answer %s%s",
                 (long long)p->n_arrivals, cfg->request_rate,
                 cfg->burstiness == 1.0 ? "Poisson" : "gamma", ramp, prompt, answer,
                 p->trace.capped ? (cfg->num_prompts > 0 ? " (--num-prompts)"
                                                         : " (capped by --max-requests)")
                                 : "");
        if (cfg->burstiness != 1.0) {
            size_t used = strlen(buf);
            snprintf(buf + used, size - used, "; burstiness %.3g", cfg->burstiness);
        }
        return;
    }
    if (!p->has_trace) {
        snprintf(buf, size, "closed loop only");
        return;
    }
    const workload_trace_stats *st = &p->trace;
    snprintf(buf, size,
             "trace %s (%s): %lld rows read of %lld lines; skipped: %lld bad, %lld failed "
             "requests, %lld outside --from/--to, %lld at or after --duration, %lld over "
             "--max-requests; %lld requests planned in %lld pass%s",
             cfg->trace, trace_format_name((trace_format)st->format), (long long)st->rows,
             (long long)st->lines, (long long)st->bad, (long long)st->failed,
             (long long)st->outside, (long long)st->after_end, (long long)st->capped,
             (long long)p->n_arrivals, (long long)st->loops, st->loops == 1 ? "" : "es");
    if (st->bad > 0) {
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, "; the first bad row skipped: %s", st->first_bad);
    }
}
