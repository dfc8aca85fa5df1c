/* The terminal table and the one-paragraph verdict: what people quote from a run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "report/table.h"

#define COL_METRIC 26
#define COL_VALUE 13
#define COL_CHANGE 10
#define DASH "\xe2\x80\x94"  /* — */
#define TIMES "\xc3\x97"     /* × */
#define UNCHANGED_PCT 5.0    /* within ±5 % reads as "unchanged" */

int report_display_width(const char *s)
{
    int w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

void report_print_padded(FILE *out, const char *s, int width, bool right_align)
{
    int pad = width - report_display_width(s);
    if (right_align)
        for (int i = 0; i < pad; i++)
            fputc(' ', out);
    fputs(s, out);
    if (!right_align)
        for (int i = 0; i < pad; i++)
            fputc(' ', out);
}

/* Copy at most size - 1 bytes, never cutting a UTF-8 sequence in half: a long label
 * must not widen its column. */
static void clip(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n >= size) {
        n = size - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xc0) == 0x80)
            n--;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void report_format_ms(char *buf, size_t size, double ms)
{
    if (fabs(ms) < 10)
        snprintf(buf, size, "%.2f", ms);
    else if (fabs(ms) < 1000)
        snprintf(buf, size, "%.1f", ms);
    else
        snprintf(buf, size, "%.0f", ms);
}

/* The change from base to value: "+0.3 %", "-12.0 %", "×14.8"; "" when there is no base. */
static void format_change(char *buf, size_t size, int have_base, double base, double value)
{
    if (!have_base) {
        snprintf(buf, size, "%s", "");
        return;
    }
    if (base == 0) {
        snprintf(buf, size, "%s", value == 0 ? "=" : "new");
        return;
    }
    double ratio = value / base;
    if (ratio >= 2)
        snprintf(buf, size, TIMES "%.1f", ratio);
    else
        snprintf(buf, size, "%+.1f %%", (ratio - 1) * 100);
}

void report_format_metric(char *buf, size_t size, metric_unit unit, double v)
{
    switch (unit) {
    case METRIC_MS:
        report_format_ms(buf, size, v);
        break;
    case METRIC_COUNT:
        snprintf(buf, size, "%.0f", v);
        break;
    case METRIC_SHARE:
        snprintf(buf, size, "%.2f %%", v * 100);
        break;
    case METRIC_NUMBER:
        snprintf(buf, size, "%.1f", v);
        break;
    }
}

/* One row; base_column false: the table has no baseline column (a run without a baseline,
 * where a column of dashes would say nothing). */
static void print_row(FILE *out, const char *label, metric_unit unit, bool base_column,
                      int have_base, double base, int have_value, double value)
{
    char b[32], v[32], c[32];
    if (have_base)
        report_format_metric(b, sizeof b, unit, base);
    else
        snprintf(b, sizeof b, DASH);
    if (have_value)
        report_format_metric(v, sizeof v, unit, value);
    else
        snprintf(v, sizeof v, DASH);
    if (unit == METRIC_SHARE && have_base && have_value)
        /* A fraction's change reads best in points: 0 % -> 1.46 % is "+1.46 pt". */
        snprintf(c, sizeof c, "%+.2f pt", (value - base) * 100);
    else
        format_change(c, sizeof c, have_base && have_value, base, value);
    report_print_padded(out, label, COL_METRIC, false);
    if (base_column) {
        fputc(' ', out);
        report_print_padded(out, b, COL_VALUE, true);
    }
    fputc(' ', out);
    report_print_padded(out, v, COL_VALUE, true);
    if (c[0]) { /* no trailing blanks when there is no change to show */
        fputs("  ", out);
        report_print_padded(out, c, COL_CHANGE, true);
    }
    fputc('\n', out);
}

static void format_threshold(char *buf, size_t size, double ms)
{
    if (ms < 100)
        snprintf(buf, size, "%.1f", ms);
    else
        snprintf(buf, size, "%.0f", ms);
}

const char *report_users_word(const analysis_summary *s)
{
    return s && s->users_are_streams ? "streams" : "users";
}

