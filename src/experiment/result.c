/* result — `--save-result FILE`: the interference run in `vllm bench serve`'s result keys:
 * the run's settings as its command line would have spelled them (date, backend, model_id,
 * num_prompts, request_rate, burstiness, max_concurrency ...), the metric table's figures
 * (analysis/metric.h), vLLM's peak figures (max_output_tokens_per_s, max_concurrent_requests)
 * and with --save-detailed its per-request arrays (input_lens, output_lens, ttfts, itls,
 * start_times, latencies, generated_texts (null), errors), both read back from the run's
 * files, and stallscope's own figures under "stallscope" (experiment.h). A request counts
 * as completed by the analysis' own rule (standard_request_completed). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "analysis/metric.h"
#include "analysis/standard.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"
#include "common/tokenlog.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/result.h"

/* The model the requests named: the run's record (what the server called itself), else
 * --model-name, else the engine's model (ours: the catalog's name). */
static void model_id(const experiment_config *cfg, const char *run_dir, char *buf, size_t size)
{
    char path[4200], err[ERR_LEN];
    experiment_config rec;
    experiment_meta meta;
    memset(&meta, 0, sizeof meta);
    if (run_dir && fsio_join(path, sizeof path, run_dir, "config.json", err) == 0 &&
        experiment_config_read(path, &rec, &meta, err) == 0 && meta.served_model[0]) {
        snprintf(buf, size, "%s", meta.served_model);
        experiment_meta_free(&meta);
        return;
    }
    experiment_meta_free(&meta);
    if (cfg->client.model_name[0])
        snprintf(buf, size, "%s", cfg->client.model_name);
    else if (cfg->cost.arch.name[0])
        snprintf(buf, size, "%s", cfg->cost.arch.name);
    else
        snprintf(buf, size, "%s", cfg->device.model);
}

