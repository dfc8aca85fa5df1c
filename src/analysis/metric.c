/* metric — the table of every figure and its names (metric.h). */
#include "analysis/metric.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* ---- how a row reads its value ------------------------------------------------------------ */

#define F64(member) .field = METRIC_F64, .offset = offsetof(analysis_summary, member)
#define I64(member) .field = METRIC_I64, .offset = offsetof(analysis_summary, member)
#define STAT_P(member) .field = METRIC_STAT_P, .offset = offsetof(analysis_summary, member)
#define FN(fn) .field = METRIC_FN, .get = fn
#define COUNT(member) .count = offsetof(analysis_summary, member)

_Static_assert(offsetof(analysis_summary, label) == 0,
               "metric.count uses offset 0 for 'no count': the label must sit there");

static bool injection_ttft_p50(const analysis_summary *s, double *out)
{
    analysis_dist d;
    const bool have = analysis_injection_ttft(s, &d);
    *out = d.p50;
    return have;
}

static bool injection_ttft_max(const analysis_summary *s, double *out)
{
    analysis_dist d;
    const bool have = analysis_injection_ttft(s, &d);
    *out = d.max;
    return have;
}

static bool request_goodput(const analysis_summary *s, double *out)
{
    *out = s->standard.all.request_goodput;
    return s->standard.all.has_goodput;
}

static bool goodput(const analysis_summary *s, double *out)
{
    *out = s->standard.all.goodput;
    return s->standard.all.has_goodput;
}

static bool goodput_background(const analysis_summary *s, double *out)
{
    *out = s->standard.background.goodput;
    return s->standard.background.has_goodput;
}

/* Per GPU: summary.json's "per_gpu", there when the run knows its GPUs. */
static bool output_per_gpu(const analysis_summary *s, double *out)
{
    *out = s->gpus > 0 ? s->standard.all.output_throughput / s->gpus : 0;
    return s->gpus > 0;
}

static bool goodput_per_gpu(const analysis_summary *s, double *out)
{
    *out = s->gpus > 0 ? s->standard.all.request_goodput / s->gpus : 0;
    return s->gpus > 0 && s->standard.all.has_goodput;
}

/* ---- the table ------------------------------------------------------------------------------ */

/* The stall analysis first (the background streams, nearest rank), then the run, then vLLM's
 * standard metrics in the order of its result file (which metric_vllm_result keeps), then
 * the rest of the standard metrics. */
