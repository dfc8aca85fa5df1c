/* cli_common — what several commands share: the usage error, the output options, the
 * engine choice, interrupt handling, the calibrations' probe lines. */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/err.h"
#include "common/fsio.h"
#include "experiment/config.h"
#include "experiment/outdir.h"
#include "experiment/pair.h"
#include "experiment/server_cmd.h"
#include "experiment/result.h"

int cli_usage_error(const char *cmd, const char *msg)
{
    fprintf(stderr, "stallscope %s: %s\n", cmd, msg);
    return CLI_EXIT_USAGE;
}

/* --config FILE: the file's flags, expanded before the command line's (cli_config_args);
 * reaching the parser means it was not expanded. */
static int config_seen(void *c, const char *v, char *err)
{
    (void)c, (void)v;
    return err_set(err, "--config may be given once");
}

static const opts_spec output_specs[] = {
    OPTS_FN("config", "FILE",
            "flags from a JSON object ({\"users\": 64, \"no-baseline\": true}); the command "
            "line's win",
            config_seen),
    OPTS_STRING("out", "DIR",
                "artifacts directory, new or empty (one holding an earlier run: --force). "
                "Without it: the command's OUT, or when that holds an earlier run the next "
                "free name beside it (out/sim-2, out/sim-3 ...)",
                cli_output, out),
    OPTS_FLAG("json", "print the results as JSON instead of the table", cli_output, json),
    OPTS_FLAG("no-report", "skip OUT/report.html and OUT/plots/ (rebuild later: stallscope report)",
              cli_output, no_report),
    OPTS_FLAG("force",
              "replace the earlier run in OUT (default: an --out that holds one is refused, the "
              "command's own OUT moves on to the next free name)",
              cli_output, force),
};

opts_group cli_output_group(cli_output *out, const char *default_dir)
{
    out->default_dir = default_dir;
    return (opts_group){"output", output_specs, OPTS_COUNT(output_specs), out};
}

int cli_default_dir(const char *cmd, const char *default_dir, bool force, char *out,
                    size_t size, char *err)
{
    if (experiment_default_dir(default_dir, force, out, size, err) != 0)
        return -1;
    if (strcmp(out, default_dir) != 0)
        fprintf(stderr, "stallscope %s: %s holds an earlier run: this one goes to %s (--out DIR "
                        "to choose, --force to replace %s)\n",
                cmd, default_dir, out, default_dir);
    return 0;
}

int cli_output_claim(cli_output *out, const char *cmd, char *err)
{
    if (!out->out[0] &&
        cli_default_dir(cmd, out->default_dir, out->force, out->out, sizeof out->out, err) != 0)
        return -1;
    return experiment_claim_dir(out->out, out->force, err);
}

static int engine_choice(void *c, const char *v, char *err)
{
    cli_engine_choice *ch = c;
    experiment_engine e;
    if (experiment_engine_parse(v, &e, NULL) != 0 || e == EXPERIMENT_REMOTE ||
        (e == EXPERIMENT_SIM && !ch->allow_sim))
        return err_set(err, "unknown engine '%s' (%s)", v,
                       ch->allow_sim ? "sim | emulate | cpu" : "emulate | cpu");
    ch->engine = e;
    ch->given = true;
    return 0;
}

static const opts_spec run_engine_specs[] = {
    OPTS_FN("engine", "E",
            "embedded server's executor: cpu (default: a real forward pass) | emulate (a GPU)",
            engine_choice),
};
static const opts_spec sweep_engine_specs[] = {
    OPTS_FN("engine", "E",
            "sim (default: in process, virtual time) | emulate | cpu (the embedded server)",
            engine_choice),
};

opts_group cli_engine_group(cli_engine_choice *choice)
{
    return choice->allow_sim
               ? (opts_group){"engine", sweep_engine_specs, OPTS_COUNT(sweep_engine_specs), choice}
               : (opts_group){"engine", run_engine_specs, OPTS_COUNT(run_engine_specs), choice};
}

int cli_check_server_cmd(const char *cmd, const char *tmpl, const experiment_config *cfg,
                         char *err)
{
    bool names_port = true;
    if (experiment_server_command_check(tmpl, cfg, &names_port, err) != 0) {
        char self[1024];
        const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        const size_t len = strlen(err);
        if (strncmp(err, "--server-cmd: stallscope: ", 26) == 0 && n > 0 && len < ERR_LEN - 1) {
            self[n] = '\0';
            if (snprintf(err + len, ERR_LEN - len, "; this one is %s", self) >=
                (int)(ERR_LEN - len))
                err[len] = '\0'; /* the hint whole, or not at all */
        }
        return -1;
    }
    if (!names_port)
        fprintf(stderr, "stallscope %s: warning: --server-cmd names neither {port} nor the port "
                        "of --target %s: unless its server listens there by default, each start "
                        "waits --server-timeout for /health and fails\n",
                cmd, cfg->client.target);
    return 0;
}

