#include "server/metrics.h"

#include <stdio.h>
#include <string.h>

/* vLLM's buckets (vllm/v1/metrics/loggers.py). */
static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                     0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                     20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double itl_bounds[] = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,
                                    0.3,  0.4,   0.5,  0.75,  1.0,  2.5,  5.0,
                                    7.5,  10.0,  20.0, 40.0,  80.0};
static const double iteration_bounds[] = {1,   8,    16,   32,   64,   128,  256,
                                          512, 1024, 2048, 4096, 8192, 16384};

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void hist_init(metrics_hist *h, const double *bounds, int n)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n_bounds = n < METRICS_MAX_BUCKETS ? n : METRICS_MAX_BUCKETS;
}

void metrics_init(metrics_state *m)
{
    memset(m, 0, sizeof *m);
    hist_init(&m->ttft, ttft_bounds, N(ttft_bounds));
    hist_init(&m->itl, itl_bounds, N(itl_bounds));
    hist_init(&m->iteration_tokens, iteration_bounds, N(iteration_bounds));
}

void metrics_hist_observe(metrics_hist *h, double value)
{
    int i = 0;
    while (i < h->n_bounds && value > h->bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += value;
}

static void header(buf *out, const char *name, const char *type, const char *help)
{
    buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{model_name="m"} value */
static void sample(buf *out, const char *name, const char *suffix, const char *label,
                   double value)
{
    buf_printf(out, "%s%s{%s} %.17g\n", name, suffix, label, value);
}

static void gauge(buf *out, const char *name, const char *help, const char *label,
                  double value)
{
    header(out, name, "gauge", help);
    sample(out, name, "", label, value);
}

/* A counter's samples end in _total, and in the 0.0.4 text format # HELP and # TYPE name
 * the metric exactly as its samples spell it (prometheus_client's 0.0.4 output, and so
 * vLLM's: "# TYPE vllm:prompt_tokens_total counter"). Naming the family without _total is
 * OpenMetrics' rule, and a strict 0.0.4 parser (Go's expfmt) then sees an empty counter
 * and an untyped _total metric. */
static void counter(buf *out, const char *base, const char *help, const char *label,
                    double value)
{
    char name[128];
    snprintf(name, sizeof name, "%s_total", base);
    header(out, name, "counter", help);
    sample(out, name, "", label, value);
}

static void histogram(buf *out, const char *name, const char *help, const char *label,
                      const metrics_hist *h)
{
    header(out, name, "histogram", help);
    uint64_t cumulative = 0;
    for (int i = 0; i <= h->n_bounds; i++) {
        cumulative += h->counts[i];
        if (i < h->n_bounds)
            buf_printf(out, "%s_bucket{%s,le=\"%g\"} %.17g\n", name, label, h->bounds[i],
                       (double)cumulative);
        else
            buf_printf(out, "%s_bucket{%s,le=\"+Inf\"} %.17g\n", name, label, (double)cumulative);
    }
    sample(out, name, "_count", label, (double)h->count);
    sample(out, name, "_sum", label, h->sum);
}

void metrics_format(const metrics_state *m, const char *model_name, buf *out)
{
    char label[160];
    /* Model names come from our own command line; quotes and backslashes are escaped as
     * the exposition format asks. */
    size_t at = (size_t)snprintf(label, sizeof label, "model_name=\"");
    for (const char *p = model_name; *p && at + 4 < sizeof label; p++) {
        if (*p == '"' || *p == '\\')
            label[at++] = '\\';
        label[at++] = *p == '\n' ? ' ' : *p;
    }
    label[at++] = '"';
    label[at] = '\0';

    gauge(out, "vllm:num_requests_running", "Number of requests in model execution batches.",
          label, (double)m->running);
    gauge(out, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", label,
          (double)m->waiting);
    gauge(out, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", label,
          m->kv_usage);
    counter(out, "vllm:num_preemptions", "Cumulative number of preemptions from the engine.",
            label, (double)m->preemptions);
    counter(out, "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.", label,
            (double)m->prefix_queries);
    counter(out, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            label, (double)m->prefix_hits);
    counter(out, "vllm:prompt_tokens", "Number of prefill tokens processed.", label,
            (double)m->prompt_tokens);
    counter(out, "vllm:generation_tokens", "Number of generation tokens processed.", label,
            (double)m->generation_tokens);
    histogram(out, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
              label, &m->iteration_tokens);
    histogram(out, "vllm:time_to_first_token_seconds",
              "Histogram of time to first token in seconds.", label, &m->ttft);
    histogram(out, "vllm:inter_token_latency_seconds",
              "Histogram of inter-token latency in seconds.", label, &m->itl);
    gauge(out, "stallscope_kv_cells_occupied",
          "KV cells in a unified cache (--kv-layout unified; 0 under paged).", label,
          (double)m->kv_cells_occupied);
    counter(out, "stallscope_engine_steps", "Engine steps run.", label, (double)m->steps);
    counter(out, "stallscope_engine_slips",
            "Times the emulated schedule fell more than 2 ms behind and restarted from now.",
            label, (double)m->slips);
    gauge(out, "stallscope_engine_realtime", "1 when the engine thread runs SCHED_FIFO.", label,
          m->realtime ? 1 : 0);
    gauge(out, "stallscope_requests_open",
          "Generation requests the HTTP side holds (queued, running or being written).", label,
          (double)m->requests_open);
    counter(out, "stallscope_requests_rejected_queue_full",
            "Requests answered 429 because --max-waiting requests were already waiting.", label,
            (double)m->rejected_queue_full);
    gauge(out, "stallscope_http_connections", "Client connections open.", label,
          (double)m->http_connections);
    counter(out, "stallscope_http_request_timeouts",
            "Connections shut down because a request did not arrive whole within the read "
            "timeout (slowloris).",
            label, (double)m->read_timeouts);
    counter(out, "stallscope_http_write_stalls",
            "Connections shut down because the client left its reply unread for the read "
            "timeout.",
            label, (double)m->write_stalls);
    gauge(out, "stallscope_heap_bytes",
          "Bytes the server holds from its memory allocator (a leak check: back to its level "
          "after the same load).",
          label, (double)m->heap_bytes);
}
