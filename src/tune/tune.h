/* tune — the scheduler setting a workload needs under its SLOs, found in the simulator and
 * checked live:
 *
 *     policy x max_num_batched_tokens x max_num_seqs (x prefix caching off/on, --prefix-caching)
 *     ->  one interference run each, in
 *     memory, in virtual time (the lesson: tens of ms)  ->  predicted figures  ->  the SLOs
 *     (gate rules that must hold)  ->  the Pareto front and the choice  ->  --verify: the top
 *     K candidates run live against a --target whose server is started per candidate
 *
 * The objectives: output throughput (every request, tok/s: more is better; per GPU, which is
 * the same on one instance, so that --disaggregate's P + D GPUs pay for themselves), TTFT p99 and
 * ITL p99.9 (gate's ttft.p99 and itl.p999: less is better). The choice is the feasible point
 * (servable, every SLO holds) with the most output throughput; throughputs within
 * TUNE_THROUGHPUT_TIE of the best tie (the closed loop's throughput barely moves with the
 * setting, and a 0.3 % gain is no reason to take a 20x tail), and a tie goes to the lower
 * ITL p99.9, then the lower TTFT p99, then the earlier point. With no feasible point, the
 * closest is the servable point whose worst SLO is broken least (normalised: how far past
 * its limit, as a fraction of the limit), and that SLO binds.
 *
 * A point the engine could never serve (one-step prefill with a budget under the longest
 * prompt) is "cannot serve" with experiment_check's reason, not an error. Each point runs
 * without a baseline: its stall threshold is 5 x its own p50.
 *
 * Nothing here prints except to a FILE given (progress); the tables and the page are the
 * report's (report/tune_table.h, report/html_tune.h). */
#ifndef STALLSCOPE_TUNE_H
#define STALLSCOPE_TUNE_H
#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "analysis/gate.h"
#include "experiment/config.h"
#include "experiment/pair.h"
#include "experiment/runner.h"

#define TUNE_MAX_POLICIES 3
#define TUNE_MAX_BUDGETS 24
#define TUNE_MAX_SEQS 16
#define TUNE_MAX_SETUPS 8         /* one instance, and up to 7 --disaggregate splits */
#define TUNE_THROUGHPUT_TIE 0.01 /* throughputs within 1 % of the best tie */

/* The figures a point is judged on, predicted or measured: figures of the metric table
 * (analysis/metric.h), named in tune.json by their metric_key. */
typedef struct tune_figures {
    double output_throughput; /* throughput.output: tok/s of the completed requests */
    double output_per_gpu;    /* output_throughput / the GPUs of the setting: the objective */
    double ttft_p99_ms;       /* ttft.p99: background requests */
    double itl_p50_ms;        /* itl.p50 */
    double itl_p999_ms;       /* itl.p999 */
    double itl_max_ms;        /* itl.max */
} tune_figures;

typedef struct tune_point {
    sim_disagg disagg;  /* prefill 0: one instance; else P prefill + D decode instances */
    sched_policy policy;
    int max_num_batched_tokens;
    int max_num_seqs;
    bool prefix_caching; /* --enable-prefix-caching for this point */
    bool servable;      /* false: the engine could not serve the workload so (why_not) */
    char why_not[256];
    tune_figures predicted;
    double slo_value[GATE_MAX_RULES]; /* each SLO's metric, predicted (NAN: not known) */
    bool feasible;      /* servable and every SLO holds */
    int worst_slo;      /* the SLO broken most (normalised), -1 when none is */
    double violation;   /* that SLO's normalised violation, 0 when none is broken */
    bool on_front;      /* servable and no servable point dominates it */
    int same_as;        /* -1, or the first point with exactly these predicted figures */
} tune_point;

typedef struct tune_config {
    experiment_config base; /* workload, device (resolved), client; sched's other fields */
    gate_rules slo;
    sched_policy policies[TUNE_MAX_POLICIES];
    int n_policies;
    int budgets[TUNE_MAX_BUDGETS];
    int n_budgets;
    int max_num_seqs[TUNE_MAX_SEQS];
    int n_max_num_seqs;
    /* Prefix caching off and/or on (--prefix-caching off|on|off,on): default the base's
     * setting alone (--enable-prefix-caching), both where the workload shares prefixes. */
    bool prefix_caching[2];
    int n_prefix_caching;
    /* The serving setups: setups[0] is one instance (prefill 0); --disaggregate adds P:D
     * splits (sim.h), each searched over the same policy x budget x max_num_seqs (each
     * instance gets that scheduler). The objective is then output tokens/s per GPU. */
    sim_disagg setups[TUNE_MAX_SETUPS];
    int n_setups;
} tune_config;

/* One candidate run live (--verify). */
typedef struct tune_verified {
    int point;          /* index in tune_result.points */
    bool ran;           /* false: why */
    char why[320];
    tune_figures measured;
    double slo_value[GATE_MAX_RULES];
    bool meets;         /* the live run meets every SLO */
    char dir[64];       /* "verify-1": OUT/verify-1/ */
} tune_verified;

