/* standard — the metrics every serving benchmark prints, with `vllm bench serve`'s meanings:
 * per request TTFT (send to first token), TPOT ((E2E - TTFT) / (output tokens - 1), requests
 * with more than one output token), E2E latency (send to last byte), and ITL (every gap
 * between two token events of one request in the run, whatever became of the request); request, output and total token throughput over
 * the run's duration; goodput (the requests meeting every SLO given). For all requests, the
 * background ones and the injected ones apart.
 *
 * A request counts when it was sent at or after t = 0 (a warm-up's answers in flight give
 * gaps, not a TTFT) and ended without an error ("completed"); "failed" counts the ones that
 * ended with one, "unfinished" the ones the run's end cut (finish_reason "abort" or none:
 * vLLM's benchmark waits for them, a timed run cannot), left out of every figure. Percentiles interpolate linearly between order statistics (numpy's default,
 * what vLLM reports), unlike the stall analysis' nearest rank; std is the population one. */
#ifndef STALLSCOPE_STANDARD_H
#define STALLSCOPE_STANDARD_H
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "common/tokenlog.h"

#define STANDARD_MAX_PERCENTILES 8

typedef struct standard_options {
    double percentiles[STANDARD_MAX_PERCENTILES]; /* in (0, 100]; n 0: 50, 90, 99, 99.9 */
    int n_percentiles;
    /* SLOs in ms, 0: none. goodput counts a request only when it meets every one given: TTFT,
     * TPOT, E2E, and (ours, not vLLM's) its longest gap. */
    double slo_ttft_ms, slo_tpot_ms, slo_e2el_ms, slo_itl_ms;
} standard_options;

typedef struct standard_stat {
    int64_t count;
    double mean, median, std, max;
    double p[STANDARD_MAX_PERCENTILES]; /* at standard_options.percentiles */
} standard_stat;

typedef struct standard_class {
    int64_t completed, failed, unfinished;
    int64_t input_tokens, output_tokens; /* of the completed requests */
    double request_throughput;           /* completed / duration, req/s */
    double output_throughput;            /* output tokens / duration, tok/s */
    double total_token_throughput;       /* (input + output) / duration */
    bool has_goodput;                    /* an SLO was given */
    int64_t good;                        /* completed requests meeting every SLO */
    double request_goodput;              /* good / duration, req/s */
    double goodput;                      /* good / completed: the SLO attainment */
    standard_stat ttft_ms, tpot_ms, itl_ms, e2el_ms;
} standard_class;

typedef struct standard_metrics {
    standard_options opt; /* as used (the default percentiles filled in) */
    double duration_s;
    bool itl_histogram;   /* ITL percentiles from a histogram (a long run): within 0.39 % */
    standard_class all, background, injected;
} standard_metrics;

/* The request counts as completed (the rule above, the one --save-result's peaks and
 * per-request arrays use too): sent at or after t = 0, no error, a first token, an end and a
 * finish reason other than "abort". */
bool standard_request_completed(const tokenlog_request *r);

/* The default options: percentiles 50, 90, 99, 99.9; no SLO. */
void standard_defaults(standard_options *opt);
/* "50,90,99,99.9" into opt. 0, or -1 with err. */
int standard_parse_percentiles(const char *text, standard_options *opt, char *err);
/* vLLM's --goodput syntax, "ttft:2000 tpot:100" (space or comma separated, values in ms; keys
 * ttft, tpot, e2el, itl). 0, or -1 with err. */
int standard_parse_goodput(const char *text, standard_options *opt, char *err);

/* Streaming: rows and events as they come (events in time order), in bounded memory: ITL
 * gaps held up to exact_max per class (0: no limit), a histogram after. end reads the
 * requests' final rows (rows: requests only needed), fills out and frees the accumulator. */
typedef struct standard_acc standard_acc;
standard_acc *standard_acc_begin(const standard_options *opt, int64_t exact_max, char *err);
int standard_acc_event(standard_acc *a, const tokenlog_event *ev, char *err);
/* The same for evs[0..n) in order (runs of equal gaps are added at once, to the same sums). */
int standard_acc_events(standard_acc *a, const tokenlog_event *evs, int64_t n, char *err);
int standard_acc_end(standard_acc *a, const tokenlog *rows, double duration_s,
                     standard_metrics *out, char *err);
void standard_acc_free(standard_acc *a);

/* The metrics of log over duration_s (opt NULL: the defaults). 0, or -1 with err (memory). */
int standard_compute(const tokenlog *log, const standard_options *opt, double duration_s,
                     standard_metrics *out, char *err);

/* summary.json's "metrics": {"percentiles": [...], "slo_ms": {...}, "all": {...},
 * "background": {...}, "injected": {...}}. */
json_t *standard_to_json(const standard_metrics *m);
/* A percentile as vLLM writes it in a key: "99" for 99, "99.9" for 99.9 (its p_word). The
 * vLLM result file (--save-result) is built from the metric table: metric.h. */
void standard_percentile_word(double p, char *buf, size_t size);

#endif