static const metric ROWS[] = {
    {"itl.mean", "itl_ms.mean", NULL, "mean gap (ms)", METRIC_MS,
     "mean gap between two tokens of one stream", F64(itl_ms.mean)},
    {"itl.p50", "itl_ms.p50", NULL, "gap p50 (ms)", METRIC_MS, "median gap", F64(itl_ms.p50)},
    {"itl.p90", "itl_ms.p90", NULL, "gap p90 (ms)", METRIC_MS, "90th percentile gap",
     F64(itl_ms.p90)},
    {"itl.p99", "itl_ms.p99", NULL, "gap p99 (ms)", METRIC_MS, "99th percentile gap",
     F64(itl_ms.p99)},
    {"itl.p999", "itl_ms.p999", NULL, "gap p99.9 (ms)", METRIC_MS, "99.9th percentile gap",
     F64(itl_ms.p999)},
    {"itl.max", "itl_ms.max", NULL, "max gap (ms)", METRIC_MS,
     "the longest gap: the stall users felt most", F64(itl_ms.max)},
    {"itl.count", "itl_ms.count", NULL, "gaps counted", METRIC_COUNT,
     "gaps between two token events of one background stream", I64(itl_ms.count)},
    {"ttft.p50", "ttft_ms.p50", NULL, "background TTFT p50 (ms)", METRIC_MS,
     "median time to first token (background requests)", F64(ttft_ms.p50),
     COUNT(ttft_ms.count)},
    {"ttft.p99", "ttft_ms.p99", NULL, "background TTFT p99 (ms)", METRIC_MS,
     "99th percentile time to first token", F64(ttft_ms.p99), COUNT(ttft_ms.count)},
    {"ttft.max", "ttft_ms.max", NULL, "background TTFT max (ms)", METRIC_MS,
     "the longest time to first token", F64(ttft_ms.max), COUNT(ttft_ms.count)},
    {"injection_ttft.p50", NULL, NULL, "injection TTFT p50 (ms)", METRIC_MS,
     "median time to first token of the long prompts (summary.json: injections[].ttft_ms)",
     FN(injection_ttft_p50)},
    {"injection_ttft.max", NULL, NULL, "injection TTFT max (ms)", METRIC_MS,
     "the long prompts' longest time to first token", FN(injection_ttft_max)},
    {"stalls", "stalls.count", NULL, "stalls", METRIC_COUNT, "gaps above the stall threshold",
     I64(stalls.count)},
    {"stalls.aligned", "stalls.aligned", NULL, "aligned stalls", METRIC_COUNT,
     "stalls during an injection's prefill", I64(stalls.aligned)},
    {"stalls.aligned_fraction", "stalls.aligned_fraction", NULL, "aligned fraction",
     METRIC_SHARE, "share of the stalls that fell during an injection's prefill",
     F64(stalls.aligned_fraction), COUNT(stalls.count)},
    {"stalls.fraction", "stalls.fraction_of_gaps", NULL, "stalls among gaps", METRIC_SHARE,
     "share of gaps that are stalls", F64(stalls.fraction_of_gaps)},
    {"stalls.time", "stalls.stalled_time_fraction", NULL, "stalled time %", METRIC_SHARE,
     "share of stream time spent frozen", F64(stalls.stalled_time_fraction)},
    {"stalls.prefill", "attribution.by_cause.prefill.stalls", NULL, "caused by prefill",
     METRIC_COUNT, "stalls caused by a prefill",
     I64(attribution.by_cause[ANALYSIS_CAUSE_PREFILL].stalls)},
    {"stalls.server", "attribution.by_cause.server.stalls", NULL, "caused by server",
     METRIC_COUNT, "stalls where the server's step overran",
     I64(attribution.by_cause[ANALYSIS_CAUSE_SERVER].stalls)},
    {"stalls.client", "attribution.by_cause.client.stalls", NULL, "caused by client",
     METRIC_COUNT, "stalls where the client read late",
     I64(attribution.by_cause[ANALYSIS_CAUSE_CLIENT].stalls)},
    {"stalls.unexplained", "attribution.by_cause.unexplained.stalls", NULL,
     "caused by unexplained", METRIC_COUNT, "stalls without a cause",
     I64(attribution.by_cause[ANALYSIS_CAUSE_UNEXPLAINED].stalls)},
    {"stalls.preempted", "attribution.by_cause.preempted.stalls", NULL, "caused by preemption",
     METRIC_COUNT, "stalls spent preempted (out of every step until re-admitted)",
     I64(attribution.by_cause[ANALYSIS_CAUSE_PREEMPTED].stalls)},
    {"stalls.not_scheduled", "attribution.by_cause.not_scheduled.stalls", NULL,
     "caused by not scheduled", METRIC_COUNT,
     "stalls where the server left the request out of short steps without preempting it",
     I64(attribution.by_cause[ANALYSIS_CAUSE_NOT_SCHEDULED].stalls)},
    {"stalls.per_min", "attribution.stalls_per_min", NULL, "stalls per minute", METRIC_NUMBER,
     "stalls per minute", F64(attribution.stalls_per_min)},
    {"frozen_user_s.per_hour", "attribution.frozen_user_s_per_hour", NULL,
     "frozen user-seconds per hour", METRIC_NUMBER, "user-seconds frozen per hour of run",
     F64(attribution.frozen_user_s_per_hour)},
    {"requests.stalled_100ms", "attribution.requests_stalled_100ms", NULL,
     "requests with a gap > 100 ms", METRIC_SHARE, "share of requests with a gap over 100 ms",
     F64(attribution.requests_stalled_100ms)},
    {"requests.stalled_1s", "attribution.requests_stalled_1s", NULL,
     "requests with a gap > 1 s", METRIC_SHARE, "share of requests with a gap over 1 s",
     F64(attribution.requests_stalled_1s)},
    {"spike_ratio", "spike_ratio", NULL, "spike ratio (max/p50)", METRIC_NUMBER,
     "max gap / median gap", F64(spike_ratio)},

    {"errors", "errors", NULL, "errors", METRIC_COUNT, "failed requests", I64(errors)},
    {"protocol_violations", "protocol_violations", NULL, "protocol violations", METRIC_COUNT,
     "server answers that broke the protocol", I64(protocol_violations)},
    {"throughput.streamed", "streamed_throughput", NULL, "streamed tokens/s", METRIC_NUMBER,
     "tokens streamed per second, every request's", F64(streamed_throughput)},

    {"duration", "duration_s", "duration", "duration (s)", METRIC_NUMBER,
     "the run's length in seconds", F64(duration_s)},
    {"requests.completed", "metrics.all.completed", "completed", "requests completed",
     METRIC_COUNT, "requests sent at t >= 0 that ended without an error (vLLM's completed)",
     I64(standard.all.completed)},
    {"requests.failed", "metrics.all.failed", "failed", "requests failed", METRIC_COUNT,
     "requests sent at t >= 0 that ended with an error", I64(standard.all.failed)},
    {"tokens.input", "metrics.all.input_tokens", "total_input_tokens", "input tokens (completed)",
     METRIC_COUNT, "prompt tokens of the completed requests", I64(standard.all.input_tokens)},
    {"tokens.output", "metrics.all.output_tokens", "total_output_tokens",
     "output tokens (completed)", METRIC_COUNT, "output tokens of the completed requests",
     I64(standard.all.output_tokens)},
    {"throughput.requests", "metrics.all.request_throughput", "request_throughput",
     "requests/s (completed)", METRIC_NUMBER, "completed requests per second",
     F64(standard.all.request_throughput)},
    {"goodput.requests", "metrics.all.request_goodput", "request_goodput", "goodput (req/s)",
     METRIC_NUMBER, "completed requests meeting every --goodput SLO, per second",
     FN(request_goodput)},
    {"throughput.output", "metrics.all.output_throughput", "output_throughput",
     "output tok/s (completed)", METRIC_NUMBER,
     "output tokens per second of the completed requests (vLLM's)",
     F64(standard.all.output_throughput)},
    {"throughput.total", "metrics.all.total_token_throughput", "total_token_throughput",
     "total tok/s (completed)", METRIC_NUMBER,
     "input and output tokens per second of the completed requests",
     F64(standard.all.total_token_throughput)},
    {"ttft.all.mean", "metrics.all.ttft_ms.mean", "mean_ttft_ms", "TTFT mean (ms)", METRIC_MS,
     "mean time to first token over the completed requests (vLLM's TTFT)",
     F64(standard.all.ttft_ms.mean), COUNT(standard.all.ttft_ms.count)},
    {"ttft.all.median", "metrics.all.ttft_ms.median", "median_ttft_ms", "TTFT median (ms)",
     METRIC_MS, "median time to first token (interpolated)", F64(standard.all.ttft_ms.median),
     COUNT(standard.all.ttft_ms.count)},
    {"ttft.all.std", "metrics.all.ttft_ms.std", "std_ttft_ms", "TTFT std (ms)", METRIC_MS,
     "standard deviation of the time to first token", F64(standard.all.ttft_ms.std),
     COUNT(standard.all.ttft_ms.count)},
    {"ttft.all.p{P}", "metrics.all.ttft_ms.p{P}", "p{P}_ttft_ms", "TTFT p{P} (ms)", METRIC_MS,
     "percentile of the time to first token (interpolated)", STAT_P(standard.all.ttft_ms),
     COUNT(standard.all.ttft_ms.count)},
    {"tpot.mean", "metrics.all.tpot_ms.mean", "mean_tpot_ms", "TPOT mean (ms)", METRIC_MS,
     "mean time per output token after the first", F64(standard.all.tpot_ms.mean),
     COUNT(standard.all.tpot_ms.count)},
    {"tpot.median", "metrics.all.tpot_ms.median", "median_tpot_ms", "TPOT median (ms)",
     METRIC_MS, "median time per output token", F64(standard.all.tpot_ms.median),
     COUNT(standard.all.tpot_ms.count)},
    {"tpot.std", "metrics.all.tpot_ms.std", "std_tpot_ms", "TPOT std (ms)", METRIC_MS,
     "standard deviation of the time per output token", F64(standard.all.tpot_ms.std),
     COUNT(standard.all.tpot_ms.count)},
    {"tpot.p{P}", "metrics.all.tpot_ms.p{P}", "p{P}_tpot_ms", "TPOT p{P} (ms)", METRIC_MS,
     "percentile of the time per output token (interpolated)", STAT_P(standard.all.tpot_ms),
     COUNT(standard.all.tpot_ms.count)},
    {"itl.all.mean", "metrics.all.itl_ms.mean", "mean_itl_ms", "ITL mean (ms)", METRIC_MS,
     "mean gap between two token events of one request, every request (vLLM's ITL)",
     F64(standard.all.itl_ms.mean), COUNT(standard.all.itl_ms.count)},
    {"itl.all.median", "metrics.all.itl_ms.median", "median_itl_ms", "ITL median (ms)",
     METRIC_MS, "median of vLLM's ITL (interpolated)", F64(standard.all.itl_ms.median),
     COUNT(standard.all.itl_ms.count)},
    {"itl.all.std", "metrics.all.itl_ms.std", "std_itl_ms", "ITL std (ms)", METRIC_MS,
     "standard deviation of vLLM's ITL", F64(standard.all.itl_ms.std),
     COUNT(standard.all.itl_ms.count)},
    {"itl.all.p{P}", "metrics.all.itl_ms.p{P}", "p{P}_itl_ms", "ITL p{P} (ms)", METRIC_MS,
     "percentile of vLLM's ITL (interpolated)", STAT_P(standard.all.itl_ms),
     COUNT(standard.all.itl_ms.count)},
    {"e2el.mean", "metrics.all.e2el_ms.mean", "mean_e2el_ms", "E2E latency mean (ms)", METRIC_MS,
     "mean end-to-end latency, send to the last byte", F64(standard.all.e2el_ms.mean),
     COUNT(standard.all.e2el_ms.count)},
    {"e2el.median", "metrics.all.e2el_ms.median", "median_e2el_ms", "E2E latency median (ms)",
     METRIC_MS, "median end-to-end latency", F64(standard.all.e2el_ms.median),
     COUNT(standard.all.e2el_ms.count)},
    {"e2el.std", "metrics.all.e2el_ms.std", "std_e2el_ms", "E2E latency std (ms)", METRIC_MS,
     "standard deviation of the end-to-end latency", F64(standard.all.e2el_ms.std),
     COUNT(standard.all.e2el_ms.count)},
    {"e2el.p{P}", "metrics.all.e2el_ms.p{P}", "p{P}_e2el_ms", "E2E latency p{P} (ms)",
     METRIC_MS, "percentile of the end-to-end latency (interpolated)",
     STAT_P(standard.all.e2el_ms), COUNT(standard.all.e2el_ms.count)},

    {"requests.unfinished", "metrics.all.unfinished", NULL, "requests cut at the end",
     METRIC_COUNT, "requests the run's end cut (finish reason abort or none)",
     I64(standard.all.unfinished)},
    {"goodput", "metrics.all.goodput", NULL, "goodput (SLOs met)", METRIC_SHARE,
     "share of completed requests meeting every --goodput SLO", FN(goodput)},
    {"goodput.background", "metrics.background.goodput", NULL, "background goodput (SLOs met)",
     METRIC_SHARE, "the same over the background requests", FN(goodput_background)},
    {"throughput.output_per_gpu", "per_gpu.output_throughput", NULL, "output tokens/s per GPU",
     METRIC_NUMBER,
     "output tokens per second per GPU (simulator: 1 GPU, or P + D with --disaggregate)",
     FN(output_per_gpu)},
    {"goodput.requests_per_gpu", "per_gpu.request_goodput", NULL, "goodput req/s per GPU",
     METRIC_NUMBER, "requests meeting every --goodput SLO per second per GPU (simulator)",
     FN(goodput_per_gpu)},
};
#define N_ROWS ((int)(sizeof ROWS / sizeof ROWS[0]))

