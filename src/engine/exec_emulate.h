/* exec_emulate — a GPU of the catalog emulated in real time from the cost model.
 *
 * Each step lasts cost_step_ns over its batch: step() sleeps with clock_sleep_until_ns to
 * the absolute deadline step_start + modeled duration, so a late wake-up in one step is
 * not carried into the next (the engine starts the next step at this deadline). Tokens
 * are words chosen by (seed, position) and EOS where vocab.h says. */
#ifndef STALLSCOPE_EXEC_EMULATE_H
#define STALLSCOPE_EXEC_EMULATE_H
#include "engine/cost.h"
#include "engine/exec.h"

/* A new executor (free with x->destroy(x)), or NULL with err. The cost parameters are
 * copied. */
exec *exec_emulate_create(const cost_params *cost, char *err);

#endif