static void print_run_line(FILE *out, const char *role, const analysis_summary *s)
{
    char shard[48] = "";
    if (s->shards > 0)
        snprintf(shard, sizeof shard, " (shard %d/%d)", s->shard, s->shards);
    fprintf(out, "%s: %s%s%s, %d %s%s, %.1f s, %lld tokens%s\n", role,
            s->label[0] ? s->label : role, s->engine[0] ? " on " : "", s->engine, s->users,
            report_users_word(s), shard, s->duration_s, (long long)s->tokens_received,
            s->failed ? " (FAILED)" : s->complete ? "" : " (cut short)");
}

/* A failed run says why before anything else: its figures describe the few answers that
 * came. */
static void print_failure(FILE *out, const char *role, const analysis_summary *s)
{
    char why[256];
    analysis_failure_text(s, why, sizeof why);
    if (why[0])
        fprintf(out, "%s FAILED: %s\n", role, why);
}

/* The table's rows: figures of the metric table (analysis/metric.h), by id, with when a row
 * shows and how its label is dressed. */
typedef enum {
    ROW_ALWAYS,
    ROW_THRESHOLD,  /* the label names the interference run's stall threshold */
    ROW_CAUSE,      /* one cause of the stalls: indented under them */
    ROW_CAUSE_IF_NONZERO, /* the same, only when a run has stalls of that cause (the causes
                             only a server that preempts or leaves requests out has) */
    ROW_IF_PRESENT, /* only when the interference run has the figure (goodput: an SLO) */
    ROW_IF_GPUS,    /* only when the interference run had several GPUs (a P + D split) */
    ROW_IF_NONZERO, /* only when a run's value is not 0 */
    ROW_IF_INJECTED, /* only when the interference run had injections (else: no meaning) */
} row_show;

typedef struct table_row {
    const char *metric; /* its id */
    row_show show;
} table_row;

static const table_row ROWS[] = {
    {"itl.p50", ROW_ALWAYS},
    {"itl.p90", ROW_ALWAYS},
    {"itl.p99", ROW_ALWAYS},
    {"itl.p999", ROW_ALWAYS},
    {"itl.max", ROW_ALWAYS},
    {"itl.mean", ROW_ALWAYS},
    {"itl.count", ROW_ALWAYS},
    {"stalls", ROW_THRESHOLD},
    /* Each stall's cause (analysis.h), in its order of evidence: the rows show where the
     * stalls came from. */
    {"stalls.preempted", ROW_CAUSE_IF_NONZERO},
    {"stalls.prefill", ROW_CAUSE},
    {"stalls.server", ROW_CAUSE},
    {"stalls.not_scheduled", ROW_CAUSE_IF_NONZERO},
    {"stalls.client", ROW_CAUSE},
    {"stalls.unexplained", ROW_CAUSE},
    {"stalls.aligned_fraction", ROW_IF_INJECTED},
    {"stalls.time", ROW_ALWAYS},
    {"spike_ratio", ROW_ALWAYS},
    {"injection_ttft.p50", ROW_IF_INJECTED},
    {"injection_ttft.max", ROW_IF_INJECTED},
    {"ttft.p50", ROW_ALWAYS},
    {"ttft.p99", ROW_ALWAYS},
    /* The benchmark world's figures (summary.json "metrics", vLLM's meanings). */
    {"tpot.median", ROW_ALWAYS},
    {"e2el.median", ROW_ALWAYS},
    /* What streamed beside what completed: a short run completes few requests (vLLM's
     * output throughput counts only theirs), while every stream delivered tokens. */
    {"requests.completed", ROW_ALWAYS},
    {"requests.unfinished", ROW_ALWAYS},
    {"throughput.streamed", ROW_ALWAYS},
    {"throughput.output", ROW_ALWAYS},
    {"throughput.output_per_gpu", ROW_IF_GPUS},
    {"goodput", ROW_IF_PRESENT},
    {"errors", ROW_ALWAYS},
    {"protocol_violations", ROW_IF_NONZERO},
};

/* A figure of a run for the table: there, and measured (a TTFT needs a first token). */
static bool table_value(const metric *m, const analysis_summary *s, double *v)
{
    *v = 0;
    return s && metric_value(m, s, v) && metric_sampled(m, s);
}

