/* gate — --fail-if rules over a summary (gate.h). */
#include "analysis/gate.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/units.h"

typedef enum { UNIT_MS, UNIT_SHARE, UNIT_NUMBER } unit_kind;

typedef struct metric {
    const char *name;
    const char *path; /* dotted path in the summary JSON */
    unit_kind unit;
    const char *help;
} metric;

static const metric METRICS[] = {
    {"itl.mean", "itl_ms.mean", UNIT_MS, "mean gap between two tokens of one stream"},
    {"itl.p50", "itl_ms.p50", UNIT_MS, "median gap"},
    {"itl.p90", "itl_ms.p90", UNIT_MS, "90th percentile gap"},
    {"itl.p99", "itl_ms.p99", UNIT_MS, "99th percentile gap"},
    {"itl.p999", "itl_ms.p999", UNIT_MS, "99.9th percentile gap"},
    {"itl.max", "itl_ms.max", UNIT_MS, "the longest gap: the stall users felt most"},
    {"ttft.p50", "ttft_ms.p50", UNIT_MS, "median time to first token (background requests)"},
    {"ttft.p99", "ttft_ms.p99", UNIT_MS, "99th percentile time to first token"},
    {"ttft.max", "ttft_ms.max", UNIT_MS, "the longest time to first token"},
    {"stalls", "stalls.count", UNIT_NUMBER, "gaps above the stall threshold"},
    {"stalls.aligned", "stalls.aligned", UNIT_NUMBER, "stalls during an injection's prefill"},
    {"stalls.fraction", "stalls.fraction_of_gaps", UNIT_SHARE, "share of gaps that are stalls"},
    {"stalls.time", "stalls.stalled_time_fraction", UNIT_SHARE,
     "share of stream time spent frozen"},
    {"stalls.prefill", "attribution.by_cause.prefill.stalls", UNIT_NUMBER,
     "stalls caused by a prefill"},
    {"stalls.server", "attribution.by_cause.server.stalls", UNIT_NUMBER,
     "stalls where the server's step overran"},
    {"stalls.client", "attribution.by_cause.client.stalls", UNIT_NUMBER,
     "stalls where the client read late"},
    {"stalls.unexplained", "attribution.by_cause.unexplained.stalls", UNIT_NUMBER,
     "stalls without a cause"},
    {"stalls.per_min", "attribution.stalls_per_min", UNIT_NUMBER, "stalls per minute"},
    {"frozen_user_s.per_hour", "attribution.frozen_user_s_per_hour", UNIT_NUMBER,
     "user-seconds frozen per hour of run"},
    {"requests.stalled_100ms", "attribution.requests_stalled_100ms", UNIT_SHARE,
     "share of requests with a gap over 100 ms"},
    {"requests.stalled_1s", "attribution.requests_stalled_1s", UNIT_SHARE,
     "share of requests with a gap over 1 s"},
    {"spike_ratio", "spike_ratio", UNIT_NUMBER, "max gap / median gap"},
    {"tpot.median", "metrics.all.tpot_ms.median", UNIT_MS, "median time per output token"},
    {"tpot.p99", "metrics.all.tpot_ms.p99", UNIT_MS,
     "99th percentile time per output token (with 99 in --metric-percentiles)"},
    {"e2el.median", "metrics.all.e2el_ms.median", UNIT_MS, "median end-to-end latency"},
    {"e2el.p99", "metrics.all.e2el_ms.p99", UNIT_MS, "99th percentile end-to-end latency"},
    {"goodput", "metrics.all.goodput", UNIT_SHARE,
     "share of completed requests meeting every --goodput SLO"},
    {"goodput.background", "metrics.background.goodput", UNIT_SHARE,
     "the same over the background requests"},
    {"throughput.requests", "metrics.all.request_throughput", UNIT_NUMBER,
     "completed requests per second"},
    {"throughput.output", "metrics.all.output_throughput", UNIT_NUMBER,
     "output tokens per second of the completed requests (vLLM's)"},
    {"throughput.streamed", "streamed_throughput", UNIT_NUMBER,
     "tokens streamed per second, every request's"},
    {"throughput.output_per_gpu", "per_gpu.output_throughput", UNIT_NUMBER,
     "output tokens per second per GPU (simulator: 1 GPU, or P + D with --disaggregate)"},
    {"goodput.requests_per_gpu", "per_gpu.request_goodput", UNIT_NUMBER,
     "requests meeting every --goodput SLO per second per GPU (simulator)"},
    {"errors", "errors", UNIT_NUMBER, "failed requests"},
    {"protocol_violations", "protocol_violations", UNIT_NUMBER,
     "server answers that broke the protocol"},
};
#define N_METRICS ((int)(sizeof METRICS / sizeof METRICS[0]))

