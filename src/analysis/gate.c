/* gate — --fail-if rules over a summary (gate.h). */
#include "analysis/gate.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/metric.h"
#include "common/err.h"
#include "common/units.h"

static const char *const OPS[] = {">", ">=", "<", "<=", "==", "!="};

/* The value in the metric's unit: a duration (with its unit) -> ms, "99%" -> 0.99. */
static int parse_value(const metric_ref *m, const char *text, double *out, char *err)
{
    char e[ERR_LEN];
    const metric_unit unit = m->row->unit;
    if (unit == METRIC_MS) {
        int64_t ns;
        if (units_parse_duration_ns(text, &ns, e) != 0)
            return err_set(err, "'%s': %s is a time: give its unit (200ms, 1.5s)", text, m->id);
        *out = (double)ns / 1e6;
        return 0;
    }
    char *end;
    double v = strtod(text, &end);
    if (end == text || !isfinite(v))
        return err_set(err, "'%s' is not a number", text);
    if (unit == METRIC_SHARE && *end == '%') {
        v /= 100;
        end++;
    }
    if (*end)
        return err_set(err, "'%s' is not a number%s", text,
                       unit == METRIC_SHARE ? " or a percentage" : "");
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
    char e[ERR_LEN];
    if (metric_parse(name, &r->metric, e) != 0)
        return err_set(err, "'%s': %s", text, e);
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
    return parse_value(&r->metric, p, &r->value, err);
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

static void format_value(const metric_ref *m, double v, char *buf, size_t size)
{
    if (m->row->unit == METRIC_MS)
        snprintf(buf, size, "%.1f ms", v);
    else if (m->row->unit == METRIC_SHARE)
        snprintf(buf, size, "%.4g (%.2f %%)", v, v * 100);
    else
        snprintf(buf, size, "%.6g", v);
}

int gate_eval(const gate_rules *rules, const json_t *summary, FILE *out)
{
    int failed = 0;
    for (int i = 0; i < rules->n; i++) {
        const gate_rule *r = &rules->rule[i];
        const metric_ref *m = &r->metric;
        double v;
        char rule[64], have[48];
        format_value(m, r->value, have, sizeof have);
        snprintf(rule, sizeof rule, "%s %s %s", m->id, OPS[r->op], have);
        if (!metric_json_value(m, summary, &v)) {
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
    return r->metric.id;
}

const char *gate_rule_op(const gate_rule *r)
{
    return OPS[r->op];
}

bool gate_rule_is_time(const gate_rule *r)
{
    return r->metric.row->unit == METRIC_MS;
}

bool gate_rule_value(const gate_rule *r, const json_t *summary, double *out)
{
    return metric_json_value(&r->metric, summary, out);
}

bool gate_rule_holds(const gate_rule *r, double value)
{
    return holds(r->op, value, r->value);
}

void gate_rule_format(const gate_rule *r, double value, char *buf, size_t size)
{
    format_value(&r->metric, value, buf, size);
}