static void print_metric_row(FILE *out, const table_row *row, const analysis_summary *b,
                             const analysis_summary *x)
{
    const metric *m = metric_find(row->metric);
    if (!m)
        return;
    double bv, xv;
    const bool hb = table_value(m, b, &bv), hx = table_value(m, x, &xv);
    if ((row->show == ROW_IF_PRESENT && !hx) || (row->show == ROW_IF_GPUS && x->gpus <= 1) ||
        ((row->show == ROW_IF_NONZERO || row->show == ROW_CAUSE_IF_NONZERO) &&
         !(xv != 0 || (hb && bv != 0))) ||
        (row->show == ROW_IF_INJECTED && x->n_injections == 0))
        return;
    char label[64], thr[32];
    if (row->show == ROW_THRESHOLD) {
        format_threshold(thr, sizeof thr, x->stalls.threshold_ms);
        snprintf(label, sizeof label, "%s (>%s ms)", m->label, thr);
    } else {
        const bool cause = row->show == ROW_CAUSE || row->show == ROW_CAUSE_IF_NONZERO;
        snprintf(label, sizeof label, "%s%s", cause ? "  " : "", m->label);
    }
    print_row(out, label, m->unit, b != NULL, hb, bv, hx, xv);
}

void report_table_print(FILE *out, const analysis_summary *baseline,
                        const analysis_summary *interference)
{
    const analysis_summary *b = baseline, *x = interference;
    if (!x)
        return;
    int hb = b != NULL;
    /* Each run by its label: baseline, interference, or --no-inject's traffic. */
    const char *role_x = x->label[0] ? x->label : "interference";
    char title_b[COL_VALUE + 1], title_x[COL_VALUE + 1];
    clip(title_b, sizeof title_b, hb && b->label[0] ? b->label : "baseline");
    clip(title_x, sizeof title_x, role_x);

    if (hb)
        print_failure(out, "baseline", b);
    print_failure(out, role_x, x);
    if (hb)
        print_run_line(out, "baseline", b);
    print_run_line(out, role_x, x);
    fputc('\n', out);
    report_print_padded(out, "metric", COL_METRIC, false);
    if (hb) {
        fputc(' ', out);
        report_print_padded(out, title_b, COL_VALUE, true);
    }
    fputc(' ', out);
    report_print_padded(out, title_x, COL_VALUE, true);
    if (hb) {
        fputs("  ", out);
        report_print_padded(out, "change", COL_CHANGE, true);
    }
    fputc('\n', out);
    const int width = hb ? COL_METRIC + COL_VALUE * 2 + COL_CHANGE + 4 : COL_METRIC + COL_VALUE + 1;
    for (int i = 0; i < width; i++)
        fputc('-', out);
    fputc('\n', out);

    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++)
        print_metric_row(out, &ROWS[i], b, x);

    /* The stall row names one threshold; say so when the runs were cut differently. */
    if (hb && fabs(b->stalls.threshold_ms - x->stalls.threshold_ms) > 1e-9) {
        char tb[32];
        format_threshold(tb, sizeof tb, b->stalls.threshold_ms);
        fprintf(out, "(baseline stalls counted above %s ms)\n", tb);
    }
    /* Say which percentiles are exact: a long run's come from a histogram (analysis.h). */
    const analysis_summary *runs[2] = {b, x};
    for (int i = 0; i < 2; i++)
        if (runs[i] && runs[i]->itl_histogram)
            fprintf(out, "(%s gap percentiles from a log histogram of %lld gaps: ±%.2f %% "
                         "relative error; counts, mean, max and stalls exact)\n",
                    runs[i]->label[0] ? runs[i]->label : i ? "interference" : "baseline",
                    (long long)runs[i]->itl_ms.count, 100 * runs[i]->itl_relative_error);
}

/* ---- verdict ----------------------------------------------------------------------- */

static void format_ms_short(char *buf, size_t size, double ms)
{
    if (ms >= 100)
        snprintf(buf, size, "%.0f ms", ms);
    else
        snprintf(buf, size, "%.1f ms", ms);
}

/* "unchanged (+0.4 %)", "+38 %", "×14.8"; 1 when the change counts as unchanged. A change
 * within UNCHANGED_PCT reads as unchanged; when the baseline's own halves differ by more
 * (noise, a fraction: analysis_summary.itl_noise), the band is that noise and the words say
 * so — "unchanged within noise (+10 %, noise ±14 %)" — and a change beyond it carries it. */
