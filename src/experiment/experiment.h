/* experiment — the one place an experiment is orchestrated: a typed configuration, its
 * config.json (one writer and one reader, side by side), a runner interface, and the run
 * pair every command performs:
 *
 *     baseline (injector off) -> its p50, the reference -> interference run -> summaries
 *     -> artifacts (OUT/<label>/..., OUT/comparison.json)
 *
 * and hands the two summaries back; the report layer turns them into the table, the verdict
 * and report.html (words and pictures are presentation: report/table.c, one function for the
 * terminal and the page).
 *
 * `sim`, `run`, `sweep`, the report's prediction and the tests differ only in the runner
 * they hand to experiment_run_pair(): the simulator (virtual time, in process) or HTTP
 * (the embedded server, started per run, or a --target).
 *
 * Layering: experiment uses workload, engine, sim, client, analysis and common; report and
 * cli sit above it. Nothing here prints unless given a FILE, installs a signal handler or
 * exits. */
#ifndef STALLSCOPE_EXPERIMENT_H
#define STALLSCOPE_EXPERIMENT_H
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "analysis/standard.h"
#include "analysis/analysis.h"
#include "client/driver.h"
#include "client/transport_kind.h"
#include "common/opts.h"
#include "common/proc.h"
#include "common/tokenlog.h"
#include "engine/cost.h"
#include "engine/exec.h"
#include "engine/sched.h"
#include "sim/sim.h"
#include "workload/workload.h"

/* ---- configuration ---------------------------------------------------------------- */

/* Where the tokens come from. */
typedef enum {
    EXPERIMENT_SIM,     /* the simulator: scheduler + cost model, virtual time */
    EXPERIMENT_EMULATE, /* the embedded server, a GPU emulated in real time */
    EXPERIMENT_CPU,     /* the embedded server, a real forward pass on this CPU */
    EXPERIMENT_REMOTE,  /* someone's server at client.target */
} experiment_engine;

/* The device and model as the user named them; experiment_resolve turns them into
 * cost_params. Empty names take the engine's defaults (EXPERIMENT_DEFAULT_*). */
typedef struct experiment_device {
    char gpu[32];                /* catalog name */
    char model[64];              /* catalog name */
    char model_config[512];      /* a Hugging Face config.json instead of --model */
    char hardware[512];          /* a `stallscope calibrate` profile instead of --gpu */
    double params_override;      /* --params / --lesson-flops; 0: from the architecture */
    int64_t step_overhead_ns;    /* < 0: the device's own (0 for catalog GPUs) */
    double compute_efficiency;   /* (0, 1] */
    double bandwidth_efficiency; /* (0, 1] */
    double gpu_memory_utilization; /* (0, 1]: the KV cache's share, vLLM's 0.9 */
    int threads;                 /* cpu engine; 0: the CPUs available - 1, at least 1 */
} experiment_device;

/* The HTTP client's settings (no secrets: the API key and headers travel separately, in
 * experiment_secrets, and are never written anywhere). */
typedef struct experiment_client {
    char target[512];           /* EXPERIMENT_REMOTE: the server's base URL, credentials and
                                   all (the connection's); every writer redacts it */
    driver_endpoint endpoint;   /* completions | chat */
    char model_name[128];       /* "model" of each request; "": the first of /v1/models */
    int64_t request_timeout_ns; /* a request with no bytes for this long fails */
    int64_t warmup_ns;          /* background load before t = 0, not recorded */
    bool fidelity;              /* ask a --target for stallscope's per-chunk emit times */
    bool insecure;              /* https without certificate checks */
    transport_kind transport;   /* auto (raw unless a proxy applies) | raw | curl */
    char extra_body[2048];      /* --extra-body: a JSON object merged into every request */
    int threads;                /* event loops of the load generator: --client-threads, else
                                   the CPUs the server leaves (experiment_client_threads,
                                   recorded by experiment_resolve) */
    bool threads_given;         /* threads came from --client-threads */
    /* The server's Prometheus metrics into server_metrics.csv (runner_http.c,
     * docs/client.md): "" (auto: the target's /metrics when it answers; not for the
     * embedded server, whose step log says more), "on" (the server's /metrics, embedded
     * included), "off", or the exposition's URL. */
    char scrape_metrics[512];
} experiment_client;

/* Shards (docs/distributed.md): which share of the load this process runs is the
 * workload's (wl.shard: user u in shard u mod N, the injector in shard 0); the common
 * t = 0 is here. Every shard of one experiment is given the same start_at. */