/* vLLM's settings keys, in its order: the run's identity, then its traffic. */
static void put_settings(json_t *root, const experiment_config *cfg, const analysis_summary *run,
                         const char *run_dir)
{
    const workload_config *wl = &cfg->wl;
    char date[32], model[192];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    json_object_set_new(root, "date", json_string(date));
    const char *backend = cfg->client.endpoint == DRIVER_CHAT ? "openai-chat" : "openai";
    json_object_set_new(root, "endpoint_type", json_string(backend));
    json_object_set_new(root, "backend", json_string(backend));
    json_object_set_new(root, "label", cfg->label[0] ? json_string(cfg->label) : json_null());
    model_id(cfg, run_dir, model, sizeof model);
    json_object_set_new(root, "model_id", json_string(model));
    json_object_set_new(root, "tokenizer_id",
                        json_string(cfg->wl.tokenizer[0] ? cfg->wl.tokenizer : model));
    /* --num-prompts, else the requests the run sent (what vLLM's would have been). */
    json_object_set_new(root, "num_prompts",
                        json_integer(wl->num_prompts > 0 ? wl->num_prompts : run->requests));
    /* each --metadata KEY=VALUE as a key, as vLLM places them */
    char meta[sizeof cfg->metadata];
    snprintf(meta, sizeof meta, "%s", cfg->metadata);
    for (char *save = NULL, *line = strtok_r(meta, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        json_object_set_new(root, line, json_string(eq + 1));
    }
    /* A rate; "inf" for --num-prompts all at t = 0 (vLLM's spelling); null for closed users
     * or a trace's own times, which no rate describes. */
    json_object_set_new(root, "request_rate",
                        wl->request_rate > 0               ? json_real(wl->request_rate)
                        : workload_drawn_arrivals(wl) ? json_string("inf")
                                                           : json_null());
    json_object_set_new(root, "burstiness", json_real(wl->burstiness));
    json_object_set_new(root, "max_concurrency",
                        wl->max_concurrency > 0 ? json_integer(wl->max_concurrency) : json_null());
}

static int cmp_request_id(const void *x, const void *y)
{
    const tokenlog_request *a = x, *b = y;
    return (a->request > b->request) - (a->request < b->request);
}

static const tokenlog_request *find_request(const tokenlog *log, int64_t id)
{
    tokenlog_request key = {.request = id};
    return bsearch(&key, log->requests, (size_t)log->n_requests, sizeof *log->requests,
                   cmp_request_id);
}

/* vLLM's peak figures over whole seconds from the first completed request's send: in each
 * second, the token events of completed requests (one per streamed chunk, as vLLM counts its
 * itls) and the completed requests in flight (from the second of its send to the second of
 * its end, both counted); max_output_tokens_per_s and max_concurrent_requests are the
 * largest of each (the two maxima may fall in different seconds). Both 0 without a completed
 * request; null when the run lasted over PEAK_MAX_SECONDS. log's requests sorted by id. */
#define PEAK_MAX_SECONDS (1 << 22)
static void put_peaks(json_t *root, const tokenlog *log)
{
    int64_t start = INT64_MAX, end = INT64_MIN;
    for (int64_t i = 0; i < log->n_requests; i++)
        if (standard_request_completed(&log->requests[i])) {
            start = log->requests[i].t_send_ns < start ? log->requests[i].t_send_ns : start;
            end = log->requests[i].t_end_ns > end ? log->requests[i].t_end_ns : end;
        }
    double max_tokens = 0;
    int64_t max_requests = 0;
    const int64_t span = start <= end ? end - start : 0;
    const int64_t seconds = (span + CLOCK_NS_PER_S - 1) / CLOCK_NS_PER_S + 1;
    int64_t *tokens = NULL, *flight = NULL;
    if (start <= end && seconds <= PEAK_MAX_SECONDS &&
        (tokens = calloc((size_t)seconds, sizeof *tokens)) &&
        (flight = calloc((size_t)seconds, sizeof *flight))) {
        for (int64_t e = 0; e < log->n_events; e++) {
            const tokenlog_request *r = find_request(log, log->events[e].request);
            const int64_t b = (log->events[e].t_ns - start) / CLOCK_NS_PER_S;
            if (r && standard_request_completed(r) && b >= 0 && b < seconds)
                tokens[b]++;
        }
        for (int64_t i = 0; i < log->n_requests; i++) {
            const tokenlog_request *r = &log->requests[i];
            if (!standard_request_completed(r))
                continue;
            for (int64_t b = (r->t_send_ns - start) / CLOCK_NS_PER_S;
                 b <= (r->t_end_ns - start) / CLOCK_NS_PER_S && b < seconds; b++)
                flight[b]++;
        }
        for (int64_t b = 0; b < seconds; b++) {
            max_tokens = (double)tokens[b] > max_tokens ? (double)tokens[b] : max_tokens;
            max_requests = flight[b] > max_requests ? flight[b] : max_requests;
        }
    }
    const bool known = start > end || (tokens && flight);
    json_object_set_new(root, "max_output_tokens_per_s", known ? json_real(max_tokens) : json_null());
    json_object_set_new(root, "max_concurrent_requests",
                        known ? json_integer(max_requests) : json_null());
    free(tokens);
    free(flight);
}

/* --save-detailed: one entry per request sent at or after t = 0 (the requests the figures
 * count, completed or not), in request order; times in seconds as vLLM writes them (ttft 0
 * and latency 0 for a request without one), itls every gap between two token events of the
 * request; generated_texts null (the key vLLM has, but stallscope keeps no answer text). */
static int put_detail(json_t *root, const tokenlog *log, char *err)
{
    json_t **gaps = calloc((size_t)(log->n_requests > 0 ? log->n_requests : 1), sizeof *gaps);
    int64_t *last = malloc((size_t)(log->n_requests > 0 ? log->n_requests : 1) * sizeof *last);
    if (!gaps || !last) {
        free(gaps);
        free(last);
        return err_set(err, "out of memory");
    }
    for (int64_t i = 0; i < log->n_requests; i++)
        last[i] = -1;
    for (int64_t e = 0; e < log->n_events; e++) { /* events are in time order */
        const tokenlog_event *ev = &log->events[e];
        const tokenlog_request *r = find_request(log, ev->request);
        if (!r)
            continue;
        const int64_t i = r - log->requests;
        if (last[i] >= 0) {
            if (!gaps[i])
                gaps[i] = json_array();
            json_array_append_new(gaps[i], json_real((double)(ev->t_ns - last[i]) / 1e9));
        }
        last[i] = ev->t_ns;
    }
    json_t *input = json_array(), *output = json_array(), *ttfts = json_array(),
           *itls = json_array(), *starts = json_array(), *latencies = json_array(),
           *errors = json_array(), *texts = json_array();
    for (int64_t i = 0; i < log->n_requests; i++) {
        const tokenlog_request *r = &log->requests[i];
        if (r->t_send_ns < 0) {
            json_decref(gaps[i]);
            continue;
        }
        const bool ok = standard_request_completed(r);
        const bool cut = !r->error[0] && !ok;
        json_array_append_new(input, json_integer(r->prompt_tokens));
        json_array_append_new(output, json_integer(r->completion_tokens));
        json_array_append_new(ttfts, json_real(r->t_first_ns >= 0
                                                   ? (double)(r->t_first_ns - r->t_send_ns) / 1e9
                                                   : 0.0));
        json_array_append_new(itls, gaps[i] ? gaps[i] : json_array());
        json_array_append_new(starts, json_real((double)r->t_send_ns / 1e9));
        json_array_append_new(latencies,
                              json_real(ok ? (double)(r->t_end_ns - r->t_send_ns) / 1e9 : 0.0));
        json_array_append_new(texts, json_null()); /* the answer's text is not kept */
        json_array_append_new(errors, json_string(r->error[0] ? r->error
                                                  : cut       ? "unfinished: cut at the run's end"
                                                              : ""));
    }
    json_object_set_new(root, "input_lens", input);
    json_object_set_new(root, "output_lens", output);
    json_object_set_new(root, "ttfts", ttfts);
    json_object_set_new(root, "itls", itls);
    json_object_set_new(root, "start_times", starts);
    json_object_set_new(root, "latencies", latencies);
    json_object_set_new(root, "generated_texts", texts);
    json_object_set_new(root, "errors", errors);
    free(gaps);
    free(last);
    return 0;
}

int experiment_save_result(const char *path, const experiment_config *cfg,
                           const analysis_summary *run, const char *run_dir, bool detailed,
                           char *err)
{
    if (detailed && !run_dir)
        return err_set(err, "--save-detailed needs the run's files");
    if (detailed && run->tokens_csv_dropped)
        return err_set(err, "--save-detailed: tokens.csv holds only the run's first %lld token "
                            "events (--tokens-csv-max): raise it",
                       (long long)run->tokens_csv_max_events);
    /* The run's own files, for the peaks and the per-request arrays: none without a run
     * directory, and a cut tokens.csv gives no peak (null). */
    tokenlog log;
    tokenlog_init(&log);
    const bool have_log = run_dir && !run->tokens_csv_dropped;
    if (have_log && tokenlog_read_dir(&log, run_dir, NULL, err) != 0) {
        tokenlog_free(&log);
        return -1;
    }
    if (log.n_requests > 1)
        qsort(log.requests, (size_t)log.n_requests, sizeof *log.requests, cmp_request_id);
    json_t *root = json_object();
    json_t *figures = metric_vllm_result(run);
    json_t *ours = analysis_summary_to_json(run);
    int rc = -1;
    if (!root || !figures || !ours) {
        err_set(err, "out of memory");
        goto done;
    }
    put_settings(root, cfg, run, run_dir);
    /* the figures after the settings, as vLLM merges them; never a --metadata key over one */
    json_object_update(root, figures);
    if (have_log) {
        put_peaks(root, &log);
    } else {
        json_object_set_new(root, "max_output_tokens_per_s", json_null());
        json_object_set_new(root, "max_concurrent_requests", json_null());
    }
    if (detailed && put_detail(root, &log, err) != 0)
        goto done;
    json_object_set(root, "stallscope", ours);
    rc = fsio_write_json(path, root, JSON_INDENT(2) | JSON_REAL_PRECISION(10), err);
done:
    json_decref(root);
    json_decref(figures);
    json_decref(ours);
    tokenlog_free(&log);
    return rc;
}
