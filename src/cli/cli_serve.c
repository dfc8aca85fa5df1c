/* stallscope serve — the embedded OpenAI-compatible server (server.h, docs/server.md).
 * Prints exactly one line on stdout when it accepts connections:
 *     listening on http://HOST:PORT
 * (the load generator starts `serve --port 0` and waits for it), then serves until SIGINT
 * or SIGTERM, and exits 0 after ending the streams in flight. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/units.h"
#include "engine/exec_emulate.h"
#include "server/server.h"

typedef struct serve_opts {
    server_config server;
    char engine[16];
} serve_opts;

static int srv_host(void *c, const char *v, char *err)
{
    serve_opts *o = c;
    if (!v[0] || strlen(v) >= sizeof o->server.host)
        return err_set(err, "'%s' is empty or too long", v);
    strcpy(o->server.host, v);
    return 0;
}

static int srv_port(void *c, const char *v, char *err)
{
    int64_t port;
    if (units_parse_count(v, &port, err) != 0)
        return -1;
    if (port < 0 || port > 65535)
        return err_set(err, "%lld is not a port (0..65535; 0 picks a free one)", (long long)port);
    ((serve_opts *)c)->server.port = (int)port;
    return 0;
}

static int srv_api_key(void *c, const char *v, char *err)
{
    serve_opts *o = c;
    if (!v[0] || strlen(v) >= sizeof o->server.api_key)
        return err_set(err, "the key is empty or longer than %zu bytes",
                       sizeof o->server.api_key - 1);
    strcpy(o->server.api_key, v);
    return 0;
}

static int srv_model_name(void *c, const char *v, char *err)
{
    serve_opts *o = c;
    if (!v[0] || strlen(v) >= 64)
        return err_set(err, "'%s' is empty or longer than 63 bytes", v);
    strcpy(o->server.model_name, v);
    return 0;
}

static int srv_step_log(void *c, const char *v, char *err)
{
    serve_opts *o = c;
    if (!v[0] || strlen(v) >= sizeof o->server.step_log_path)
        return err_set(err, "'%s' is empty or too long", v);
    strcpy(o->server.step_log_path, v);
    return 0;
}

static int srv_engine(void *c, const char *v, char *err)
{
    serve_opts *o = c;
    if (strcmp(v, "emulate") != 0 && strcmp(v, "cpu") != 0)
        return err_set(err, "unknown engine '%s' (emulate or cpu)", v);
    strcpy(o->engine, v);
    return 0;
}

static int srv_max_body(void *c, const char *v, char *err)
{
    int64_t n;
    if (units_parse_count(v, &n, err) != 0)
        return -1;
    if (n < 1024 || n > ((int64_t)1 << 30))
        return err_set(err, "%lld bytes is out of range [1024, 2^30]", (long long)n);
    ((serve_opts *)c)->server.max_body_bytes = (size_t)n;
    return 0;
}

static int srv_max_waiting(void *c, const char *v, char *err)
{
    int64_t n;
    if (units_parse_count(v, &n, err) != 0)
        return -1;
    if (n < 1 || n > (1 << 24))
        return err_set(err, "%lld is out of range [1, 2^24]", (long long)n);
    ((serve_opts *)c)->server.max_waiting = (int)n;
    return 0;
}

static int srv_read_timeout(void *c, const char *v, char *err)
{
    int64_t ns;
    if (units_parse_duration_ns(v, &ns, err) != 0)
        return -1;
    if (ns < CLOCK_NS_PER_MS || ns > 3600 * CLOCK_NS_PER_S)
        return err_set(err, "'%s' is out of range [1ms, 1h]", v);
    ((serve_opts *)c)->server.read_timeout_ns = ns;
    return 0;
}

static int srv_no_realtime(void *c, const char *v, char *err)
{
    (void)v, (void)err;
    ((serve_opts *)c)->server.realtime = false;
    return 0;
}

static const opts_spec server_specs[] = {
    {"host", "ADDR", "address to listen on (default 127.0.0.1)", srv_host},
    {"port", "N", "port (default 8000; 0: a free port, printed in the ready line)", srv_port},
    {"engine", "E", "cpu (default: a real forward pass on this CPU) | emulate (a GPU of the "
     "catalog, the cost model in real time)",
     srv_engine},
    {"api-key", "KEY", "require 'Authorization: Bearer KEY' on /v1/ (default: none)",
     srv_api_key},
    {"served-model-name", "NAME", "model name the API answers to (default: --model)",
     srv_model_name},
    {"step-log", "FILE", "write steps.csv rows (CLOCK_MONOTONIC ns) for every engine step",
     srv_step_log},
    {"max-body-size", "BYTES", "largest request body (default 4M; larger: 413)", srv_max_body},
    {"max-waiting", "N", "requests waiting for the engine (queued or in prefill) at most; more "
     "are answered 429 (default 4096)", srv_max_waiting},
    {"request-read-timeout", "DUR", "a request's headers and body must arrive within this, "
     "and a client must read its reply's bytes within it (default 30s)", srv_read_timeout},
    {"no-realtime", NULL, "keep the engine thread SCHED_OTHER (default: try SCHED_FIFO for "
     "precise step timing)", srv_no_realtime},
};

/* A thousand streams need a thousand descriptors: raise the soft limit to the hard one. */
static void raise_fd_limit(void)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
}