typedef struct experiment_shard {
    char start_at[48];   /* t = 0 of the first run, UTC: "2026-12-01T10:00:00Z" ("" unsharded) */
    int64_t start_at_ns; /* the same instant, ns since the epoch (CLOCK_REALTIME) */
} experiment_shard;

typedef struct experiment_config {
    experiment_engine engine;
    workload_config wl;       /* the interference run's; the baseline turns the injector off */
    sched_config sched;       /* max_model_len, kv_blocks 0: resolved from the model/memory */
    experiment_device device;
    cost_params cost;         /* resolved from device (unused for EXPERIMENT_REMOTE) */
    experiment_client client;
    bool no_baseline;         /* the interference run alone */
    int64_t stall_threshold_ns; /* 0: 5 x the baseline's p50 (the run's own without one) */
    experiment_shard shard;   /* --start-at (with --shard I/N, which sets wl.shard) */
    char label[128];          /* --label: the user's name for this experiment */
    char metadata[1024];      /* --metadata k=v ...: "k=v" lines, '\n' between them */
    char metric_percentiles[64]; /* --metric-percentiles "50,90,99,99.9"; "": the default */
    char goodput[128];        /* --goodput "ttft:2000 tpot:100" (ms); "": no SLO */
    sim_disagg disagg;        /* --disaggregate P:D --kv-link L (simulator only; 0:0 off) */
    /* --trace without --duration (experiment_preset): experiment_resolve replays the whole
     * trace (workload_until_trace_end) and clears it. Not in config.json: the resolved
     * wl.until_trace_end and wl.duration_ns are. */
    bool duration_from_trace;
} experiment_config;

/* The lesson, everywhere (the one place its numbers live): 32 users, an 8,000-token prompt
 * at 5, 15, 25, 35 s of a 40 s run, one-step prefill (mixed, max_num_batched_tokens 16384,
 * max_num_seqs 256, 16-token blocks), an H100 SXM running Llama 3.1 8B (the cpu engine: this
 * CPU running "small"), a 30 s request timeout and 2 s of warm-up. */
#define EXPERIMENT_DEFAULT_GPU "h100-sxm"
#define EXPERIMENT_DEFAULT_MODEL "llama-3.1-8b"
#define EXPERIMENT_CPU_DEVICE "cpu"
#define EXPERIMENT_CPU_MODEL "small"
void experiment_defaults(experiment_config *cfg, experiment_engine engine);
/* The standard metrics' options of cfg (--metric-percentiles, --goodput; checked when given,
 * so a config read back gives the same). */
void experiment_standard_options(const experiment_config *cfg, standard_options *out);
/* --save-result FILE: run's standard metrics with `vllm bench serve`'s keys (duration,
 * completed, failed, total_input_tokens, ..., mean_ttft_ms, p99_itl_ms, p99.9_itl_ms ...),
 * date, label and each --metadata KEY=VALUE as keys, and the whole summary under
 * "stallscope". Written atomically. 0, or -1 with err. */
int experiment_save_result(const char *path, const experiment_config *cfg,
                           const analysis_summary *run, char *err);
void experiment_lesson_sched(sched_config *sched);

const char *experiment_engine_label(experiment_engine engine); /* "sim", "emulate" ... */
int experiment_engine_parse(const char *text, experiment_engine *out, char *err);

/* Resolve the device into cfg->cost and complete cfg->sched (max_model_len from the model,
 * KV blocks from the device's memory unless given); with duration_from_trace, read the trace
 * for the duration (workload_until_trace_end: a bad trace is bad input here); record the
 * client's threads. Idempotent; a configuration read back from config.json is resolved
 * already (its device files may be gone: do not call this on it). 0, or -1 with err (bad
 * input: an unknown GPU, a model that does not fit, a trace). */
int experiment_resolve(experiment_config *cfg, char *err);
/* The device part alone: cfg->device into cfg->cost (for `model`, which prices steps and
 * needs no KV cache). 0, or -1 with err. */
int experiment_resolve_cost(experiment_config *cfg, char *err);
/* The load generator's threads beside the server, on the CPUs this process may run on (its
 * affinity mask: proc_cpus; taskset and cpusets count). */