static const char *const OPS[] = {">", ">=", "<", "<=", "==", "!="};

void gate_print_metrics(FILE *out)
{
    static const char *const units[] = {"ms", "share", "number"};
    for (int i = 0; i < N_METRICS; i++)
        fprintf(out, "  %-24s %-7s %s\n", METRICS[i].name, units[METRICS[i].unit], METRICS[i].help);
}

static void metric_names(char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_METRICS && len < size; i++) {
        if (len + strlen(METRICS[i].name) + 8 >= size) { /* whole names only */
            snprintf(buf + len, size - len, ", ...");
            break;
        }
        int n = snprintf(buf + len, size - len, "%s%s", i ? ", " : "", METRICS[i].name);
        if (n < 0)
            break;
        len += (size_t)n;
    }
}

/* The value in the metric's unit: a duration (with its unit) -> ms, "99%" -> 0.99. */
static int parse_value(const metric *m, const char *text, double *out, char *err)
{
    char e[ERR_LEN];
    if (m->unit == UNIT_MS) {
        int64_t ns;
        if (units_parse_duration_ns(text, &ns, e) != 0)
            return err_set(err, "'%s': %s is a time: give its unit (200ms, 1.5s)", text, m->name);
        *out = (double)ns / 1e6;
        return 0;
    }
    char *end;
    double v = strtod(text, &end);
    if (end == text || !isfinite(v))
        return err_set(err, "'%s' is not a number", text);
    if (m->unit == UNIT_SHARE && *end == '%') {
        v /= 100;
        end++;
    }
    if (*end)
        return err_set(err, "'%s' is not a number%s", text,
                       m->unit == UNIT_SHARE ? " or a percentage" : "");
    *out = v;
    return 0;
}

static int parse_rule(const char *text, gate_rule *r, char *err)
{
    snprintf(r->text, sizeof r->text, "%s", text);
    /* METRIC: letters, digits, '.', '_'; then the operator; then the value. */
    size_t k = 0;
    while (text[k] && (isalnum((unsigned char)text[k]) || text[k] == '.' || text[k] == '_'))
        k++;
    char name[64];
    if (k == 0 || k >= sizeof name)
        return err_set(err, "'%s' is not METRIC OP VALUE (e.g. itl.max>200ms)", text);
    memcpy(name, text, k);
    name[k] = '\0';
    /* "itl.p99.9" is how people write the 99.9th percentile: an alias of itl.p999. */
    size_t n = strlen(name);
    if (n > 6 && strcmp(name + n - 6, ".p99.9") == 0)
        memmove(name + n - 2, name + n - 1, 2);
    r->metric = -1;
    for (int i = 0; i < N_METRICS; i++)
        if (strcmp(name, METRICS[i].name) == 0)
            r->metric = i;
    if (r->metric < 0) {
        char names[140];
        metric_names(names, sizeof names);
        return err_set(err, "'%s': no metric '%s' (%s: docs/report.md)", text, name, names);
    }
    const char *p = text + k;
    while (*p == ' ')
        p++;
    int op = -1;
    for (int i = 0; i < (int)(sizeof OPS / sizeof OPS[0]); i++)
        if (strncmp(p, OPS[i], strlen(OPS[i])) == 0 &&
            (op < 0 || strlen(OPS[i]) > strlen(OPS[op])))
            op = i;
    if (op < 0)
        return err_set(err, "'%s': no operator (> >= < <= == !=)", text);
    r->op = (gate_op)op;
    p += strlen(OPS[op]);
    while (*p == ' ')
        p++;
    return parse_value(&METRICS[r->metric], p, &r->value, err);
}

