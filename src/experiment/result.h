/* result — `--save-result FILE` (result.c). */
#ifndef STALLSCOPE_EXPERIMENT_RESULT_H
#define STALLSCOPE_EXPERIMENT_RESULT_H
#include "analysis/analysis.h"
#include "experiment/config.h"

/* --save-result FILE, in `vllm bench serve`'s keys: the settings (date, endpoint_type,
 * backend, label, model_id, tokenizer_id, num_prompts, each --metadata KEY=VALUE,
 * request_rate, burstiness, max_concurrency), the run's standard metrics
 * (metric_vllm_result: duration, completed, failed, total_input_tokens, ..., mean_ttft_ms,
 * p99_itl_ms, p99.9_itl_ms ...), with detailed the per-request arrays (input_lens,
 * output_lens, ttfts, itls, start_times, latencies, errors) read from run_dir's tokens.csv
 * and requests.csv, and the whole summary under "stallscope". run_dir: the run's directory
 * (its config.json names the served model; NULL: none). Written atomically. 0, or -1 with
 * err. */
int experiment_save_result(const char *path, const experiment_config *cfg,
                           const analysis_summary *run, const char *run_dir, bool detailed,
                           char *err);

#endif