typedef struct experiment_client_cpus {
    int cpus;    /* CPUs available */
    int server;  /* threads the embedded server keeps busy: 1 with emulate (its engine thread;
                    its HTTP loop mostly waits), the cpu engine's --threads (default: the CPUs
                    - 1, at least 1); 0 with --target (elsewhere) and in the simulator */
    int threads; /* the client's event loops: --client-threads, else cpus - server, at least 1
                    (the simulator: 0) */
    bool given;  /* threads came from --client-threads */
} experiment_client_cpus;
void experiment_client_cpus_of(const experiment_config *cfg, experiment_client_cpus *out);
/* The decision in one line for the run's setup: "client: 1 event loop (the default; 2 CPUs
 * available, 1 busy in the embedded emulate server)". A --client-threads that, with the
 * embedded server's threads, wants more CPUs than there are is a warning instead (true
 * returned): "warning: --client-threads 2 beside the embedded emulate server's 1 busy
 * thread: 3 threads on 2 CPUs, ..." (the stamps then measure the wait for a CPU). */
bool experiment_client_cpus_describe(const experiment_client_cpus *c, const experiment_config *cfg,
                                     char *line, size_t size);
/* experiment_client_cpus_of(cfg).threads; experiment_resolve records it in client.threads
 * (config.json, with client.threads_given). */
int experiment_client_threads(const experiment_config *cfg);
/* Refuse what the engine could never serve: a bad workload, or (our own engines) an
 * injection longer than the context or, under mixed/prefill-first, the token budget.
 * 0, or -1 with err. */
int experiment_check(const experiment_config *cfg, char *err);

/* "h100-sxm llama-3.1-8b mixed/16384": the cost model's profile of a run. */
void experiment_profile_name(const cost_params *cost, const sched_config *sched, char *buf,
                             size_t size);
/* The engine as tables and reports name it: "sim h100-sxm llama-3.1-8b mixed/16384",
 * "emulate h100-sxm ...", "cpu small mixed/16384" (the cpu engine's device is this machine,
 * named only when a --hardware profile names it), "remote MODEL" (served_model: what the
 * target called itself; NULL or "" for unknown). */
void experiment_engine_name(const experiment_config *cfg, const char *served_model, char *buf,
                            size_t size);

/* The GPUs a run uses, for summary.json's per-GPU figures: the simulator 1, or P + D
 * disaggregated (--disaggregate); 0 for the servers (unknown to us). */
int experiment_gpus(const experiment_config *cfg);

/* The spike the cost model predicts for one injection of prompt_tokens under cfg: the
 * longest step that carries it beside one decode per background user (cost_injection_step_ns,
 * chunked under the budget when the policy chunks). ms; 0 for a remote engine. */
double experiment_model_spike_ms(const experiment_config *cfg, int prompt_tokens);

/* The option groups that fill a configuration, for every command that runs experiments
 * (and for the sweep, which applies one varied value at a time through the same tables):
 *   workload  --preset --users --duration --inject-every --inject-at --inject-poisson
 *             --no-inject --prompt-tokens --inject-max-tokens --prompt-len --answer-len
 *             --bg-prompt-tokens --bg-answer-tokens --seed --request-rate --burstiness
 *             --ramp-up --max-concurrency --trace --trace-format --speedup --from --to
 *             --loop --max-requests --skip-bad-rows
 *   device    --gpu --model --model-config --params --lesson-flops --step-overhead
 *             --compute-efficiency --bandwidth-efficiency --gpu-memory-utilization
 *             --hardware --threads
 *   sched     --policy --max-num-batched-tokens --max-num-seqs --max-model-len --kv-blocks
 *             --enable-chunked-prefill --no-enable-chunked-prefill
 *   client    --target --endpoint --model-name --request-timeout --warmup --fidelity --insecure
 *             --transport
 *             --client-threads
 *   analysis  --no-baseline --stall-threshold
 *   shards    --shard --start-at (run only: experiment_shard_group, below)
 * Call experiment_preset first: --preset is applied before every other flag. */
opts_group experiment_workload_group(experiment_config *cfg);
opts_group experiment_device_group(experiment_config *cfg);
opts_group experiment_sched_group(experiment_config *cfg);
opts_group experiment_client_group(experiment_config *cfg);
opts_group experiment_analysis_group(experiment_config *cfg);
/* --disaggregate P:D --kv-link NAME|GB/s: prefill/decode disaggregation in the simulator
 * (sim.h); for `sim` and `sweep` (experiment_check refuses it for any other engine). */
opts_group experiment_disagg_group(experiment_config *cfg);
/* Apply --preset NAME from argv, if any, over cfg->wl; then, when argv has --request-rate or
 * --trace but no --users, no closed users (the open loop replaces them); --trace without
 * --duration sets duration_from_trace. 0, or -1 with err. */
int experiment_preset(experiment_config *cfg, int argc, char **argv, char *err);

