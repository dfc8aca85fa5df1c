/* cli_common — what several commands share: the usage error, the output options, the
 * engine choice, interrupt handling. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/err.h"

int cli_usage_error(const char *cmd, const char *msg)
{
    fprintf(stderr, "stallscope %s: %s\n", cmd, msg);
    return CLI_EXIT_USAGE;
}

static const opts_spec output_specs[] = {
    OPTS_STRING("out", "DIR", "artifacts directory", cli_output, out),
    OPTS_FLAG("json", "print the results as JSON instead of the table", cli_output, json),
    OPTS_FLAG("no-report", "skip OUT/report.html and OUT/plots/ (rebuild later: stallscope report)",
              cli_output, no_report),
    OPTS_FLAG("force", "replace the earlier run in OUT (default: an OUT that holds one is refused)",
              cli_output, force),
};

opts_group cli_output_group(cli_output *out, const char *default_dir)
{
    if (!out->out[0])
        snprintf(out->out, sizeof out->out, "%s", default_dir);
    return (opts_group){"output", output_specs, OPTS_COUNT(output_specs), out};
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