typedef struct tune_result {
    tune_point *points; /* policy slowest, then budget, then max_num_seqs fastest */
    int n_points;
    int n_servable, n_feasible, n_front;
    int choice;         /* the chosen point, -1 when none is feasible */
    int closest;        /* with no choice: the closest servable point (-1: none servable) */
    int binding_slo;    /* the closest point's worst SLO */
    double search_s;    /* wall time of the search */
    tune_verified *verified;
    int n_verified;
} tune_result;

/* One instance (no --disaggregate), the lesson's workload and device, every policy, budgets 256, 512 ... 16384, max_num_seqs
 * 16, 32, 64, 128, 256 (105 points) and the SLOs TUNE_DEFAULT_SLO; no warm-up (--warmup 0):
 * the search and --verify's live runs both start cold unless --warmup is given. */
#define TUNE_DEFAULT_SLO "itl.p99.9<100ms,ttft.p99<2s"
int tune_defaults(tune_config *tc, char *err);

/* The lists as the command line gives them. Each 0, or -1 with err (bad input): an SLO that
 * gate_parse refuses or an empty one; an unknown policy; a budget or max_num_seqs that is
 * not a positive count (16k allowed), a repeated value, or too many values. */
int tune_parse_slo(const char *text, gate_rules *out, char *err);
int tune_parse_policies(const char *text, tune_config *tc, char *err);
int tune_parse_budgets(const char *text, tune_config *tc, char *err);
int tune_parse_max_num_seqs(const char *text, tune_config *tc, char *err);
/* "off", "on", "off,on" (either order, no repeat). */
int tune_parse_prefix_caching(const char *text, tune_config *tc, char *err);
/* After the flags: with no --prefix-caching, the base's setting alone, or off and on when
 * the workload shares prefixes (workload_shares_prefixes) and --enable-prefix-caching was
 * not given either way. */
void tune_default_prefix_caching(tune_config *tc, bool said);

/* --disaggregate "1:1,2:1" over --kv-link L (NULL or "": sim.h's default): the splits to
 * search beside one instance. 0, or -1 with err (bad input: a split or link sim.h refuses,
 * a repeated split, too many). */
int tune_parse_disaggregate(const char *splits, const char *kv_link, tune_config *tc, char *err);

/* The GPUs of a point's setting: 1, or P + D disaggregated. */
int tune_point_gpus(const tune_point *pt);
/* "chunked/2048/64", "1P:1D chunked/2048/64", "chunked/2048/64+pc" (prefix caching on) */
void tune_point_name(const tune_point *pt, char *buf, size_t size);
/* "sim h100-sxm llama-3.1-8b": the device and model the search priced steps with. */
void tune_engine_name(const tune_config *tc, char *buf, size_t size);
/* A point's configuration: the base with its scheduler setting. */
void tune_point_config(const tune_config *tc, const tune_point *pt, experiment_config *cfg);

/* Run the search: every point, then tune_analyse. progress (may be NULL) gets a line about
 * once a second; interrupted (may be NULL) stops the search early (err says so). 0, or -1
 * with err. The result is the caller's: tune_result_free. */
int tune_search(const tune_config *tc, tune_result *res, FILE *progress,
                const volatile sig_atomic_t *interrupted, char *err);

/* From the points' predicted figures and slo_value (filled by the search, or by hand in a
 * test): feasible, worst_slo, violation, same_as, on_front and the result's counts, choice,
 * closest and binding_slo. */
void tune_analyse(const gate_rules *slo, tune_result *res);

/* The feasible points in the choice's order (the choice first): up to k indices into out.
 * Returns how many. */
int tune_ranked(const tune_result *res, int *out, int k);

/* A value of the SLO's metric as people read it: "2,412 ms", "87.5 ms", "0.99". */
void tune_format_slo_value(const gate_rule *r, double v, char *buf, size_t size);
/* Why a point fails: its worst SLO as "itl.p99.9 = 2,412 ms > 100 ms" (the metric as the
 * SLO spelt it); a point that cannot serve gives its reason; "" when feasible. */
void tune_point_why(const gate_rules *slo, const tune_point *pt, char *buf, size_t size);

/* --verify: the top candidates (tune_ranked) run live. */
typedef struct tune_verify_options {
    const char *server_cmd;        /* template (experiment_server_command); "" or NULL: the
                                    * server at base.client.target is already up and set */
    int64_t server_timeout_ns;     /* its /health at most this late */
    int top;                       /* K */
    const experiment_runner *runner; /* HTTP (experiment_runner_http) */
} tune_verify_options;
/* Each candidate in OUT/verify-k/ (io->out_dir needed): its server started, the workload
 * run against base.client.target without a baseline (as the search ran it), the server
 * stopped; figures and SLO values into res->verified. A candidate that could not run is
 * marked (why) and the others go on. Returns the number that failed to run, or -1 with
 * err when none could be tried (no feasible point, no directory). */
int tune_verify(const tune_config *tc, tune_result *res, const tune_verify_options *vo,
                const experiment_io *io, char *err);

/* OUT/tune.json's document: the search (SLOs, lists, workload), every point (setting,
 * predicted figures, servable/why, feasible, each SLO's value and verdict, on the front),
 * the front, the choice (or the closest and its binding SLO), and the verified candidates. */
json_t *tune_to_json(const tune_config *tc, const tune_result *res);

void tune_result_free(tune_result *res);

#endif