/* What a --target must not write to disk. Owned by the caller. */
#define EXPERIMENT_MAX_HEADERS 32
typedef struct experiment_secrets {
    const char *api_key;                          /* Authorization: Bearer; NULL or "" */
    const char *headers[EXPERIMENT_MAX_HEADERS];  /* extra "Name: value" lines */
    int n_headers;
} experiment_secrets;
/* --api-key and --header (repeatable) into secrets. */
opts_group experiment_secrets_group(experiment_secrets *secrets);
/* After parsing: OPENAI_API_KEY (the environment's, never copied) when --api-key was not given. */
void experiment_secrets_from_env(experiment_secrets *secrets);

/* The executor of the embedded server for cfg (EXPERIMENT_EMULATE or EXPERIMENT_CPU):
 * free with (*out)->destroy(*out). Notes (a profile measured with other thread counts)
 * go to notes when not NULL. 0, or -1 with err. */
int experiment_create_executor(const experiment_config *cfg, FILE *notes, exec **out,
                               char *err);

/* ---- one run's record, config.json ------------------------------------------------ */

/* The wall clock a shard's t = 0 was read on, and how wrong the kernel says it may be
 * (adjtimex(2): maxerror and esterror are the NTP daemon's bounds, in us). Token stamps
 * stay CLOCK_MONOTONIC within a shard (steps of the wall clock never reach a gap); t = 0
 * is paired with CLOCK_REALTIME once, which places the shard on the common axis. */
typedef struct experiment_clock {
    int64_t maxerror_us;   /* the kernel's bound on |CLOCK_REALTIME - UTC|; -1 unknown */
    int64_t esterror_us;   /* its estimate of that error; -1 unknown */
    bool synchronized;     /* an NTP daemon disciplines the clock (no STA_UNSYNC, not TIME_ERROR) */
    int state;             /* adjtimex's return: TIME_OK 0 ... TIME_ERROR 5; -1 failed */
    int status;            /* timex.status (STA_* bits) */
    int64_t pair_error_ns; /* half the bracket of the (REALTIME, MONOTONIC) pair read at t = 0 */
    int64_t step_ns;       /* REALTIME - MONOTONIC at the end minus at t = 0: a clock step */
    char boot_id[40];      /* /proc/sys/kernel/random/boot_id: one kernel, one clock */
    char host[64];
} experiment_clock;

/* A run that `report --merge` made from shards. */
typedef struct experiment_merge {
    int shards;                   /* N of the experiment; 0: not a merged run */
    char merged[256];             /* the shard indices merged, "0,1,2,3" */
    char missing[256];            /* left out (absent or incomplete), "" when none */
    int users;                    /* background users of the merged shards */
    int64_t t0_realtime_ns;       /* the merged t = 0: the earliest shard's */
    int64_t clock_uncertainty_ns; /* bound on the clock offset between any two shards */
    int64_t clock_estimated_ns;   /* the same from the kernels' error estimates */
    bool one_host;                /* every shard read one kernel's clock */
} experiment_merge;

/* What a run adds to its configuration: which run, whether it finished, and what the
 * client learned about the server. Written beside the configuration in config.json. */
typedef struct experiment_meta {
    char label[64];          /* "baseline", "interference" */
    char engine_name[192];   /* experiment_engine_name at run time */
    char target[512];        /* the URL the client used, redacted (redact_url: no user:password,
                                no query values); "" in the simulator */
    bool complete;           /* false until the run ends well, and when it is cut short */
    char **argv;             /* the command line (owned), redacted (experiment_meta_set_argv) */
    int argc;
    /* HTTP runs: what the client found out and when t = 0 was */
    bool has_client;
    char served_model[128];  /* the "model" the requests carried */
    bool token_id_prompts;   /* prompts as token-id arrays (else calibrated text) */
    double text_overhead, text_tokens_per_word;
    bool timestamps;         /* the server sent emit times */
    int nice;                /* the client's scheduling priority */
    int64_t protocol_violations; /* server events the client ignored (docs/client.md) */
    char transport[8];       /* the transport the run used: "raw" | "curl" */
    /* Token events by the source of their time (transport_stamp): the kernel's receive stamp,
     * a kernel stamp shared by several events of one read (a bound), or user space. */
    int64_t stamps_kernel, stamps_kernel_coalesced, stamps_user;
    int64_t t0_monotonic_ns; /* t = 0 on this machine's CLOCK_MONOTONIC */
    /* The server's metrics: where they were scraped (redacted as target; "" not scraped), the
     * scrapes made, those that gave no row, and the rows of server_metrics.csv */
    char metrics_url[512];
    int64_t metrics_scrapes, metrics_scrape_failures, metrics_rows;
    /* Sharded runs: t = 0 on the wall clock, how late against the plan, and that clock */
    int64_t t0_realtime_ns;  /* ns since the epoch */
    int64_t start_late_ns;   /* t0_realtime_ns - the run's planned start */
    experiment_clock clock;
    experiment_merge merge;  /* merged runs (report --merge) */
    /* A trace replayed to its end (wl.until_trace_end): when its last request finished, ns
     * from t = 0, if that was before wl.duration_ns (the cap); 0 otherwise. The run pair
     * makes it the run's duration (config.json, the analysis). */
    int64_t ended_ns;
} experiment_meta;

