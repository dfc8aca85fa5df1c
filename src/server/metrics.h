/* metrics — the server's Prometheus numbers, with vLLM's metric names where the meaning
 * matches, so dashboards and scripts written for vLLM read stallscope unchanged.
 *
 *   vllm:num_requests_running      gauge     requests in the running set (after a step)
 *   vllm:num_requests_waiting      gauge     requests queued
 *   vllm:kv_cache_usage_perc       gauge     KV blocks used / total, a fraction 0..1 (as
 *                                            vLLM, despite "perc")
 *   vllm:time_to_first_token_seconds    histogram  request arrival -> end of the step
 *                                            that sampled its first token
 *   vllm:inter_token_latency_seconds    histogram  end of one token's step -> the next's
 *   vllm:iteration_tokens_total    histogram tokens per engine step
 *   vllm:prompt_tokens_total       counter   prompt tokens of requests that got a first
 *                                            token
 *   vllm:generation_tokens_total   counter   tokens generated
 *   vllm:num_preemptions_total     counter   recompute preemptions
 *   vllm:prefix_cache_queries_total  counter  prompt tokens looked up in the prefix cache
 *                                            (each request once, at its first admission;
 *                                            0 without --enable-prefix-caching)
 *   vllm:prefix_cache_hits_total   counter   of them, found cached (prefill skipped)
 *   stallscope_kv_cells_occupied   gauge     --kv-layout unified: KV cells in the cache, the
 *                                            running requests' and those the free slots
 *                                            keep (what every step's attention spans; 0
 *                                            under paged)
 *   stallscope_engine_steps_total  counter   engine steps
 *   stallscope_engine_slips_total  counter   times the emulated schedule fell > 2 ms behind
 *   stallscope_engine_realtime     gauge     1 when the engine thread got SCHED_FIFO
 *   stallscope_requests_open       gauge     generation requests the HTTP side holds
 *                                            (a leak check: 0 when idle)
 *   stallscope_requests_rejected_queue_full_total  counter  429s for --max-waiting
 *   stallscope_http_connections    gauge     client connections open
 *   stallscope_http_request_timeouts_total  counter  connections shut down because a
 *                                            request did not arrive whole in time
 *   stallscope_http_write_stalls_total  counter  connections shut down because the client
 *                                            left its reply unread for the timeout
 *   stallscope_heap_bytes          gauge     bytes held from the allocator (glibc's
 *                                            mallinfo2, or ASan's count in a sanitizer
 *                                            build): exact where RSS is noisy, for leak
 *                                            checks
 * Every sample carries model_name="...". Bucket bounds are vLLM's. Our own names use '_'
 * (a ':' is for recording rules); # HELP and # TYPE name a counter with its _total, as the
 * 0.0.4 text format (and vLLM) has it. Pure: the HTTP thread
 * owns one metrics_state and formats it on GET /metrics. */
#ifndef STALLSCOPE_METRICS_H
#define STALLSCOPE_METRICS_H
#include <stdint.h>

#include "common/buf.h"

#define METRICS_MAX_BUCKETS 32

typedef struct metrics_hist {
    const double *bounds; /* ascending upper bounds (le), +Inf implied */
    int n_bounds;
    uint64_t counts[METRICS_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last: +Inf */
    uint64_t count;
    double sum;
} metrics_hist;

typedef struct metrics_state {
    int64_t running, waiting;
    double kv_usage;
    uint64_t prompt_tokens, generation_tokens, preemptions, steps, slips;
    uint64_t prefix_queries, prefix_hits;
    int64_t kv_cells_occupied;
    bool realtime; /* the engine thread runs SCHED_FIFO */
    int64_t requests_open;
    uint64_t rejected_queue_full;
    int64_t http_connections;
    uint64_t read_timeouts;
    uint64_t write_stalls;
    int64_t heap_bytes;
    metrics_hist ttft, itl, iteration_tokens;
} metrics_state;

void metrics_init(metrics_state *m);
void metrics_hist_observe(metrics_hist *h, double value);
/* Append the Prometheus text exposition (format 0.0.4). */
void metrics_format(const metrics_state *m, const char *model_name, buf *out);

#endif
