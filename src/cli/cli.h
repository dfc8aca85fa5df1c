/* cli — one thin file per subcommand: parse the options, call one module function, print.
 * Every command returns its exit status: 0 fine, 1 the run failed, 2 bad input (one clear
 * line on stderr, no artifacts claiming success). */
#ifndef STALLSCOPE_CLI_H
#define STALLSCOPE_CLI_H
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "analysis/analysis.h"
#include "analysis/gate.h"
#include "common/opts.h"
#include "engine/fit.h"
#include "experiment/config.h"

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

int cli_model(int argc, char **argv);
int cli_sim(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_report(int argc, char **argv);
int cli_sweep(int argc, char **argv);
int cli_calibrate(int argc, char **argv);
int cli_tune(int argc, char **argv);
int cli_metrics(int argc, char **argv);
int cli_proxy(int argc, char **argv);

/* Print "stallscope <cmd>: <msg>" on stderr and return CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *msg);

/* calibrate --target URL (cli_calibrate_target.c): cli_calibrate hands argv over. */
int cli_calibrate_target(int argc, char **argv);
/* What both calibrations print the same way (cli_common.c): a probe's shape ("decode 32 x
 * ctx 512", "prefill 8000 tokens"), and the fit's residuals with the terms held at 0. */
void cli_calibrate_probe_shape(const fit_probe *p, char *buf, size_t size);
void cli_calibrate_print_residuals(const fit_result *fr);

/* --out DIR --json --no-report --force: where the artifacts go and what is printed. */
typedef struct cli_output {
    char out[1024]; /* --out as given ("": none), then the directory claimed */
    bool json;      /* comparison.json (or sweep.json) on stdout instead of the table */
    bool no_report; /* no report.html, no plots */
    bool force;     /* replace an earlier run's artifacts in OUT (experiment_claim_dir) */
    const char *default_dir; /* the command's OUT without --out ("out/sim") */
} cli_output;
opts_group cli_output_group(cli_output *out, const char *default_dir);
/* After parsing: claim OUT (experiment_claim_dir). --out as given is refused when it holds
 * an earlier run, unless --force; without --out the command's default directory is taken,
 * or when it holds an earlier run the next free one beside it (experiment_default_dir:
 * out/sim-2, out/sim-3 ...), said in one line on stderr. out->out is then the directory. 0,
 * or -1 with err (bad input: the command's exit 2). */
int cli_output_claim(cli_output *out, const char *cmd, char *err);
/* The directory a command writes without --out (experiment_default_dir) into out, with the
 * line on stderr when it is not default_dir itself. 0, or -1 with err. */
int cli_default_dir(const char *cmd, const char *default_dir, bool force, char *out,
                    size_t size, char *err);
/* --server-cmd TEMPLATE (sweep, tune --verify), checked before anything runs
 * (experiment_server_command_check): a program not found is bad input (-1 with err; for
 * `stallscope` itself err names this binary's path), and a command that names neither {port}
 * nor --target's port gets a warning on stderr. */
int cli_check_server_cmd(const char *cmd, const char *tmpl, const experiment_config *cfg,
                         char *err);
/* "stallscope CMD: warning: no injection falls inside the run ..." on stderr when it is so
 * (experiment_no_injection_inside): a run that would show no interference says why. */
void cli_warn_no_injection(const char *cmd, const experiment_config *cfg);
/* --config FILE in argv: a JSON object of long flags ({"users": 64, "no-baseline": true,
 * "header": ["A: b", "C: d"]}; false or null leaves a flag off) expanded in front of the
 * other arguments, which come after and so win. argc/argv then point at the expanded list
 * (alive until exit). 0 (nothing to do, or done), or -1 with err (file:line for bad JSON). */
int cli_config_args(int *argc, char ***argv, char *err);

/* --fail-if RULES (analysis/gate.h): parsed with the options, applied after the run. */
typedef struct cli_gate {
    gate_rules rules;
    bool given;
    char save_result[1024]; /* --save-result FILE: vLLM's result keys (experiment_save_result) */
    bool save_detailed;     /* --save-detailed: with its per-request arrays */
} cli_gate;
opts_group cli_gate_group(cli_gate *gate);
/* The flags together: --save-detailed needs --save-result. 0, or -1 with err. */
int cli_gate_check(const cli_gate *gate, char *err);
/* The command's exit status after its run: status itself unless it is CLI_EXIT_OK and a
 * rule fails (then GATE_EXIT_FAILED, 99). Every rule is printed with its value, PASS or FAIL,
 * to out. The summary is analysis_summary_to_json's, or a summary.json file's. */
int cli_gate_apply(const cli_gate *gate, const analysis_summary *summary, int status, FILE *out);
/* After a pair that completed: --save-result (the interference run's files in
 * out_dir/interference), then the rules. The status to exit with. */
int cli_gate_finish(const cli_gate *gate, const experiment_config *cfg,
                    const analysis_summary *summary, const char *out_dir, int status, FILE *out);
int cli_gate_apply_file(const cli_gate *gate, const char *summary_json, int status, FILE *out);

/* --engine E for run (cpu | emulate) and sweep (sim | emulate | cpu). */
typedef struct cli_engine_choice {
    experiment_engine engine;
    bool allow_sim;
    bool given;
} cli_engine_choice;
opts_group cli_engine_group(cli_engine_choice *choice);

/* SIGINT and SIGTERM set the returned flag (a run then ends its streams and keeps what
 * it received); SIGPIPE is ignored (a vanished peer is an error return, not a death). */
const volatile sig_atomic_t *cli_catch_interrupts(void);

#endif