/* {"transport", "kernel", "kernel_coalesced", "user"}: where an HTTP run's token events got
 * their times (fidelity.json and summary.json's "stamps"). */
json_t *experiment_stamps_json(const experiment_meta *meta);
/* The same, into the analysis options, so summary.json carries them however it is written
 * (by the run or by `report`). */
void experiment_meta_stamps(const experiment_meta *meta, analysis_options *opt);

/* Copy argv into meta through redact_argv (common/redact.h): the values of key flags
 * (--api-key, --header ...), URLs' credentials, and the same inside a --server-cmd template
 * masked. 0, or -1 (memory). */
int experiment_meta_set_argv(experiment_meta *meta, int argc, char **argv);
void experiment_meta_free(experiment_meta *meta);

/* config.json: the configuration and the run's record. The reader is the writer's
 * inverse: read(write(c, m)) gives back c and m field for field (the unit test checks
 * every one). A missing section keeps the defaults; a wrong type or value is an error.
 * The reader returns 0, or -1 with err ("config.json: cost.peak_flops: ..."). */
json_t *experiment_config_to_json(const experiment_config *cfg, const experiment_meta *meta);
int experiment_config_from_json(const json_t *json, experiment_config *cfg,
                                experiment_meta *meta, char *err);
/* Whether a and b can be compared as one experiment's two runs, or merged as two of its
 * shards: true when they differ in the engine, the workload (the injector switch aside), the
 * scheduler, the device, the target, or the shard count and start (the shard index aside);
 * field then names the first such key as config.json spells it, with both values
 * ("workload.users (4 vs 2)"). */
bool experiment_config_differ(const experiment_config *a, const experiment_config *b, char *field,
                              size_t size);
/* Both for a file: DIR/config.json is written atomically. */
int experiment_config_write(const char *path, const experiment_config *cfg,
                            const experiment_meta *meta, char *err);
int experiment_config_read(const char *path, experiment_config *cfg, experiment_meta *meta,
                           char *err);

/* ---- shards (shard.c, docs/distributed.md) ------------------------------------------- */

/* --shard I/N and --start-at TIME (run only). */
opts_group experiment_shard_group(experiment_config *cfg);
/* A start time: ISO-8601 UTC ("2026-12-01T10:00:00Z", "...:00.250Z", "+00:00" for Z) or
 * "now+DUR" ("now+30s") counted from now_ns (CLOCK_REALTIME, ns). A time not after now_ns,
 * or more than 7 days ahead, is refused. 0, or -1 with err. */
int experiment_parse_start_at(const char *text, int64_t now_ns, int64_t *out_ns, char *err);
/* ns since the epoch as ISO-8601 UTC: "2026-12-01T10:00:00Z", "...:00.25Z" (digits as needed). */
void experiment_format_utc(int64_t ns, char *buf, size_t size);
/* The planned t = 0 of a sharded run (CLOCK_REALTIME ns): start_at for the first run of the
 * pair; the second (the interference run after a baseline) starts its warm-up a settling
 * time after the first ends: start_at + duration + settle + warmup, settle = 2 s + 5 % of
 * the duration (time to write the first run's files and summary). */
int64_t experiment_shard_phase_start(const experiment_config *cfg, bool second);
/* This machine's clock now (adjtimex, boot id, host name); pair_error_ns and step_ns 0. */
void experiment_clock_read(experiment_clock *out);
/* Bound on the offset between two shards' t = 0 readings: 0 on one kernel (same boot id:
 * the merge places shards by their t0_monotonic_ns on its one CLOCK_MONOTONIC); else the
 * pairing errors and steps plus the sum of the two maxerror bounds (16 s each where
 * unknown: the kernel's own ceiling). estimated: the same with esterror. */
int64_t experiment_clock_uncertainty_ns(const experiment_clock *a, const experiment_clock *b,
                                        bool estimated);