void cli_warn_no_injection(const char *cmd, const experiment_config *cfg)
{
    char why[512];
    if (experiment_no_injection_inside(cfg, why, sizeof why))
        fprintf(stderr, "stallscope %s: warning: %s\n", cmd, why);
}

void cli_calibrate_probe_shape(const fit_probe *p, char *buf, size_t size)
{
    if (p->prompt_tokens > 0)
        snprintf(buf, size, "prefill %d tokens", p->prompt_tokens);
    else
        snprintf(buf, size, "decode %d x ctx %.0f", p->batch, p->context_sum / p->batch);
}

void cli_calibrate_print_residuals(const fit_result *fr)
{
    printf("  residuals (relative): decode rms %.1f %%, prefill rms %.1f %%, largest %.1f %%\n",
           fr->decode_rms * 100, fr->prefill_rms * 100, fr->max_abs * 100);
    static const char *const terms[] = {"step", "per-sequence", "per-context-token", "per-token",
                                        "attention"};
    for (int t = 0; t < 5; t++)
        if (fr->dropped[t])
            printf("  note: the %s term came out negative and is held at 0\n", terms[t]);
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

const volatile sig_atomic_t *cli_catch_interrupts(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return &interrupted;
}

/* The expanded argv lives until exit; its first config_words words are the file's. */
static char **config_argv;
static int config_words;

static void free_config_argv(void)
{
    for (int i = 0; i < config_words; i++)
        free(config_argv[i]);
    free(config_argv);
}

/* One JSON value as flag text: strings as they are, integers and reals in full. */
static int config_value_text(const char *key, json_t *v, char **out, char *err)
{
    char num[64];
    if (json_is_string(v)) {
        *out = strdup(json_string_value(v));
    } else if (json_is_integer(v)) {
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        *out = strdup(num);
    } else if (json_is_real(v)) {
        snprintf(num, sizeof num, "%.17g", json_real_value(v));
        *out = strdup(num);
    } else {
        return err_set(err, "--config: \"%s\": a string, a number, true or a list of them", key);
    }
    return *out ? 0 : err_set(err, "out of memory");
}

int cli_config_args(int *argc, char ***argv, char *err)
{
    int at = -1;
    for (int i = 0; i < *argc; i++)
        if (strcmp((*argv)[i], "--config") == 0) {
            if (at >= 0)
                return err_set(err, "--config may be given once");
            at = i;
        }
    if (at < 0)
        return 0;
    if (at + 1 >= *argc)
        return err_set(err, "--config needs a FILE");
    const char *path = (*argv)[at + 1];
    char why[ERR_LEN];
    json_t *root = fsio_read_json(path, JSON_REJECT_DUPLICATES, why);
    if (!root)
        return err_set(err, "--config: %s", why);
    if (!json_is_object(root)) {
        json_decref(root);
        return err_set(err, "--config %s: not a JSON object of flags", path);
    }
    /* At most two words per value: the flag and its value; lists add one pair each. */
    size_t cap = (size_t)*argc + 1;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) cap += 2 * (json_is_array(v) ? json_array_size(v) : 1);
    char **out = calloc(cap, sizeof *out);
    int n = 0, rc = 0;
    if (!out)
        rc = err_set(err, "out of memory");
    json_object_foreach(root, key, v)
    {
        if (rc != 0)
            break;
        if (!key[0] || key[0] == '-' || strcmp(key, "config") == 0) {
            rc = err_set(err, "--config %s: \"%s\" is not a flag name (write \"users\" for "
                              "--users)",
                         path, key);
            break;
        }
        char flag[160];
        snprintf(flag, sizeof flag, "--%s", key);
        if (json_is_false(v) || json_is_null(v))
            continue; /* a flag left off */
        size_t count = json_is_array(v) ? json_array_size(v) : 1;
        for (size_t i = 0; i < count && rc == 0; i++) {
            json_t *item = json_is_array(v) ? json_array_get(v, i) : v;
            if (!(out[n++] = strdup(flag))) {
                rc = err_set(err, "out of memory");
            } else if (!json_is_true(item)) {
                rc = config_value_text(key, item, &out[n], err);
                n += rc == 0;
            }
        }
    }
    json_decref(root);
    const int words = n;
    for (int i = 0; rc == 0 && i < *argc; i++)
        if (i != at && i != at + 1)
            out[n++] = (*argv)[i]; /* the command line's, after the file's: they win */
    if (rc != 0) {
        for (int i = 0; i < n && out; i++)
            free(out[i]); /* only the file's words: the command line's are not there yet */
        free(out);
        return -1;
    }
    config_argv = out;
    config_words = words;
    atexit(free_config_argv);
    *argc = n;
    *argv = config_argv;
    return 0;
}

