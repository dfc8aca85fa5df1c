/* disagg — prefill/decode disaggregation in the simulator (sim.h, "Disaggregated prefill"):
 * the KV-link catalog, the P:D and link parsers, and the disaggregated run, one event loop
 * over P prefill instances, D decode instances and the KV transfers between them. Part of
 * sim.h's contract (include sim/sim.h); sim_disagg_run is sim.c's alone. */
#ifndef STALLSCOPE_SIM_DISAGG_H
#define STALLSCOPE_SIM_DISAGG_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/tokenlog.h"
#include "engine/cost.h"
#include "sim/sim_types.h"
#include "workload/workload.h"

/* "P:D" (1 <= P, D <= SIM_DISAGG_MAX_INSTANCES) into out->prefill and out->decode. */
int sim_disagg_parse(const char *text, sim_disagg *out, char *err);
/* A KV link into out's link fields: a catalog name (nvlink, pcie5, rdma-100g, rdma-400g) or
 * a bandwidth "25GB/s" (decimal GB, one direction, no per-transfer latency). An unknown name:
 * -1 with err listing the known ones. */
int sim_kv_link_parse(const char *text, sim_disagg *out, char *err);
/* The catalog, one line a link with its figures and source (for --help and docs). */
void sim_kv_links_print(FILE *out);
/* Whether d is usable (P, D in range and a link with a positive bandwidth): 0 or -1. */
int sim_disagg_check(const sim_disagg *d, char *err);
/* The time to move the KV of prompt_tokens over d's link: bytes / bandwidth, rounded to the
 * nearest ns, + the link's latency. */
int64_t sim_kv_transfer_ns(const sim_disagg *d, const cost_params *cost, int prompt_tokens);
/* The GPUs a run uses: P + D, or 1. */
int sim_disagg_gpus(const sim_disagg *d);
/* "disaggregated 1P:1D over nvlink" ("" when not disaggregated). */
void sim_disagg_describe(const sim_disagg *d, char *buf, size_t size);

/* The run of sim.c's sim_run_core when cfg->disagg.prefill > 0 (checked already): the same
 * rows, events and order as one instance's run (sim.h), to log and/or sink. 0 or -1 with
 * err. */
int sim_disagg_run(const sim_config *cfg, const workload_plan *plan, tokenlog *log,
                   const tokenlog_sink *sink, sim_stats *stats, char *err);

#endif