/* ---- runners ---------------------------------------------------------------------- */

/* One run as the pair hands it to a runner. */
typedef struct experiment_phase {
    const experiment_config *cfg;
    const workload_config *wl;  /* cfg->wl with the injector on (interference) or off */
    const char *label;
    const char *dir;            /* OUT/<label>/ (exists, holds config.json); NULL: in memory */
    FILE *notes;                /* warnings, and progress unless quiet; NULL: nothing */
    bool quiet;                 /* no progress lines (--json): warnings only */
    const volatile sig_atomic_t *interrupted; /* non-zero: stop now (SIGINT); may be NULL */
    int64_t stall_threshold_ns; /* progress lines count gaps above it; 0: not known yet */
    /* A runner that streams (experiment_runner.streams) hands the run's rows to this
     * analysis as they come and leaves the log empty; the HTTP runner reads its limit on the
     * events held and says when it kept them on disk only. NULL: fill the log, keep all. */
    struct experiment_streaming *streaming;
} experiment_phase;

/* A streamed run: where its rows go, and what became of tokens.csv (the simulator writes it
 * as it goes, up to a limit: an hour of 256 users is 10^8 rows, 2.9 GB, and most of the
 * run's time). */
typedef struct experiment_streaming {
    analysis_stream *stream;       /* in: the run's analysis, begun */
    int64_t tokens_csv_max_events; /* in: keep tokens.csv up to this many events (0: default) */
    int64_t events;                /* out: token events of the run */
    bool tokens_csv_dropped;       /* out: more events than that: no tokens.csv */
    /* A live run (HTTP) holds at most this many token events in memory (0: the default);
     * past it the events leave as they are written (driver_phase.log_events_max) and the
     * run's tokens.csv and requests.csv, as written during the run, are its record. */
    int64_t log_events_max;        /* in */
    bool events_on_disk;           /* out: so the log has no events: summarize the files */
} experiment_streaming;

#define EXPERIMENT_LOG_EVENTS_MAX_DEFAULT ((int64_t)5000000) /* ~160 MB held */

#define EXPERIMENT_TOKENS_CSV_MAX_DEFAULT ((int64_t)5000000) /* ~140 MB of tokens.csv */

/* The shard side of an HTTP run, around the driver: wait until the run's warm-up should
 * begin (so t = 0 falls on the planned instant), then record where t = 0 fell. */
typedef struct experiment_shard_start {
    bool sharded;
    int64_t planned_ns;      /* the run's t = 0, CLOCK_REALTIME */
    int64_t offset_ns;       /* CLOCK_REALTIME - CLOCK_MONOTONIC, read before the run */
    experiment_clock clock;  /* read before the run */
} experiment_shard_start;
/* Not sharded: returns at once. Else waits (interruptible) and sets *warmup_ns to the
 * warm-up left before the planned t = 0. -1 with err when that instant has passed (the
 * shard was not ready in time) or on an interrupt. */
int experiment_shard_wait(const experiment_phase *ph, experiment_shard_start *st,
                          int64_t *warmup_ns, char *err);
/* After the run: t0_realtime_ns, start_late_ns and clock into meta (t0_mono_ns: the
 * driver's t = 0 on CLOCK_MONOTONIC). */
void experiment_shard_record(const experiment_shard_start *st, int64_t t0_mono_ns,
                             experiment_meta *meta);

/* A runner (a small vtable, like exec and transport). run() fills log (times from
 * the run's t = 0) and meta (complete, engine name, target, what the client learned), and
 * leaves tokens.csv, requests.csv and (where the engine is ours) steps.csv in phase->dir —
 * as it goes where it can, so a run that dies keeps what it received. It returns 0 when
 * the run took place, also when cut short (meta->complete false, err says why), and -1
 * with err when it could not take place at all. */
typedef struct experiment_runner {
    void *impl;
    const char *name; /* "sim", "http" */
    bool streams;     /* run() honours phase->streaming (else it always fills the log) */
    int (*run)(void *impl, const experiment_phase *phase, tokenlog *log, experiment_meta *meta,
               char *err);
    void (*destroy)(void *impl);
} experiment_runner;

/* The simulator. 0, or -1 with err. */
int experiment_runner_sim(experiment_runner *out, char *err);
/* HTTP: a fresh embedded server per run (this binary's `serve --config DIR/config.json` on a
 * free loopback port; needs phase->dir), or cfg->client.target. secrets are borrowed and
 * must outlive the runner. The first run probes the server (token-id prompts or calibrated
 * text); later runs reuse what it found. A load generator that stamps tokens in ms wants
 * the CPU when bytes arrive: the runner asks for nice -10 (root only; the embedded server
 * inherits it) and says in its first run's notes when it could not. 0, or -1 with err. */
