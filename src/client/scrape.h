/* scrape — a server's Prometheus /metrics over a run, in the columns every serving engine
 * has under its own names (docs/reference/run.md, "The server's metrics").
 *
 * Columns (scrape_column), and the names each is read from; a name that is absent leaves
 * the cell empty, a family not in this table is ignored:
 *   running            vllm:num_requests_running, sglang:num_running_reqs,
 *                      llamacpp:requests_processing
 *   waiting            vllm:num_requests_waiting, sglang:num_queue_reqs,
 *                      llamacpp:requests_deferred
 *   kv_usage (0..1)    vllm:kv_cache_usage_perc (older vLLM: vllm:gpu_cache_usage_perc),
 *                      sglang:token_usage, llamacpp:kv_cache_usage_ratio
 *   prompt_tokens      vllm:prompt_tokens_total, sglang:prompt_tokens_total,
 *                      llamacpp:prompt_tokens_total                       (counter)
 *   generation_tokens  vllm:generation_tokens_total, sglang:generation_tokens_total,
 *                      llamacpp:tokens_predicted_total                    (counter)
 *   steps              vllm:iteration_tokens_total_count (the histogram's count),
 *                      llamacpp:n_decode_total, stallscope_engine_steps_total (counter)
 * Several series of one name (label sets: model_name, engine ...) are summed, except
 * kv_usage, which takes the largest (the fullest cache is the one that preempts). When a
 * column has several names in one exposition, the first in the list above wins.
 * Counters are written as the increase since the previous scrape (a counter that went
 * down, a restarted server, counts from 0, as Prometheus' rate() does).
 *
 * server_metrics.csv: t_ns,t_sent_ns,running,waiting,kv_usage,prompt_tokens,
 * generation_tokens,steps — t_ns when the response was complete, t_sent_ns when the GET
 * was started (before its connection: t_ns - t_sent_ns includes the connect), both ns from
 * the run's t = 0 on CLOCK_MONOTONIC; one row per successful scrape that completed within
 * the run, [t = 0, its end]; each row goes out whole in one write(2). */
#ifndef STALLSCOPE_SCRAPE_H
#define STALLSCOPE_SCRAPE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/transport.h"

typedef enum scrape_column {
    SCRAPE_RUNNING = 0,
    SCRAPE_WAITING,
    SCRAPE_KV_USAGE,
    SCRAPE_PROMPT_TOKENS,
    SCRAPE_GENERATION_TOKENS,
    SCRAPE_STEPS,
    SCRAPE_COLUMNS
} scrape_column;

/* "running", "waiting", "kv_usage", "prompt_tokens", "generation_tokens", "steps" */
const char *scrape_column_name(scrape_column c);
/* Whether the column is a counter (written as a per-interval increase). */
bool scrape_column_is_counter(scrape_column c);

/* One exposition read into the columns (counters still cumulative). */
typedef struct scrape_frame {
    double value[SCRAPE_COLUMNS];
    bool has[SCRAPE_COLUMNS];
    int rank[SCRAPE_COLUMNS]; /* which of the column's names gave it (0: the first) */
} scrape_frame;

/* Parse one exposition into f. 0, or -1 with err ("line N, column C: ..."). */
int scrape_frame_parse(scrape_frame *f, const char *text, size_t len, char *err);
/* Which column a sample's name feeds and its rank among the column's names; false when the
 * name is not one of the table's. */
bool scrape_lookup(const char *name, size_t len, scrape_column *column, int *rank);

/* One row of server_metrics.csv (counters as increases). */
typedef struct scrape_row {
    int64_t t_ns, t_sent_ns;
    double value[SCRAPE_COLUMNS];
    bool has[SCRAPE_COLUMNS];
} scrape_row;

/* The row for cur, with prev the previous successful scrape (NULL: counters empty). */
void scrape_row_from(scrape_row *row, const scrape_frame *cur, const scrape_frame *prev,
                     int64_t t_ns, int64_t t_sent_ns);
/* The CSV header line (with its LF), and one row as a line; the line's length. */
const char *scrape_csv_header(void);
size_t scrape_row_format(const scrape_row *row, char *out, size_t size);

/* server_metrics.csv back into memory (the report). */
typedef struct scrape_series {
    scrape_row *rows;
    int64_t n, cap;
    bool has[SCRAPE_COLUMNS]; /* the column has at least one value */
    bool cut;                 /* a last row without its LF that did not parse was dropped */
} scrape_series;
/* 0, or -1 with err ("FILE:LINE: ..."); scrape_series_free either way. A last line
 * without LF is taken when it is a whole row and dropped (cut) when not. */
int scrape_csv_read(const char *path, scrape_series *out, char *err);
void scrape_series_free(scrape_series *s);

/* ---- the scraper: its own thread, never the client's event loops ---------------------- */

typedef struct scrape_options {
    /* The full URL of the exposition in base_url ("http://host:8000/metrics"); the same
     * key and headers as the client's requests, from memory (never logged or written). */
    transport_options so;
    int64_t period_ns;  /* 0: SCRAPE_PERIOD_NS */
    int64_t timeout_ns; /* per scrape; 0: the period x 4, at most 1 s */
    const char *csv_path;
} scrape_options;

#define SCRAPE_PERIOD_NS (250 * 1000 * 1000LL)

typedef struct scrape_stats {
    int64_t scrapes;  /* requests made */
    int64_t failures; /* of which gave no row: no answer, not 200, not the format */
    int64_t rows;     /* rows written */
    int64_t late;     /* periods skipped because a scrape took longer than the period */
    char first_error[256];
} scrape_stats;

typedef struct scraper scraper;

/* Ask once whether so->base_url (a whole URL) answers 200 with an exposition this parser
 * reads and one of the table's names; a redirect (HTTP 30x) of a path without a trailing
 * "/" is tried once more with it (prometheus_client mounted at /metrics redirects to
 * /metrics/). The URL that answered into url_out. 0, or -1 with err in one line
 * ("GET http://...: HTTP 404", "... line 3, column 1: ..."). */
int scrape_probe(const transport_options *so, int64_t timeout_ns, char *url_out, size_t size,
                 char *err);
/* "http://h:8000/metrics" -> "http://h:8000" and "/metrics" (a URL without a path: "/").
 * 0, or -1 when it has no "://" or a part does not fit. */
int scrape_split_url(const char *url, char *origin, size_t origin_size, char *path,
                     size_t path_size);
/* Create csv_path (header written) and start scraping at once, every period on an absolute
 * schedule. Rows wait for scrape_set_window. NULL with err. */
scraper *scrape_start(const scrape_options *opt, char *err);
/* The run's t = 0 and its planned end (CLOCK_MONOTONIC): rows of scrapes completed within
 * [t0_ns, t_end_ns] are written (after the end the client is closing its streams: the
 * server's queue empties because the run stops, not because of the load). */
void scrape_set_window(scraper *s, int64_t t0_ns, int64_t t_end_ns);
/* Stop (within one scrape's timeout), join, close the file, free; the counts into out
 * (may be NULL). A write error ends the scraping and is in first_error. */
void scrape_stop(scraper *s, scrape_stats *out);

#endif
