/* config — the experiment's configuration (config.c): where the tokens come from, the
 * workload, the scheduler, the device and the client; the lesson's defaults (the one place
 * they live), its resolution against the catalog, its checks and its names. Its flags are
 * options.h's, its file config_json.h's. */
#ifndef STALLSCOPE_EXPERIMENT_CONFIG_H
#define STALLSCOPE_EXPERIMENT_CONFIG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "client/driver.h"
#include "client/transport.h"
#include "client/transport_kind.h"
#include "engine/cost.h"
#include "engine/exec.h"
#include "engine/sched.h"
#include "sim/sim.h"
#include "workload/workload.h"

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
    transport_kind transport; /* auto (raw unless a proxy applies) | raw | curl */
    char extra_body[2048];      /* --extra-body: a JSON object merged into every request */
    int threads;                /* event loops of the load generator: --client-threads, else
                                   the CPUs the server leaves (experiment_client_threads,
                                   recorded by experiment_resolve) */
    bool threads_given;         /* threads came from --client-threads */
    /* The server's Prometheus metrics into server_metrics.csv (runner_http.c,
     * docs/guide/measure-your-server.md): "" (auto: the target's /metrics when it answers;
     * not for the embedded server, whose step log says more), "on" (the server's /metrics,
     * embedded included), "off", or the exposition's URL. */
    char scrape_metrics[512];
} experiment_client;

/* Shards (docs/guide/shards.md): which share of the load this process runs is the
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
    /* --enable-prefix-caching or --no-enable-prefix-caching was given: a --hardware
     * profile's detected prefix caching does not override it (experiment_resolve_cost) */
    bool prefix_caching_said;
    bool kv_layout_said, max_num_seqs_said; /* --kv-layout, --max-num-seqs given */
    int64_t stall_threshold_ns; /* 0: 5 x the baseline's p50 (the run's own without one) */
    experiment_shard shard;   /* --start-at (with --shard I/N, which sets wl.shard) */
    char label[128];          /* --label: the user's name for this experiment */
    char metadata[1024];      /* --metadata k=v ...: "k=v" lines, '\n' between them */
    char metric_percentiles[64]; /* --metric-percentiles "50,90,99,99.9"; "": the default */
    char goodput[128];        /* --goodput "ttft:2000 tpot:100" (ms); "": no SLO */
    sim_disagg disagg;        /* --disaggregate P:D --kv-link L (simulator only; 0:0 off) */
    /* --trace or --num-prompts without --duration (experiment_preset): experiment_resolve
     * plans the whole trace, or every prompt, for the duration's cap (workload_until_end) and
     * clears it. Not in config.json: the resolved wl.until_trace_end and wl.duration_ns are. */
    bool duration_until_end;
    /* --request-rate inf|max: every open-loop request at t = 0 (wl.request_rate 0), which
     * needs --num-prompts (experiment_resolve checks). Not in config.json: num_prompts with
     * request_rate 0 is the same. */
    bool rate_all_at_once;
} experiment_config;


/* What a --target must not write to disk. Owned by the caller. */
#define EXPERIMENT_MAX_HEADERS 32
typedef struct experiment_secrets {
    const char *api_key;                          /* Authorization: Bearer; NULL or "" */
    const char *headers[EXPERIMENT_MAX_HEADERS];  /* extra "Name: value" lines */
    int n_headers;
} experiment_secrets;

/* The lesson, everywhere (the one place its numbers live): 32 users, an 8,000-token prompt
 * at 5, 15, 25, 35 s of a 40 s run, one-step prefill (mixed, max_num_batched_tokens 16384,
 * max_num_seqs 256, 16-token blocks), an H100 SXM running Llama 3.1 8B (the cpu engine: this
 * CPU running "small"), a 30 s request timeout and 2 s of warm-up. */
#define EXPERIMENT_DEFAULT_GPU "h100-sxm"
#define EXPERIMENT_DEFAULT_MODEL "llama-3.1-8b"
#define EXPERIMENT_CPU_DEVICE "cpu"
#define EXPERIMENT_CPU_MODEL "small"
void experiment_defaults(experiment_config *cfg, experiment_engine engine);
void experiment_lesson_sched(sched_config *sched);

const char *experiment_engine_label(experiment_engine engine); /* "sim", "emulate" ... */
int experiment_engine_parse(const char *text, experiment_engine *out, char *err);

/* Resolve the device into cfg->cost and complete cfg->sched (max_model_len from the model,
 * KV blocks from the device's memory unless given); with duration_until_end, plan the trace
 * or the --num-prompts requests for the duration (workload_until_end: a bad trace is bad
 * input here; with --num-prompts and --duration the run ends at the last request's end or
 * at the duration, whichever comes first); record the
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
/* True when the injector is on (no --no-inject) but no injection falls inside the run (the
 * first at --inject-at is at or past --duration): then the interference run is a second
 * baseline. The warning, naming both times and the flags that fix it, into buf. */
bool experiment_no_injection_inside(const experiment_config *cfg, char *buf, size_t size);

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

/* The executor of the embedded server for cfg (EXPERIMENT_EMULATE or EXPERIMENT_CPU):
 * free with (*out)->destroy(*out). Notes (a profile measured with other thread counts)
 * go to notes when not NULL. 0, or -1 with err. */
int experiment_create_executor(const experiment_config *cfg, FILE *notes, exec **out,
                               char *err);

#endif