int experiment_runner_http(experiment_runner *out, const experiment_secrets *secrets, char *err);
void experiment_runner_free(experiment_runner *r);

/* ---- the pair --------------------------------------------------------------------- */

/* A run owns its directory, so two experiments never mix in one OUT: dir is created when
 * absent and taken when empty; when it holds what an earlier run or sweep wrote (baseline/,
 * interference/, point-k/, plots/, comparison.json, report.html, sweep.json, sweep.csv,
 * merge.json)
 * force removes that first, else it is refused; a directory holding anything else is always
 * refused. 0, or -1 with err (bad input: the command's exit 2). */
int experiment_claim_dir(const char *dir, bool force, char *err);

/* A run directory written in one go (report --merge), so that a failure leaves nothing: it
 * is built in a staging directory beside OUT (OUT.<what>-PID, on OUT's file system) and its
 * entries move into OUT only when it is whole. */
typedef struct experiment_staging {
    char out[4096];  /* OUT as given */
    char dir[4200];  /* the staging directory ("": none) */
    char made[4096]; /* the shallowest parent of OUT this created ("": none) */
} experiment_staging;
/* Check that OUT could be claimed (experiment_claim_dir's rule; OUT itself is not touched),
 * then create the staging directory (and OUT's missing parents). 0, or -1 with err (bad
 * input: the command's exit 2). */
int experiment_stage_dir(experiment_staging *s, const char *out, bool force, const char *what,
                         char *err);
/* Claim OUT (with force its earlier run is removed now, not before) and move the staging
 * directory's entries into it, then remove the staging directory. 0; -2 with err when OUT is
 * refused (it changed since the check); -1 with err when a move failed (OUT then holds part
 * of the entries, the staging directory the rest). */
int experiment_stage_commit(experiment_staging *s, bool force, char *err);
/* Remove the staging directory and the parents experiment_stage_dir created (those still
 * empty). Nothing after a commit. */
void experiment_stage_abandon(experiment_staging *s);

typedef struct experiment_io {
    const char *out_dir;  /* artifacts root (created); NULL: in memory, summaries only */
    int argc;             /* the command line, for config.json */
    char **argv;
    FILE *notes;          /* the runners' warnings, and progress unless quiet; NULL: nothing */
    bool quiet;
    const volatile sig_atomic_t *interrupted;
    /* A streaming runner's limit on tokens.csv, and a live run's on the events it holds
     * (experiment_streaming; 0: the defaults). */
    int64_t tokens_csv_max_events;
    int64_t log_events_max;
} experiment_io;

typedef struct experiment_pair {
    analysis_summary baseline, interference;
    bool have_baseline, have_interference;
    bool complete; /* every run that ran went to its end */
    char why[320]; /* when !complete: which run stopped early or failed, and why */
} experiment_pair;

/* Run cfg: the baseline (unless cfg->no_baseline), whose p50 sets the interference run's
 * stall threshold, then the interference run; each written to OUT/<label>/ with its
 * config.json (first, marked incomplete, so a killed run is still reportable) and
 * summary.json; then OUT/comparison.json. An incomplete baseline ends the pair there (no
 * comparison against half a baseline). Returns 0 when the runs took place (pair->complete
 * says whether to the end), -1 with err when one could not (the summaries already made
 * are in *pair either way; experiment_pair_free it). */
int experiment_run_pair(const experiment_config *cfg, const experiment_runner *runner,
                        const experiment_io *io, experiment_pair *pair, char *err);
void experiment_pair_free(experiment_pair *pair);

/* ---- server flags ------------------------------------------------------------------- */

/* The flags vLLM, SGLang, llama.cpp and `stallscope serve` need to run one scheduler
 * setting (policy, token budget) for this workload: one line each, indented. */
void experiment_print_server_flags(FILE *out, const char *indent, sched_policy policy, int budget,
                                   const workload_config *wl);
/* The same with the running requests at most (vLLM --max-num-seqs, SGLang
 * --max-running-requests, llama.cpp --parallel, serve --max-num-seqs); 0: left at the
 * servers' defaults (llama.cpp: a slot per stream), as experiment_print_server_flags does. */
void experiment_print_server_setting(FILE *out, const char *indent, sched_policy policy,
                                     int budget, int max_num_seqs, const workload_config *wl);
