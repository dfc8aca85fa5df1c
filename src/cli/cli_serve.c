/* stallscope serve — the embedded OpenAI-compatible server (server.h,
 * docs/reference/server-api.md).
 * Prints exactly one line on stdout when it accepts connections:
 *     listening on http://HOST:PORT
 * (the load generator starts `serve --port 0` and waits for it), then serves until SIGINT
 * or SIGTERM, and exits 0 after ending the streams in flight. `--config FILE` runs exactly
 * the engine and scheduler a run's config.json records (how `run` starts it). The cpu engine
 * warms up first (exec.warm: KV arena allocated, buffers touched, one budget-sized step)
 * and logs how long that took on stderr; only then does it bind, print the line and answer
 * /health. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "engine/cpu/cpu_forward.h"
#include "engine/cpu/cpu_kernels.h"
#include "engine/exec_cpu.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/options.h"
#include "server/server.h"

typedef struct serve_flags {
    server_config server;
    char config[1024];
    bool no_realtime;
    bool no_warm_start;
    bool verbose;
} serve_flags;

#define F serve_flags
static const opts_spec server_specs[] = {
    OPTS_STRING("host", "ADDR", "address to listen on (default 127.0.0.1)", F, server.host),
    OPTS_INT("port", "N", "port (default 8000; 0: a free port, printed in the ready line)", F,
             server.port, 0, 65535),
    OPTS_STRING("api-key", "KEY", "require 'Authorization: Bearer KEY' on /v1/ (default: none)",
                F, server.api_key),
    OPTS_STRING("served-model-name", "NAME", "model name the API answers to (default: --model)", F,
                server.model_name),
    OPTS_STRING("step-log", "FILE", "write steps.csv rows (CLOCK_MONOTONIC ns) for every engine step",
                F, server.step_log_path),
    OPTS_STRING("sched-events", "FILE",
                "write sched_events.csv rows (CLOCK_MONOTONIC ns): each preemption, re-admission "
                "and request left out of a step, naming the request by the id its body's "
                "stallscope extension gave (\"request\"), else the server's own",
                F, server.sched_log_path),
    OPTS_INT64("max-body-size", "BYTES", "largest request body (default 4M; larger: 413)", F,
               server.max_body_bytes, 1024, (int64_t)1 << 30),
    OPTS_INT("max-waiting", "N",
             "requests waiting for the engine (queued or in prefill) at most; more are answered "
             "429 (default 4096)",
             F, server.max_waiting, 1, 1 << 24),
    OPTS_DURATION("request-read-timeout", "DUR",
                  "a request's headers and body must arrive within this, and a client must read "
                  "its reply's bytes within it (default 30s)",
                  F, server.read_timeout_ns, CLOCK_NS_PER_MS, 3600 * CLOCK_NS_PER_S),
    OPTS_FLAG("no-realtime",
              "keep the engine thread SCHED_OTHER (default: try SCHED_FIFO for precise step timing)",
              F, no_realtime),
    OPTS_FLAG("no-slots",
              "under --kv-layout unified, do not offer POST /slots/{id}?action=erase (as "
              "llama.cpp's --no-slots): a server whose retained cells no client can drop",
              F, server.no_slots),
    OPTS_FLAG("no-warm-start",
              "answer at once: skip the warm-up step before listening (cpu engine)",
              F, no_warm_start),
    OPTS_STRING("config", "FILE",
                "run the engine and scheduler a config.json records (replaces their flags)", F,
                config),
    OPTS_FLAG("verbose",
              "say more on stderr at start: the cpu engine's kernel dispatch (the instruction "
              "set it runs, what the CPU has, STALLSCOPE_CPU_ISA, OpenBLAS's core) and its "
              "threads (from how many rows a decode step splits into one part per thread)",
              F, verbose),
};
#undef F

/* A thousand streams need a thousand descriptors: raise the soft limit to the hard one. */
static void raise_fd_limit(void)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
}

/* The engine and scheduler: from --config, else from the flags. */
static int engine_config(const serve_flags *f, experiment_config *cfg, int argc, char **argv,
                         char *err)
{
    if (!f->config[0])
        return experiment_resolve(cfg, err);
    static const char *const replaced[] = {"engine", "gpu", "model", "model-config", "hardware",
                                           "policy", "max-num-batched-tokens", "threads"};
    for (size_t i = 0; i < sizeof replaced / sizeof replaced[0]; i++)
        if (opts_find(argc, argv, replaced[i]))
            return err_set(err, "--config replaces the engine and scheduler flags (--%s too)",
                           replaced[i]);
    if (experiment_config_read(f->config, cfg, NULL, err) != 0)
        return -1;
    if (cfg->engine != EXPERIMENT_EMULATE && cfg->engine != EXPERIMENT_CPU)
        return err_set(err, "%s: the %s engine is not one serve runs (emulate | cpu)", f->config,
                       experiment_engine_label(cfg->engine));
    return 0;
}

