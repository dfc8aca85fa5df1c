/* gate — `--fail-if 'itl.max>200ms,stalls>0'`: rules over a run's summary for a CI job.
 *
 * A rule is METRIC OP VALUE, rules separated by commas; OP is one of > >= < <= == !=. A rule
 * that holds is a failure (the run "fails if" it). METRIC names a figure of summary.json by
 * its id in the metric table (metric.h: metric_parse; `stallscope metrics` lists them with
 * their units, docs/reference/metrics.md); VALUE is a duration with its unit for times
 * (200ms, 1.5s, 900us), a fraction or a percentage for shares (0.99, 99%), a plain number
 * for counts and ratios. The rules are parsed before a run (bad input: exit 2) and
 * evaluated after it on the summary JSON (analysis_summary_to_json or summary.json).
 * "itl.p99.9" is accepted for itl.p999 (any METRIC.p99.9 for METRIC.p999). */
#ifndef STALLSCOPE_GATE_H
#define STALLSCOPE_GATE_H
#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "analysis/metric.h"

#define GATE_MAX_RULES 32
#define GATE_EXIT_FAILED 99 /* k6's convention: the run completed, a rule failed */

typedef enum { GATE_GT, GATE_GE, GATE_LT, GATE_LE, GATE_EQ, GATE_NE } gate_op;

typedef struct gate_rule {
    metric_ref metric; /* the figure, as the rule named it */
    gate_op op;
    double value;  /* in the metric's unit (ms for times, a fraction for shares) */
    char text[96]; /* the rule as written, trimmed */
} gate_rule;

typedef struct gate_rules {
    gate_rule rule[GATE_MAX_RULES];
    int n;
} gate_rules;

/* Parse "r1,r2,...". 0, or -1 with err naming the bad rule (and the metrics, for an unknown
 * name). An empty text gives no rules. */
int gate_parse(const char *text, gate_rules *out, char *err);

/* Evaluate every rule on a summary (the JSON of analysis_summary_to_json) and print one line
 * per rule, "fail-if itl.max > 200 ms: 130.0 ms  PASS", to out (may be NULL). Returns the
 * number of rules that failed; a metric the summary lacks fails its rule (said so). */
int gate_eval(const gate_rules *rules, const json_t *summary, FILE *out);

/* One rule on its own (tune's SLOs are rules that must hold): its metric's name
 * ("itl.p999"), its operator ("<"), whether the metric is a time in ms, its value in a
 * summary (false when the summary lacks it), whether it holds for a value, and a value in
 * the metric's unit as gate_eval prints it ("2412.0 ms"). */
const char *gate_rule_metric(const gate_rule *r);
const char *gate_rule_op(const gate_rule *r);
bool gate_rule_is_time(const gate_rule *r);
bool gate_rule_value(const gate_rule *r, const json_t *summary, double *out);
bool gate_rule_holds(const gate_rule *r, double value);
void gate_rule_format(const gate_rule *r, double value, char *buf, size_t size);

#endif