#define PLACEHOLDER "{P}"

const metric *metric_table(int *n)
{
    *n = N_ROWS;
    return ROWS;
}

const metric *metric_find(const char *id)
{
    for (int i = 0; i < N_ROWS; i++)
        if (strcmp(ROWS[i].id, id) == 0)
            return &ROWS[i];
    return NULL;
}

static bool is_family(const metric *m)
{
    return m->field == METRIC_STAT_P;
}

/* pattern with its "{P}" replaced by p. */
static void expand(const char *pattern, const char *p, char *buf, size_t size)
{
    const char *at = strstr(pattern, PLACEHOLDER);
    if (!at)
        snprintf(buf, size, "%s", pattern);
    else
        snprintf(buf, size, "%.*s%s%s", (int)(at - pattern), pattern, p,
                 at + strlen(PLACEHOLDER));
}

/* ---- values -------------------------------------------------------------------------------- */

static bool read_field(const metric *m, const analysis_summary *s, const char *p, double *out)
{
    const char *base = (const char *)s + m->offset;
    *out = 0;
    switch (m->field) {
    case METRIC_F64: {
        double v;
        memcpy(&v, base, sizeof v);
        *out = v;
        return true;
    }
    case METRIC_I64: {
        int64_t v;
        memcpy(&v, base, sizeof v);
        *out = (double)v;
        return true;
    }
    case METRIC_STAT_P: {
        const standard_stat *st = (const standard_stat *)(const void *)base;
        const standard_options *o = &s->standard.opt;
        for (int k = 0; k < o->n_percentiles && p; k++) {
            char word[16];
            standard_percentile_word(o->percentiles[k], word, sizeof word);
            if (strcmp(word, p) == 0) {
                *out = st->p[k];
                return true;
            }
        }
        return false;
    }
    case METRIC_FN:
        return m->get(s, out);
    }
    return false;
}

