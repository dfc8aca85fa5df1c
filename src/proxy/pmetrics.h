/* pmetrics — what the proxy counts, and its Prometheus text exposition (format 0.0.4) for
 * the admin port's GET /metrics. Every series carries the label upstream="NAME"; the names,
 * types and buckets are docs/reference/proxy-metrics.md's. Single-threaded: the proxy's loop
 * owns it. */
#ifndef STALLSCOPE_PROXY_PMETRICS_H
#define STALLSCOPE_PROXY_PMETRICS_H
#include <stdint.h>

#include "common/buf.h"
#include "proxy/observe.h"

#define PMET_MAX_BUCKETS 20
#define PMET_MAX_CODES 32

typedef struct pmet_hist {
    const double *le; /* upper bounds, ascending; +Inf implied */
    int n;
    int64_t bucket[PMET_MAX_BUCKETS + 1]; /* per bucket (not cumulative); [n]: above the last */
    double sum;
    int64_t count;
} pmet_hist;

typedef struct pmetrics {
    pmet_hist itl, ttft, prompt, culprit_prompt, forward_delay;
    int64_t stalls[POBS_N_CAUSES];
    double stalled_s;
    int64_t in_flight; /* observed streams open */
    int64_t tokens;    /* token events observed */
    int64_t requests;  /* requests forwarded (all paths) */
    int code[PMET_MAX_CODES];
    int64_t code_n[PMET_MAX_CODES];
    int n_codes;
    int64_t code_other; /* statuses past PMET_MAX_CODES distinct ones */
    double threshold_s;
    int64_t client_aborts;   /* clients that left mid-answer (the upstream request aborted) */
    int64_t upstream_errors; /* requests the upstream could not answer (the proxy's 502/504) */
    int64_t downstream_conns;
    int64_t prompt_estimated; /* observed requests whose prompt length the server never said:
                                 estimated from the body */
} pmetrics;

void pmet_init(pmetrics *m);
void pmet_observe(pmet_hist *h, double v);
/* One forwarded request's status (the upstream's, or the proxy's own 502/504). */
void pmet_count_code(pmetrics *m, int code);
/* The exposition for upstream (a label value: escaped here). 0, or -1 out of memory. */
int pmet_write(const pmetrics *m, const char *upstream, buf *out);

#endif
