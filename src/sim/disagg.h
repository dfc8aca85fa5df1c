/* disagg — internal to sim: the disaggregated run (sim.h, "Disaggregated prefill"), one
 * event loop over P prefill instances, D decode instances and the KV transfers between them.
 * sim_run_core hands it a run whose cfg->disagg.prefill > 0, checked already. */
#ifndef STALLSCOPE_SIM_DISAGG_H
#define STALLSCOPE_SIM_DISAGG_H
#include "sim/sim.h"

int sim_disagg_run(const sim_config *cfg, const workload_plan *plan, tokenlog *log,
                   const tokenlog_sink *sink, sim_stats *stats, char *err);

#endif