bool metric_value(const metric *m, const analysis_summary *s, double *out)
{
    *out = 0;
    return s && !is_family(m) && read_field(m, s, NULL, out);
}

bool metric_sampled(const metric *m, const analysis_summary *s)
{
    if (!s || m->count == 0)
        return s != NULL;
    int64_t n;
    memcpy(&n, (const char *)s + m->count, sizeof n);
    return n > 0;
}

void metric_key(const metric *m, char *buf, size_t size)
{
    if (m->vllm) {
        snprintf(buf, size, "%s", m->vllm);
        return;
    }
    snprintf(buf, size, "%s%s", m->id, m->unit == METRIC_MS ? "_ms" : "");
    for (char *c = buf; *c; c++)
        if (*c == '.')
            *c = '_';
}

json_t *metric_vllm_result(const analysis_summary *s)
{
    json_t *root = json_object();
    if (!root)
        return NULL;
    const standard_options *o = &s->standard.opt;
    for (int i = 0; i < N_ROWS; i++) {
        const metric *m = &ROWS[i];
        if (!m->vllm)
            continue;
        const int n = is_family(m) ? o->n_percentiles : 1;
        for (int k = 0; k < n; k++) {
            char p[16] = "", key[64];
            if (is_family(m))
                standard_percentile_word(o->percentiles[k], p, sizeof p);
            expand(m->vllm, p, key, sizeof key);
            double v;
            json_object_set_new(root, key,
                                !read_field(m, s, p, &v)  ? json_null()
                                : m->unit == METRIC_COUNT ? json_integer((json_int_t)v)
                                                          : json_real(v));
        }
    }
    return root;
}