int cli_serve(int argc, char **argv)
{
    serve_flags f;
    memset(&f, 0, sizeof f);
    strcpy(f.server.host, "127.0.0.1");
    f.server.port = 8000;
    f.server.max_body_bytes = SERVER_DEFAULT_MAX_BODY;
    f.server.handle_signals = true;
    experiment_config cfg;
    experiment_defaults(&cfg, EXPERIMENT_CPU);
    cli_engine_choice engine = {.engine = EXPERIMENT_CPU};
    const opts_group groups[] = {
        {"server", server_specs, OPTS_COUNT(server_specs), &f},
        cli_engine_group(&engine),
        experiment_device_group(&cfg),
        experiment_sched_group(&cfg),
    };
    if (opts_show_help(stdout, argc, argv, "stallscope serve [options]",
                       "The embedded OpenAI-compatible server (vLLM's API) in front of a "
                       "continuous-batching engine.\nPrints 'listening on http://HOST:PORT' "
                       "when ready; SIGINT/SIGTERM end the streams in flight and exit 0.\n"
                       "The default engine is the cpu engine (model 'small'): before it "
                       "listens it warms up\n(allocates its KV arena, runs one budget-sized "
                       "step), which takes seconds\n(--no-warm-start skips it).\n"
                       "--engine emulate emulates a GPU of the catalog instead, ready at once.",
                       groups, OPTS_COUNT(groups)))
        return CLI_EXIT_OK;
    char err[ERR_LEN] = "";
    if (opts_parse(argc, argv, groups, OPTS_COUNT(groups), NULL, 0, NULL, err) != 0)
        return cli_usage_error("serve", err);
    cfg.engine = engine.engine;
    if (engine_config(&f, &cfg, argc, argv, err) != 0)
        return cli_usage_error("serve", err);
    if (f.server.no_slots && cfg.sched.kv_layout != SCHED_KV_UNIFIED)
        return cli_usage_error("serve", "--no-slots needs --kv-layout unified (a paged cache "
                                        "has no slots)");
    const bool cpu = cfg.engine == EXPERIMENT_CPU;
    /* A busy SCHED_FIFO thread gets throttled by the kernel (~50 ms a second): the real
     * engine must stay SCHED_OTHER. Only the emulator's sleeps benefit from FIFO. */
    f.server.realtime = !cpu && !f.no_realtime;
    f.server.sched = cfg.sched;
    if (!f.server.model_name[0])
        snprintf(f.server.model_name, sizeof f.server.model_name, "%s", cfg.cost.arch.name);

    if (cpu && f.verbose) {
        char isa[256];
        cpu_isa_describe(isa, sizeof isa);
        fprintf(stderr, "stallscope serve: %s\n", isa);
    }
    exec *executor = NULL;
    if (experiment_create_executor(&cfg, stderr, &executor, err) != 0) {
        fprintf(stderr, "stallscope serve: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    if (cpu && f.verbose) {
        const int threads = exec_cpu_threads(executor);
        if (threads > 1)
            fprintf(stderr,
                    "stallscope serve: cpu engine: %d threads; a decode step of %d rows or "
                    "more (%d a thread) runs as one part of its sequences per thread, a "
                    "smaller step shares each section\n",
                    threads, threads * CPU_FORWARD_SPLIT_ROWS, CPU_FORWARD_SPLIT_ROWS);
        else
            fprintf(stderr, "stallscope serve: cpu engine: 1 thread; every step runs on it\n");
    }
    /* Warm start (cpu engine): the KV arena allocated, the largest step's buffers touched
     * and one budget-sized step run before the port is bound, so /health cannot say ready
     * (nor a request arrive) before it is done. */
    if (executor->warm && !f.no_warm_start) {
        exec_warm_info warm;
        fprintf(stderr, "stallscope serve: warm start: allocating the KV arena, one step of up "
                        "to %d tokens ...\n",
                cfg.sched.max_num_batched_tokens);
        if (executor->warm(executor, &cfg.sched, &warm, err) != 0) {
            fprintf(stderr, "stallscope serve: warm start: %s\n", err);
            executor->destroy(executor);
            return CLI_EXIT_FAIL;
        }
        fprintf(stderr,
                "stallscope serve: warm start done in %.0f ms: KV arena %.0f MB (%.0f MB "
                "resident, the rest as blocks are first used), buffers %.0f MB, warm-up step "
                "of %d tokens over %d sequences %.0f ms\n",
                warm.ns / 1e6, warm.kv_bytes / 1e6, warm.kv_resident_bytes / 1e6,
                warm.scratch_bytes / 1e6, warm.step_tokens, warm.step_seqs,
                warm.forward_ns / 1e6);
    }
    /* A client that vanishes mid-write must be an error return, not a fatal signal. */
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    server *srv = server_create(&f.server, executor, err);
    if (!srv) {
        fprintf(stderr, "stallscope serve: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    const bool v6 = strchr(f.server.host, ':') != NULL;
    printf("listening on http://%s%s%s:%d\n", v6 ? "[" : "", f.server.host, v6 ? "]" : "",
           server_port(srv));
    fflush(stdout);
    fprintf(stderr,
            "stallscope serve: %s on %s (%s), policy %s, max_num_batched_tokens %d, "
            "max_num_seqs %d, max_model_len %d, %lld KV blocks%s%s\n",
            f.server.model_name, cfg.cost.gpu.name, cpu ? "cpu engine" : "emulated",
            sched_policy_name(f.server.sched.policy), f.server.sched.max_num_batched_tokens,
            f.server.sched.max_num_seqs, f.server.sched.max_model_len,
            (long long)f.server.sched.kv_blocks,
            f.server.sched.prefix_caching ? ", prefix caching on" : "",
            f.server.sched.kv_layout != SCHED_KV_UNIFIED ? ""
            : f.server.no_slots ? ", unified KV cache (slots keep their cells; no slot erase)"
                                : ", unified KV cache (slots keep their cells)");
    int rc = server_run(srv, err);
    if (rc != 0)
        fprintf(stderr, "stallscope serve: %s\n", err);
    server_free(srv);
    return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
