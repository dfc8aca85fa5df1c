/* config_json — one run's record and config.json (config_json.c): the configuration and
 * what the run adds to it, written and read by one table per section. */
#ifndef STALLSCOPE_EXPERIMENT_CONFIG_JSON_H
#define STALLSCOPE_EXPERIMENT_CONFIG_JSON_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "analysis/analysis.h"
#include "experiment/config.h"

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
    int64_t protocol_violations; /* server events the client ignored (docs/reference/run.md) */
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

#endif