/* ---- names as people write them ---------------------------------------------------------------- */

/* The ids a rule can name (rows summary.json holds), comma-separated, whole names only. */
static void rule_names(char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_ROWS && len < size; i++) {
        if (!ROWS[i].json)
            continue;
        if (len + strlen(ROWS[i].id) + 8 >= size) {
            snprintf(buf + len, size - len, ", ...");
            break;
        }
        int n = snprintf(buf + len, size - len, "%s%s", len ? ", " : "", ROWS[i].id);
        if (n < 0)
            break;
        len += (size_t)n;
    }
}

/* A percentile as a family's id may carry it: digits with at most one '.', in (0, 100]; its
 * word as vLLM spells it into p. */
static bool percentile_word(const char *text, size_t len, char *p, size_t size)
{
    char digits[16];
    if (len == 0 || len >= sizeof digits)
        return false;
    int dots = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '.')
            dots++;
        else if (!isdigit((unsigned char)text[i]))
            return false;
    }
    if (dots > 1 || text[0] == '.' || text[len - 1] == '.')
        return false;
    memcpy(digits, text, len);
    digits[len] = '\0';
    const double v = strtod(digits, NULL);
    if (!(v > 0 && v <= 100))
        return false;
    standard_percentile_word(v, p, size);
    return true;
}