int gate_parse(const char *text, gate_rules *out, char *err)
{
    memset(out, 0, sizeof *out);
    const char *p = text;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len > 0 && (*p == ' ' || *p == '\t'))
            p++, len--;
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        char one[96];
        if (len == 0)
            return err_set(err, "an empty rule in '%s'", text);
        if (len >= sizeof one)
            return err_set(err, "a rule longer than %zu characters", sizeof one - 1);
        if (out->n >= GATE_MAX_RULES)
            return err_set(err, "more than %d rules", GATE_MAX_RULES);
        memcpy(one, p, len);
        one[len] = '\0';
        if (parse_rule(one, &out->rule[out->n], err) != 0)
            return -1;
        out->n++;
        p = comma ? comma + 1 : p + len;
    }
    return 0;
}

/* The number at a dotted path; false when absent or not a number. */
static bool lookup(const json_t *root, const char *path, double *out)
{
    char part[64];
    const json_t *at = root;
    while (at && *path) {
        const char *dot = strchr(path, '.');
        size_t len = dot ? (size_t)(dot - path) : strlen(path);
        if (len >= sizeof part)
            return false;
        memcpy(part, path, len);
        part[len] = '\0';
        at = json_object_get(at, part);
        path += len + (dot ? 1 : 0);
    }
    if (!json_is_number(at))
        return false;
    *out = json_number_value(at);
    return true;
}

static bool holds(gate_op op, double a, double b)
{
    switch (op) {
    case GATE_GT: return a > b;
    case GATE_GE: return a >= b;
    case GATE_LT: return a < b;
    case GATE_LE: return a <= b;
    case GATE_EQ: return a == b;
    case GATE_NE: return a != b;
    }
    return false;
}

static void format_value(const metric *m, double v, char *buf, size_t size)
{
    if (m->unit == UNIT_MS)
        snprintf(buf, size, "%.1f ms", v);
    else if (m->unit == UNIT_SHARE)
        snprintf(buf, size, "%.4g (%.2f %%)", v, v * 100);
    else
        snprintf(buf, size, "%.6g", v);
}

int gate_eval(const gate_rules *rules, const json_t *summary, FILE *out)
{
    int failed = 0;
    for (int i = 0; i < rules->n; i++) {
        const gate_rule *r = &rules->rule[i];
        const metric *m = &METRICS[r->metric];
        double v;
        char rule[64], have[48];
        format_value(m, r->value, have, sizeof have);
        snprintf(rule, sizeof rule, "%s %s %s", m->name, OPS[r->op], have);
        if (!lookup(summary, m->path, &v)) {
            failed++;
            if (out)
                fprintf(out, "fail-if %s: not in this run's summary  FAIL\n", rule);
            continue;
        }
        const bool fail = holds(r->op, v, r->value);
        failed += fail;
        format_value(m, v, have, sizeof have);
        if (out)
            fprintf(out, "fail-if %s: %s  %s\n", rule, have, fail ? "FAIL" : "PASS");
    }
    return failed;
}

const char *gate_rule_metric(const gate_rule *r)
{
    return METRICS[r->metric].name;
}

const char *gate_rule_op(const gate_rule *r)
{
    return OPS[r->op];
}

bool gate_rule_is_time(const gate_rule *r)
{
    return METRICS[r->metric].unit == UNIT_MS;
}

bool gate_rule_value(const gate_rule *r, const json_t *summary, double *out)
{
    return lookup(summary, METRICS[r->metric].path, out);
}

bool gate_rule_holds(const gate_rule *r, double value)
{
    return holds(r->op, value, r->value);
}

void gate_rule_format(const gate_rule *r, double value, char *buf, size_t size)
{
    format_value(&METRICS[r->metric], value, buf, size);
}