int cli_serve(int argc, char **argv)
{
    serve_opts o;
    memset(&o, 0, sizeof o);
    strcpy(o.server.host, "127.0.0.1");
    o.server.port = 8000;
    o.server.max_body_bytes = SERVER_DEFAULT_MAX_BODY;
    o.server.handle_signals = true;
    o.server.realtime = true;
    strcpy(o.engine, "cpu");
    cli_engine_cfg engine_cfg;
    cli_sched_cfg sched_cfg;
    cli_engine_defaults(&engine_cfg);
    cli_sched_defaults(&sched_cfg);

    const opts_group groups[] = {
        {"server", server_specs, (int)(sizeof server_specs / sizeof server_specs[0]), &o},
        cli_engine_group(&engine_cfg),
        cli_sched_group(&sched_cfg),
    };
    const int n_groups = (int)(sizeof groups / sizeof groups[0]);
    if (opts_wants_help(argc, argv)) {
        opts_print_help(stdout, "stallscope serve [options]",
                        "The embedded OpenAI-compatible server (vLLM's API) in front of a "
                        "continuous-batching engine.\nPrints 'listening on http://HOST:PORT' "
                        "when ready; SIGINT/SIGTERM end the streams in flight and exit 0.",
                        groups, n_groups);
        return CLI_EXIT_OK;
    }
    char err[ERR_LEN] = "";
    if (opts_parse(argc, argv, groups, n_groups, NULL, 0, NULL, err) != 0)
        return cli_usage_error("serve", err);
    const bool cpu = strcmp(o.engine, "cpu") == 0;
    if (cpu) {
        cli_engine_cpu_defaults(&engine_cfg);
        /* A busy SCHED_FIFO thread gets throttled by the kernel (~50 ms a second): the real
         * engine must stay SCHED_OTHER. Only the emulator's sleeps benefit from FIFO. */
        o.server.realtime = false;
    }

    cost_params cost;
    if (cli_engine_resolve(&engine_cfg, &cost, err) != 0 ||
        cli_sched_resolve(&sched_cfg, &cost, engine_cfg.gpu_memory_utilization, err) != 0)
        return cli_usage_error("serve", err);
    o.server.sched = sched_cfg.sched;
    if (!o.server.model_name[0])
        snprintf(o.server.model_name, sizeof o.server.model_name, "%s", cost.arch.name);

    exec *executor = NULL;
    if (cpu ? cli_engine_create_cpu(&engine_cfg, &cost, &o.server.sched, &executor, err) != 0
            : !(executor = exec_emulate_create(&cost, err))) {
        fprintf(stderr, "stallscope serve: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    /* A client that vanishes mid-write must be an error return, not a fatal signal. */
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    server *srv = server_create(&o.server, executor, err);
    if (!srv) {
        fprintf(stderr, "stallscope serve: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    const bool v6 = strchr(o.server.host, ':') != NULL;
    printf("listening on http://%s%s%s:%d\n", v6 ? "[" : "", o.server.host, v6 ? "]" : "",
           server_port(srv));
    fflush(stdout);
    fprintf(stderr,
            "stallscope serve: %s on %s (%s), policy %s, max_num_batched_tokens %d, "
            "max_num_seqs %d, max_model_len %d, %lld KV blocks\n",
            o.server.model_name, cost.gpu.name, cpu ? "cpu engine" : "emulated",
            sched_policy_name(o.server.sched.policy),
            o.server.sched.max_num_batched_tokens, o.server.sched.max_num_seqs,
            o.server.sched.max_model_len, (long long)o.server.sched.kv_blocks);
    int rc = server_run(srv, err);
    if (rc != 0)
        fprintf(stderr, "stallscope serve: %s\n", err);
    server_free(srv);
    return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