/* name as a family's id: tpot.p99 for tpot.p{P}. */
static bool match_family(const metric *m, const char *name, metric_ref *out)
{
    const char *at = strstr(m->id, PLACEHOLDER);
    const size_t pre = (size_t)(at - m->id), post = strlen(at + strlen(PLACEHOLDER));
    const size_t n = strlen(name);
    if (n <= pre + post || strncmp(name, m->id, pre) != 0 ||
        strcmp(name + n - post, at + strlen(PLACEHOLDER)) != 0)
        return false;
    if (!percentile_word(name + pre, n - pre - post, out->p, sizeof out->p))
        return false;
    out->row = m;
    expand(m->id, out->p, out->id, sizeof out->id);
    return true;
}

int metric_parse(const char *name, metric_ref *out, char *err)
{
    memset(out, 0, sizeof *out);
    /* "itl.p99.9" is how people write the 99.9th percentile: an alias of itl.p999. */
    char alias[64] = "";
    const size_t n = strlen(name);
    if (n > 6 && n < sizeof alias && strcmp(name + n - 6, ".p99.9") == 0)
        snprintf(alias, sizeof alias, "%.*s.p999", (int)(n - 6), name);
    for (int i = 0; i < N_ROWS && !out->row; i++) {
        const metric *m = &ROWS[i];
        if (is_family(m))
            match_family(m, name, out);
        else if (strcmp(name, m->id) == 0 || (alias[0] && strcmp(alias, m->id) == 0))
            out->row = m;
    }
    if (out->row && !out->row->json)
        return err_set(err, "'%s' is not in summary.json: no rule can judge it", name);
    if (!out->row) {
        char names[140];
        rule_names(names, sizeof names);
        return err_set(err, "no metric '%s' (%s: docs/reference/metrics.md)", name, names);
    }
    if (!is_family(out->row))
        snprintf(out->id, sizeof out->id, "%s", out->row->id);
    return 0;
}

bool metric_json_value(const metric_ref *r, const json_t *summary, double *out)
{
    /* The path's parts hold no '.', but a family's percentile may ("p99.9"): split first,
     * then expand. */
    const char *path = r->row->json;
    const json_t *at = summary;
    while (at && *path) {
        const char *dot = strchr(path, '.');
        const size_t len = dot ? (size_t)(dot - path) : strlen(path);
        char part[64], key[64];
        if (len >= sizeof part)
            return false;
        memcpy(part, path, len);
        part[len] = '\0';
        expand(part, r->p, key, sizeof key);
        at = json_object_get(at, key);
        path += len + (dot ? 1 : 0);
    }
    if (!json_is_number(at))
        return false;
    *out = json_number_value(at);
    return true;
}