/* ---- --fail-if ---------------------------------------------------------------------------- */

static int gate_rules_fn(void *c, const char *v, char *err)
{
    cli_gate *g = c;
    if (g->given)
        return err_set(err, "give every rule in one --fail-if, separated by commas");
    g->given = true;
    return gate_parse(v, &g->rules, err);
}

static const opts_spec gate_specs[] = {
    OPTS_STRING("save-result", "FILE",
                "the interference run under `vllm bench serve`'s keys: its settings (model_id, "
                "num_prompts, request_rate, burstiness, max_concurrency ...), TTFT, TPOT, ITL, "
                "E2E and throughputs (mean_ttft_ms, p99_itl_ms ...); stallscope's figures under "
                "\"stallscope\"",
                cli_gate, save_result),
    OPTS_FLAG("save-detailed",
              "--save-result also holds each request's input_lens, output_lens, ttfts, itls, "
              "start_times, latencies, errors and generated_texts (vLLM's keys; the texts null: "
              "the answers' text is not kept)",
              cli_gate, save_detailed),
    OPTS_FN("fail-if", "RULES",
            "exit 99 when any rule holds after the run, e.g. 'itl.max>200ms,stalls>0' "
            "(metrics: itl.p50 .. itl.max, ttft.*, stalls, stalls.prefill, spike_ratio, ...: "
            "'stallscope metrics' lists them)",
            gate_rules_fn),
};

opts_group cli_gate_group(cli_gate *gate)
{
    return (opts_group){"results and CI gate", gate_specs, OPTS_COUNT(gate_specs), gate};
}

int cli_gate_check(const cli_gate *gate, char *err)
{
    if (gate->save_detailed && !gate->save_result[0])
        return err_set(err, "--save-detailed adds to --save-result FILE: give it");
    return 0;
}

int cli_gate_finish(const cli_gate *gate, const experiment_config *cfg,
                    const analysis_summary *summary, const char *out_dir, int status, FILE *out)
{
    if (status != CLI_EXIT_OK)
        return status;
    char err[ERR_LEN], run_dir[4200];
    if (gate->save_result[0]) {
        /* The run's directory is its label: interference, or --no-inject's traffic. */
        if (fsio_join(run_dir, sizeof run_dir, out_dir,
                      summary->label[0] ? summary->label : EXPERIMENT_RUN_INTERFERENCE, err) != 0 ||
            experiment_save_result(gate->save_result, cfg, summary, run_dir, gate->save_detailed,
                                   err) != 0) {
            fprintf(stderr, "stallscope: --save-result: %s\n", err);
            return CLI_EXIT_FAIL;
        }
        fprintf(out, "result:    %s\n", gate->save_result);
    }
    return cli_gate_apply(gate, summary, status, out);
}

int cli_gate_apply_file(const cli_gate *gate, const char *summary_json, int status, FILE *out)
{
    if (!gate->given || status != CLI_EXIT_OK)
        return status;
    char err[ERR_LEN];
    json_t *root = fsio_read_json(summary_json, 0, err);
    if (!root) {
        fprintf(stderr, "stallscope: --fail-if: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    int failed = gate_eval(&gate->rules, root, out);
    json_decref(root);
    return failed > 0 ? GATE_EXIT_FAILED : status;
}

int cli_gate_apply(const cli_gate *gate, const analysis_summary *summary, int status, FILE *out)
{
    if (!gate->given || status != CLI_EXIT_OK)
        return status;
    json_t *root = analysis_summary_to_json(summary);
    if (!root) {
        fprintf(stderr, "stallscope: --fail-if: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    int failed = gate_eval(&gate->rules, root, out);
    json_decref(root);
    return failed > 0 ? GATE_EXIT_FAILED : status;
}