/* The run's --print-server-flags: one-step prefill (the problem) and chunked prefill (the
 * fix) side by side, then how to point stallscope at the server. */
void experiment_print_server_guide(FILE *out, const experiment_config *cfg);

/* ---- a --target's server, started per configuration (server_cmd.c) ------------------ */

/* The --server-cmd template with its placeholders filled from cfg: {policy}
 * {max_num_batched_tokens} (also {budget}) {max_num_seqs} {chunked_prefill} (vLLM's
 * --enable-chunked-prefill or --no-enable-chunked-prefill) {port} {host} (of
 * cfg->client.target) {point} (the caller's label). 0, or -1 with err (unknown placeholder). */
int experiment_server_command(const char *tmpl, const experiment_config *cfg, const char *point,
                              char *out, size_t size, char *err);
/* Start it (output to log_path) and wait for the target's /health to answer 200, at most
 * timeout_ns. 0, or -1 with err (the server stopped again). */
int experiment_server_start(const char *tmpl, const experiment_config *cfg, const char *point,
                            const char *log_path, int64_t timeout_ns,
                            const volatile sig_atomic_t *interrupted, proc *server, char *err);
/* TERM, 30 s, then KILL; harmless on a server never started. */
void experiment_server_stop(proc *server);

/* ---- sweeps ------------------------------------------------------------------------- */

#define EXPERIMENT_SWEEP_MAX_AXES 2
#define EXPERIMENT_SWEEP_MAX_VALUES 16
#define EXPERIMENT_SWEEP_MAX_POINTS 64

typedef struct experiment_axis {
    char name[48];        /* the option: "prompt-tokens", "policy" ... */
    bool server_side;     /* the server must apply it (a --target needs --server-cmd) */
    char values[EXPERIMENT_SWEEP_MAX_VALUES][64]; /* as typed: "8k", "10s", "chunked" */
    int n_values;
} experiment_axis;

/* The options a sweep may vary. */
bool experiment_axis_known(const char *name, size_t len, bool *server_side);
/* Split "--name=A,B,C" (or "--name A,B") lists out of argv: the axes, and argv without them
 * in rest (rest[] holds pointers into argv, n_rest its count; sized argc). A sweepable
 * option with a single value stays in rest. 0, or -1 with err (too many axes, values). */
int experiment_axes_from_argv(int argc, char **argv, experiment_axis *axes, int *n_axes,
                              char **rest, int *n_rest, char *err);

typedef struct experiment_sweep_point {
    char label[32];      /* "point-3": OUT/point-3/ */
    int index[EXPERIMENT_SWEEP_MAX_AXES]; /* value index per axis */
    char status[16];     /* "ok", "refused", "failed" */
    char reason[256];
    char summary[160];   /* one line of figures when ok */
} experiment_sweep_point;

typedef struct experiment_sweep {
    experiment_config base;      /* every point starts from it */
    experiment_axis axes[EXPERIMENT_SWEEP_MAX_AXES];
    int n_axes;
    bool zip;                    /* pairwise instead of every combination */
    char server_cmd[2048];       /* a --target's server, started per point */
    int64_t server_timeout_ns;
    experiment_sweep_point points[EXPERIMENT_SWEEP_MAX_POINTS];
    int n_points;
} experiment_sweep;

/* Plan the points (every combination, the first axis varying fastest, or pairwise with
 * zip), checking every value through its option's parser and every point's configuration.
 * Refused points (a budget under the prompt with one-step prefill, say) are marked, not
 * errors. 0, or -1 with err (bad input). */
int experiment_sweep_plan(experiment_sweep *sw, char *err);
/* A point's configuration: the base with the point's values, resolved. 0, or -1 with err. */
int experiment_sweep_point_config(const experiment_sweep *sw, const experiment_sweep_point *pt,
                                  experiment_config *cfg, char *err);
/* "prompt-tokens=8k policy=chunked" */
void experiment_sweep_point_desc(const experiment_sweep *sw, const experiment_sweep_point *pt,
                                 char *buf, size_t size);
/* Run every planned point as a whole pair in OUT/point-k/ (a point whose run fails is
 * marked and the sweep goes on; a --server-cmd server is started before and stopped after
 * each point), then write OUT/sweep.json (the plan, each point's status and reason).
 * Returns the number of failed points, or -1 with err when the sweep itself failed. */
int experiment_sweep_run(experiment_sweep *sw, const experiment_runner *runner,
                         const experiment_io *io, char *err);
/* Each point's server flags (for a --target without --server-cmd). */
void experiment_sweep_print_flags(FILE *out, const experiment_sweep *sw);

#endif