/* ---- the list and the reference ------------------------------------------------------------ */

static const char *unit_name(metric_unit u)
{
    static const char *const names[] = {"ms", "share", "count", "number"};
    return names[u];
}

void metric_print_list(FILE *out)
{
    for (int i = 0; i < N_ROWS; i++)
        fprintf(out, "  %-26s %-7s %s%s\n", ROWS[i].id, unit_name(ROWS[i].unit), ROWS[i].help,
                ROWS[i].json ? "" : " (not in summary.json: no --fail-if rule)");
}

void metric_print_markdown(FILE *out)
{
    fputs("# Metrics\n\n"
          "Generated from the table in `src/analysis/metric.c` by `stallscope metrics --markdown`:\n"
          "do not edit it here. Regenerate it with\n"
          "`build/stallscope metrics --markdown > docs/reference/metrics.md`;\n"
          "`tests/integration/metrics_doc.sh` fails while the two differ.\n\n"
          "Every figure stallscope reports, one row each, with all its names:\n\n"
          "- **id**: what `--fail-if` (`run`, `sim`, `report`) and `tune --slo` take, e.g.\n"
          "  `--fail-if 'itl.max>200ms,stalls>0'`; `X.p99.9` is accepted for `X.p999`. A row\n"
          "  without a summary.json path cannot be judged by a rule.\n"
          "- **summary.json**: the figure's path in each run's `summary.json` (and under\n"
          "  `baseline` and `interference` in `comparison.json`).\n"
          "- **vLLM key**: its key in `--save-result FILE`, which uses `vllm bench serve\n"
          "  --save-result`'s names; only figures with vLLM's meaning have one.\n"
          "- **label**: its name in the terminal table and in `report.html`, for the figures\n"
          "  they show (the stall row adds its threshold: `stalls (>241 ms)`).\n"
          "- **unit**: `ms` (a rule's value needs its unit: `200ms`, `1.5s`), `share` (a\n"
          "  fraction: `0.99` or `99%`), `count` or `number` (plain numbers).\n\n"
          "`{P}` stands for each percentile of `--metric-percentiles` (default 50, 90, 99,\n"
          "99.9), written as vLLM writes it: `tpot.p99`, `metrics.all.tpot_ms.p99`,\n"
          "`p99_tpot_ms`; `tpot.p99.9`, `p99.9_tpot_ms`. A rule on a percentile the run did not\n"
          "compute fails, as does any rule on a figure the run's summary lacks.\n\n"
          "Two kinds of gap and TTFT: `itl.mean` ... `itl.count` and `ttft.p50` ... `ttft.max`\n"
          "are the stall analysis' (the background streams' gaps and first tokens,\n"
          "nearest-rank percentiles); `itl.all.*` and `ttft.all.*` are vLLM's (every\n"
          "request's gaps, the completed requests' first tokens, percentiles interpolated).\n"
          "So `itl.p999` has no vLLM key, and vLLM's `p99.9_itl_ms` is `itl.all.p{P}`.\n\n"
          "`tune.json` names a figure by its vLLM key, or else by its id with `_` for `.` and\n"
          "`_ms` after a time: `output_throughput`, `ttft_p99_ms`, `itl_p999_ms`.\n\n"
          "| id | summary.json | vLLM key | label | unit | what |\n"
          "| --- | --- | --- | --- | --- | --- |\n",
          out);
    for (int i = 0; i < N_ROWS; i++) {
        const metric *m = &ROWS[i];
        fprintf(out, "| `%s` | %s%s%s | %s%s%s | %s | %s | %s |\n", m->id, m->json ? "`" : "",
                m->json ? m->json : "—", m->json ? "`" : "", m->vllm ? "`" : "",
                m->vllm ? m->vllm : "—", m->vllm ? "`" : "", m->label, unit_name(m->unit),
                m->help);
    }
}