static int describe_change(char *buf, size_t size, double base, double value, double noise)
{
    if (base == 0) {
        snprintf(buf, size, "%s", value == 0 ? "unchanged (0)" : "up from 0");
        return value == 0;
    }
    double ratio = value / base;
    double pct = (ratio - 1) * 100, noise_pct = noise * 100;
    bool noisy = noise_pct > UNCHANGED_PCT;
    if (fabs(pct) <= (noisy ? noise_pct : UNCHANGED_PCT)) {
        if (noisy)
            snprintf(buf, size, "unchanged within noise (%+.1f %%, noise \xc2\xb1%.1f %%)", pct,
                     noise_pct);
        else
            snprintf(buf, size, "unchanged (%+.1f %%)", pct);
        return 1;
    }
    if (ratio >= 2)
        snprintf(buf, size, TIMES "%.1f", ratio);
    else if (noisy)
        snprintf(buf, size, "%+.0f %% (noise \xc2\xb1%.0f %%)", pct, noise_pct);
    else
        snprintf(buf, size, "%+.0f %%", pct);
    return 0;
}

/* Who was hurt: the injections and the users (or streams) each one froze. */
static void say_who_was_hurt(buf *text, const analysis_summary *x)
{
    if (x->n_injections == 0) {
        buf_printf(text, "no injections");
        return;
    }
    if (x->injections_with_stalls == 0) {
        buf_printf(text, "0/%d injections stalled any user", x->n_injections);
        return;
    }
    int lo = -1, hi = 0;
    for (int i = 0; i < x->n_injections; i++) {
        int u = x->injections[i].users_stalled;
        if (u == 0)
            continue;
        if (lo < 0 || u < lo)
            lo = u;
        if (u > hi)
            hi = u;
    }
    const char *who = report_users_word(x);
    if (lo == hi)
        buf_printf(text, "%d/%d injections each stalled %d/%d %s", x->injections_with_stalls,
                   x->n_injections, hi, x->users, who);
    else
        buf_printf(text, "%d/%d injections stalled %d-%d of %d %s each",
                   x->injections_with_stalls, x->n_injections, lo, hi, x->users, who);
}

