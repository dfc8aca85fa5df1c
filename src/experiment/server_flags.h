/* server_flags — one scheduler setting in the flags of the servers people run (server_flags.c). */
#ifndef STALLSCOPE_EXPERIMENT_SERVER_FLAGS_H
#define STALLSCOPE_EXPERIMENT_SERVER_FLAGS_H
#include <stdio.h>

#include "engine/sched.h"
#include "experiment/config.h"
#include "workload/workload.h"

/* The flags vLLM, SGLang, llama.cpp, TGI and `stallscope serve` need to run one scheduler
 * setting (policy, token budget) for this workload: one line each, indented. */
void experiment_print_server_flags(FILE *out, const char *indent, sched_policy policy, int budget,
                                   const workload_config *wl);
/* The same with the running requests at most (vLLM --max-num-seqs, SGLang
 * --max-running-requests, llama.cpp --parallel, TGI --max-batch-size, serve --max-num-seqs); 0: left at the
 * servers' defaults (llama.cpp: a slot per stream), as experiment_print_server_flags does. */
void experiment_print_server_setting(FILE *out, const char *indent, sched_policy policy,
                                     int budget, int max_num_seqs, const workload_config *wl);
/* The setting's prefix caching (on), in the same servers' words. */
void experiment_print_prefix_caching(FILE *out, const char *indent);
/* The run's --print-server-flags: one-step prefill (the problem) and chunked prefill (the
 * fix) side by side, then how to point stallscope at the server. */
void experiment_print_server_guide(FILE *out, const experiment_config *cfg);

#endif
