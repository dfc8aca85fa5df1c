/* gate — `--fail-if 'itl.max>200ms,stalls>0'`: rules over a run's summary for a CI job.
 *
 * A rule is METRIC OP VALUE, rules separated by commas; OP is one of > >= < <= == !=. A rule
 * that holds is a failure (the run "fails if" it). METRIC names a figure of summary.json
 * (gate_print_metrics lists them with their units); VALUE is a duration with its unit for
 * times (200ms, 1.5s, 900us), a fraction or a percentage for shares (0.99, 99%), a plain
 * number for counts and ratios. The rules are parsed before a run (bad input: exit 2) and
 * evaluated after it on the summary JSON (analysis_summary_to_json or summary.json). */
#ifndef STALLSCOPE_GATE_H
#define STALLSCOPE_GATE_H
#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#define GATE_MAX_RULES 32
#define GATE_EXIT_FAILED 99 /* k6's convention: the run completed, a rule failed */

typedef enum { GATE_GT, GATE_GE, GATE_LT, GATE_LE, GATE_EQ, GATE_NE } gate_op;

typedef struct gate_rule {
    int metric;    /* index in the metric table */
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

/* "  itl.max  ms  the longest gap between two tokens of one stream" per metric. */
void gate_print_metrics(FILE *out);

#endif