void report_verdict(char *out, size_t size, const analysis_summary *baseline,
                    const analysis_summary *interference)
{
    if (!out || size == 0)
        return;
    out[0] = '\0';
    const analysis_summary *x = interference;
    if (!x)
        return;
    /* Built whole, then cut to the caller's size: out of memory leaves a prefix, which
     * reads like a cut. */
    buf text = {0};
    size_t sentence = 0; /* where a second sentence starts (a capital there), 0: none */
    char thr[32], ms[32], ch[64];
    format_threshold(thr, sizeof thr, x->stalls.threshold_ms);

    /* A failed run: why, first; what follows describes the few answers that came. */
    if (x->failed) {
        char why[256];
        analysis_failure_text(x, why, sizeof why);
        buf_printf(&text, "the run FAILED: %s", why);
        if (x->tokens_received == 0 && x->itl_ms.count == 0) {
            buf_printf(&text, ". No token arrived");
            goto said;
        }
        buf_printf(&text, ". The answers that came: ");
    }
    /* One shard alone is not the experiment: its users only, and the injector only in
     * shard 0. Said first, with where the experiment's figures come from. */
    if (x->shards > 0) {
        buf_printf(&text, "shard %d/%d alone: its own %d %s%s, not the experiment's (`stallscope "
                          "report --merge` over the %d shards' directories gives those). ",
                   x->shard, x->shards, x->users, report_users_word(x),
                   x->shard == 0 ? "" : " and no injector (shard 0 sends the long prompts)",
                   x->shards);
        sentence = text.len;
    }
    say_who_was_hurt(&text, x);

    /* How badly: stall count, and the longest gap against the median. */
    if (x->stalls.count == 0) {
        buf_printf(&text, "; no stalls above %s ms", thr);
    } else {
        buf_printf(&text, "; %lld stall%s above %s ms", (long long)x->stalls.count,
                   x->stalls.count == 1 ? "" : "s", thr);
        if (x->n_injections > 0) /* without any, "aligned" has nothing to align with */
            buf_printf(&text, ", %.0f %% aligned with injections",
                       x->stalls.aligned_fraction * 100);
    }
    if (x->itl_ms.count > 0) {
        format_ms_short(ms, sizeof ms, x->itl_ms.max);
        buf_printf(&text, "; max gap %s = %.*f" TIMES " p50", ms, x->spike_ratio >= 10 ? 0 : 1,
                   x->spike_ratio);
    }

    /* Against the baseline: the median, then the tail. */
    if (x->itl_ms.count == 0) {
        buf_printf(&text, "%s", x->tokens_received == 0
                                    ? "; no token arrived"
                                    : "; no gaps to measure (every answer arrived in one event)");
    } else if (baseline && baseline->itl_ms.count > 0) {
        const analysis_dist *b = &baseline->itl_ms, *d = &x->itl_ms;
        const analysis_dist *nz = &baseline->itl_noise;
        describe_change(ch, sizeof ch, b->p50, d->p50, nz->p50);
        buf_printf(&text, "; median %s", ch);
        int p99_flat = describe_change(ch, sizeof ch, b->p99, d->p99, nz->p99);
        buf_printf(&text, "; p99 %s", ch);
        describe_change(ch, sizeof ch, b->p999, d->p999, nz->p999);
        buf_printf(&text, "; p99.9 %s", ch);
        describe_change(ch, sizeof ch, b->max, d->max, nz->max);
        buf_printf(&text, "; max %s", ch);
        /* The lesson's trap: spikes under 1 % of gaps are invisible to p99. */
        if (p99_flat && x->stalls.count > 0 && x->stalls.fraction_of_gaps < 0.01)
            buf_printf(&text, " (stalls are %.2f %% of gaps, under the 1 %% that p99 looks at: "
                            "read p99.9, max and the stall count)",
                       x->stalls.fraction_of_gaps * 100);
    } else {
        char p50[32], p999[32];
        format_ms_short(p50, sizeof p50, x->itl_ms.p50);
        format_ms_short(p999, sizeof p999, x->itl_ms.p999);
        format_ms_short(ms, sizeof ms, x->itl_ms.max);
        buf_printf(&text, "; median %s, p99.9 %s, max %s (no baseline to compare)", p50, p999, ms);
    }
    if (x->errors > 0 && !x->failed)
        buf_printf(&text, "; %lld request%s failed", (long long)x->errors,
                   x->errors == 1 ? "" : "s");
    /* What caused them, in one clause: the causes that have stalls, the largest first. */
    if (x->stalls.count > 0) {
        const analysis_attribution *a = &x->attribution;
        int order[ANALYSIS_N_CAUSES];
        for (int i = 0; i < ANALYSIS_N_CAUSES; i++)
            order[i] = i;
        for (int i = 1; i < ANALYSIS_N_CAUSES; i++)
            for (int j = i; j > 0 && a->by_cause[order[j]].stalls > a->by_cause[order[j - 1]].stalls; j--) {
                int t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        buf_printf(&text, "; caused by");
        for (int i = 0, n = 0; i < ANALYSIS_N_CAUSES; i++) {
            const analysis_cause_total *t = &a->by_cause[order[i]];
            if (t->stalls == 0)
                continue;
            buf_printf(&text, "%s %s %lld", n++ ? "," : "", analysis_cause_name((analysis_cause)order[i]),
                       (long long)t->stalls);
            if (order[i] == ANALYSIS_CAUSE_PREFILL && a->n_culprits > 0) {
                /* the culprits come most frozen time first: the longest is looked for */
                int32_t longest = 0;
                for (int c = 0; c < a->n_culprits; c++)
                    if (a->culprits[c].prompt_tokens > longest)
                        longest = a->culprits[c].prompt_tokens;
                buf_printf(&text, " (%d request%s, longest prompt %d tokens)", a->n_culprits,
                           a->n_culprits == 1 ? "" : "s", longest);
            }
        }
        if (!a->step_log)
            buf_printf(&text, " (no step log: only prefill is told apart)");
    }
    if (x->protocol_violations > 0)
        buf_printf(&text, "; %lld server event%s broke the protocol and %s ignored",
                   (long long)x->protocol_violations, x->protocol_violations == 1 ? "" : "s",
                   x->protocol_violations == 1 ? "was" : "were");
    if (!x->complete && !x->failed)
        buf_printf(&text, "; the run was cut short");
said:
    buf_printf(&text, ".");
    snprintf(out, size, "%s", text.data ? text.data : "");
    buf_free(&text);
    /* Sentence case. */
    const size_t starts[2] = {0, sentence};
    for (int i = 0; i < 2; i++)
        if (starts[i] < size && out[starts[i]] >= 'a' && out[starts[i]] <= 'z')
            out[starts[i]] = (char)(out[starts[i]] - 'a' + 'A');
}
