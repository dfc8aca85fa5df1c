/* sim — the discrete-event simulator: the workload drives the real scheduler (sched_*)
 * and the cost model (cost_*) under a virtual clock. No thread, no sleep: a 40 s run takes
 * milliseconds. Every step takes cost_step_ns(batch); every token of a step is stamped at
 * the step's end; a background user's next request arrives client_turnaround_ns (plus
 * --think-time) after its answer ended: the runs' SIM_CLIENT_TURNAROUND_NS puts it in the
 * step after the one that starts at that end, as over HTTP, where the engine starts its next
 * step the moment the last one ends and the client's next request, sent on reading the
 * answer's last token, lands during it (0: it joins the step starting at that end);
 * an injection or an open-loop request arrives at its planned time and joins the first step
 * that starts after it. With max_concurrency, an open-loop arrival that finds every slot
 * taken waits (first come, first served) until a request ends and is sent then: its
 * requests.csv row has t_plan (the arrival) and t_send (the slot) apart.
 * The run ends at wl.duration_ns (a step under way then ends first), or, with
 * wl.until_trace_end, once the last open-loop request has finished (virtual_ns: that end).
 * Writes the same token log as a live run, so one analysis serves both.
 *
 * Warm start (warmup_ns > 0, run's --warmup; sim/warm.h): the closed users start warmup_ns
 * before t = 0 and run unrecorded, as a live client's warm-up; the injections and open-loop
 * arrivals are planned from t = 0 and the run ends at duration, as always. The requests in
 * flight at t = 0 are carried over (their rows first, t_plan, t_send and t_first -1: they
 * count for gaps, not TTFT), steps that start before t = 0 are not logged, and the rows are
 * numbered 0, 1 ... in the order a live log numbers them. Without closed users it changes
 * nothing; warmup_ns 0 starts every user at t = 0 (cold: their first prompts prefill together).
 *
 * Disaggregated prefill (disagg.prefill > 0, `--disaggregate P:D`): P prefill instances and D
 * decode instances of the same device and model, each with its own scheduler (the same
 * sched_config) and the same cost model. A request goes to the prefill instance that holds the
 * fewest requests (queued, running or in its step under way; ties: the lowest index), which
 * prefills it in prefill-only steps (a prefill-only request: max_tokens 1) and samples its
 * first token at the end of its prefill. Its prompt's KV (cost_kv_bytes_per_token x
 * prompt_tokens) then crosses the KV link: bytes / bandwidth + the link's per-transfer latency,
 * one transfer at a time per prefill instance (its outgoing link; a transfer waits for the one
 * before). When the transfer ends the first token reaches the client (vLLM's disaggregated
 * prefill streams from the decode instance, so the TTFT includes the transfer) and the request
 * joins the decode instance that holds the fewest requests (sched_add_prefilled), whose next
 * step starting at or after that instant feeds that token and samples the second. A request of
 * one token ends at its prefill (no transfer). Instances run their steps independently;
 * steps.csv holds every instance's steps, in start order (ties: prefill instances first, by
 * index); the row has no instance column (steps.csv, docs/reference/artifacts.md), but a prefill
 * instance's steps carry prefill tokens only and a decode instance's decode tokens only (save a
 * preempted request's recompute). A closed user's next request arrives at its answer's end
 * (client_turnaround_ns is not modeled there). Everything else (rows, events, their order)
 * is as above. */
#ifndef STALLSCOPE_SIM_H
#define STALLSCOPE_SIM_H
#include "common/tokenlog.h"

/* The runs' closed-user turnaround (sim_config.client_turnaround_ns): from the end of the
 * step that sampled an answer's last token to the user's next request's arrival (a loopback
 * client reads the token and sends again in about a tenth of a millisecond). Any positive
 * value puts the request after the step already under way; an idle engine takes it at
 * once. */
#define SIM_CLIENT_TURNAROUND_NS (100 * 1000LL)
#include "sim/disagg.h"
#include "sim/sim_types.h"
#include "workload/workload.h"

/* Refuse a workload the engine could never serve (an injection, the longest background
 * prompt the distributions can draw or a trace row longer than the context, or than the
 * token budget under mixed/prefill-first), with sched's own message ("trace FILE:LINE: ..."
 * for a trace row). Builds the arrival plan (reads the trace and empirical files). */
int sim_check(const sim_config *cfg, char *err);
/* The same against a plan already built from cfg->wl. */
int sim_check_plan(const sim_config *cfg, const workload_plan *plan, char *err);

/* Run one simulation. log may be NULL (statistics only: benchmarks). 0 or -1 with err. */
int sim_run(const sim_config *cfg, tokenlog *log, sim_stats *stats, char *err);
/* The same with cfg->wl's plan built already (workload_plan_build). */
int sim_run_plan(const sim_config *cfg, const workload_plan *plan, tokenlog *log,
                 sim_stats *stats, char *err);
/* The same run handed to sink as it goes, in time order (nothing held but the requests'
 * state): a step when it is scheduled; a request's row when it is sent and again at its first
 * token and its end (and, still running at the end of the run, once more with its tokens so
 * far); a step's token events once the arrivals planned during that step have been sent (an
 * injection's send is backdated to its plan, so the gaps it overlaps end after its row). The
 * rows and events are those sim_run would have put in a log, in the same order. */
int sim_run_sink(const sim_config *cfg, const tokenlog_sink *sink, sim_stats *stats, char *err);
/* sim_run_sink with the plan built already. */
int sim_run_plan_sink(const sim_config *cfg, const workload_plan *plan, const tokenlog_sink *sink,
                      sim_stats *stats, char *err);

#endif
