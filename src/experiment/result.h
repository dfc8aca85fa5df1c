/* result — `--save-result FILE` (result.c). */
#ifndef STALLSCOPE_EXPERIMENT_RESULT_H
#define STALLSCOPE_EXPERIMENT_RESULT_H
#include "analysis/analysis.h"
#include "experiment/config.h"

/* --save-result FILE: run's standard metrics with `vllm bench serve`'s keys
 * (metric_vllm_result: duration, completed, failed, total_input_tokens, ..., mean_ttft_ms,
 * p99_itl_ms, p99.9_itl_ms ...),
 * date, label and each --metadata KEY=VALUE as keys, and the whole summary under
 * "stallscope". Written atomically. 0, or -1 with err. */
int experiment_save_result(const char *path, const experiment_config *cfg,
                           const analysis_summary *run, char *err);

#endif
