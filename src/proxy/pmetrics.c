/* pmetrics — see pmetrics.h. */
#include "proxy/pmetrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double itl_le[] = {0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2,
                                0.3,   0.5,  0.75, 1,    2,    5,     10};
static const double ttft_le[] = {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60};
static const double prompt_le[] = {128, 256, 512, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000};
static const double delay_le[] = {10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 5e-3, 25e-3};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void hist_init(pmet_hist *h, const double *le, int n)
{
    memset(h, 0, sizeof *h);
    h->le = le;
    h->n = n;
}

void pmet_init(pmetrics *m)
{
    memset(m, 0, sizeof *m);
    hist_init(&m->itl, itl_le, N_OF(itl_le));
    hist_init(&m->ttft, ttft_le, N_OF(ttft_le));
    hist_init(&m->prompt, prompt_le, N_OF(prompt_le));
    hist_init(&m->culprit_prompt, prompt_le, N_OF(prompt_le));
    hist_init(&m->forward_delay, delay_le, N_OF(delay_le));
}

void pmet_observe(pmet_hist *h, double v)
{
    int b = 0;
    while (b < h->n && v > h->le[b])
        b++;
    h->bucket[b]++;
    h->sum += v;
    h->count++;
}

void pmet_count_code(pmetrics *m, int code)
{
    m->requests++;
    for (int i = 0; i < m->n_codes; i++)
        if (m->code[i] == code) {
            m->code_n[i]++;
            return;
        }
    if (m->n_codes < PMET_MAX_CODES) {
        m->code[m->n_codes] = code;
        m->code_n[m->n_codes++] = 1;
    } else {
        m->code_other++;
    }
}

/* A sample's value, exactly: "%.9g" would round a counter past 10^9 (tokens_total after a
 * day or two of traffic, a histogram's sum of prompt tokens) to 9 digits, so it would move
 * in steps of 10, then 100, and rate() would see them. The shortest of 15 and 17 digits
 * that reads back as the same double. */
static void value(buf *out, double v)
{
    char text[40];
    snprintf(text, sizeof text, "%.15g", v);
    if (strtod(text, NULL) != v)
        snprintf(text, sizeof text, "%.17g", v);
    buf_append_str(out, text);
}

static void head(buf *out, const char *name, const char *type, const char *help)
{
    buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(buf *out, const char *name, const char *help, const pmet_hist *h,
                 const char *label)
{
    head(out, name, "histogram", help);
    int64_t cum = 0;
    for (int b = 0; b < h->n; b++) {
        cum += h->bucket[b];
        buf_printf(out, "%s_bucket{%s,le=\"%.9g\"} %lld\n", name, label, h->le[b], (long long)cum);
    }
    cum += h->bucket[h->n];
    buf_printf(out, "%s_bucket{%s,le=\"+Inf\"} %lld\n", name, label, (long long)cum);
    buf_printf(out, "%s_sum{%s} ", name, label);
    value(out, h->sum);
    buf_printf(out, "\n%s_count{%s} %lld\n", name, label, (long long)h->count);
}

static void scalar(buf *out, const char *name, const char *type, const char *help,
                   const char *label, double v)
{
    head(out, name, type, help);
    buf_printf(out, "%s{%s} ", name, label);
    value(out, v);
    buf_append(out, "\n", 1);
}

int pmet_write(const pmetrics *m, const char *upstream, buf *out)
{
    /* The label: "upstream=\"...\"" with \ " and newline escaped (the exposition's rule). */
    char label[600];
    size_t at = (size_t)snprintf(label, sizeof label, "upstream=\"");
    for (const char *p = upstream; *p && at + 4 < sizeof label; p++) {
        if (*p == '\\' || *p == '"') {
            label[at++] = '\\';
            label[at++] = *p;
        } else if (*p == '\n') {
            label[at++] = '\\';
            label[at++] = 'n';
        } else {
            label[at++] = *p;
        }
    }
    label[at++] = '"';
    label[at] = '\0';

    hist(out, "stallscope_proxy_itl_seconds",
         "Gaps between consecutive token events of every observed stream.", &m->itl, label);
    hist(out, "stallscope_proxy_ttft_seconds",
         "Time from the request sent upstream to its first token.", &m->ttft, label);
    head(out, "stallscope_proxy_stalls_total", "counter",
         "Stalls (a gap above the stall threshold) by cause: prefill when another request's "
         "long wait for its first token overlapped the gap.");
    for (int c = 0; c < POBS_N_CAUSES; c++)
        buf_printf(out, "stallscope_proxy_stalls_total{%s,cause=\"%s\"} %lld\n", label,
                   pobs_cause_name(c), (long long)m->stalls[c]);
    scalar(out, "stallscope_proxy_stalled_seconds_total", "counter",
           "Sum of the stalls' gaps: user-seconds frozen.", label, m->stalled_s);
    hist(out, "stallscope_proxy_prompt_tokens",
         "Prompt tokens of every observed request (usage, else estimated from the body).",
         &m->prompt, label);
    hist(out, "stallscope_proxy_culprit_prompt_tokens",
         "Prompt tokens of each request named the culprit of a stall (once per request).",
         &m->culprit_prompt, label);
    scalar(out, "stallscope_proxy_streams_in_flight", "gauge", "Observed streams open now.",
           label, (double)m->in_flight);
    head(out, "stallscope_proxy_requests_total", "counter",
         "Requests forwarded, by the upstream's status (502/504: the proxy answered for an "
         "upstream it could not reach).");
    for (int i = 0; i < m->n_codes; i++)
        buf_printf(out, "stallscope_proxy_requests_total{%s,code=\"%d\"} %lld\n", label,
                   m->code[i], (long long)m->code_n[i]);
    if (m->code_other > 0)
        buf_printf(out, "stallscope_proxy_requests_total{%s,code=\"other\"} %lld\n", label,
                   (long long)m->code_other);
    scalar(out, "stallscope_proxy_tokens_total", "counter", "Token events observed.", label,
           (double)m->tokens);
    scalar(out, "stallscope_proxy_stall_threshold_seconds", "gauge",
           "The stall threshold in force (0 until enough gaps were seen).", label,
           m->threshold_s);
    hist(out, "stallscope_proxy_forward_delay_seconds",
         "From the kernel's receive stamp of upstream bytes carrying a token to their write "
         "downstream: the latency the proxy adds.",
         &m->forward_delay, label);
    scalar(out, "stallscope_proxy_client_aborts_total", "counter",
           "Clients that left mid-answer (the upstream request was aborted).", label,
           (double)m->client_aborts);
    scalar(out, "stallscope_proxy_prompt_estimated_total", "counter",
           "Observed requests whose prompt length the server never said (no usage in the "
           "stream): counted from the body, text at one token per 4 bytes.",
           label, (double)m->prompt_estimated);
    scalar(out, "stallscope_proxy_upstream_errors_total", "counter",
           "Requests the upstream could not answer (the proxy's own 502 or 504).", label,
           (double)m->upstream_errors);
    return out->failed ? -1 : 0;
}
