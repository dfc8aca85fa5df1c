/* stallscope proxy — the production sidecar (proxy/proxy.h, docs/guide/production.md): an
 * HTTP/1.1 reverse proxy in front of one OpenAI-compatible server that forwards every request
 * untouched, times every token of its streams, and exports the stalls and their causes as
 * Prometheus metrics (and, with --out, as run's files). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/units.h"
#include "proxy/proxy.h"

typedef struct proxy_flags {
    proxy_config cfg;
    bool no_admin;
    char ready_file[1024];
} proxy_flags;

/* --stall-threshold 5x (times the rolling p50 of recent gaps) or a duration (150ms). */
static int apply_threshold(void *ctx, const char *value, char *err)
{
    proxy_flags *f = ctx;
    size_t n = strlen(value);
    char *end = NULL;
    if (n > 1 && (value[n - 1] == 'x' || value[n - 1] == 'X')) {
        double k = strtod(value, &end);
        if (end != value + n - 1 || !(k > 1) || k > 1000)
            return err_set(err, "--stall-threshold '%s': a factor over 1 (5x) or a duration (150ms)", value);
        f->cfg.obs.stall_factor = k;
        f->cfg.obs.stall_abs_ns = 0;
        return 0;
    }
    int64_t ns = 0;
    if (units_parse_duration_ns(value, &ns, err) != 0 || ns <= 0)
        return err_set(err, "--stall-threshold '%s': a factor over 1 (5x) or a duration (150ms)", value);
    f->cfg.obs.stall_abs_ns = ns;
    return 0;
}

#define F proxy_flags
static const opts_spec proxy_specs[] = {
    OPTS_STRING("upstream", "URL",
                "the server to forward to: http(s)://HOST:PORT[/base] (required; credentials in "
                "it become Basic auth and are never written anywhere)",
                F, cfg.upstream),
    OPTS_STRING("listen", "HOST:PORT", "where clients connect (default 127.0.0.1:8001; port 0: any)",
                F, cfg.listen),
    OPTS_STRING("admin", "HOST:PORT",
                "where GET /metrics (Prometheus) and /health answer (default 127.0.0.1:9464)", F,
                cfg.admin),
    OPTS_FLAG("no-admin", "no admin port (no metrics)", F, no_admin),
    OPTS_STRING("name", "NAME", "the metrics' upstream label (default: the upstream's HOST:PORT)",
                F, cfg.name),
    OPTS_STRING("out", "DIR",
                "write the observed streams' rows (tokens.csv, requests.csv, stalls.csv, hourly) "
                "under DIR/<session>/, for `stallscope report DIR` (default: none)",
                F, cfg.out),
    OPTS_FRACTION("sample", "FRACTION",
                  "the fraction of streams written to --out (default 1; the metrics count every "
                  "stream)",
                  F, cfg.sample),
    OPTS_FN("stall-threshold", "5x|DUR",
            "a stall is a gap above this: a factor of the rolling median of recent gaps "
            "(default 5x), or a duration (150ms)",
            apply_threshold),
    OPTS_INT("window-gaps", "N", "gaps the rolling median is taken over (default 65536)", F,
             cfg.obs.window_gaps, 64, 1 << 22),
    OPTS_FLAG("insecure", "https upstream: skip certificate checks", F, cfg.insecure),
    OPTS_DURATION("connect-timeout", "DUR",
                  "no connection to the upstream within this: 504 (default 10s)", F,
                  cfg.connect_timeout_ns, CLOCK_NS_PER_MS, 600 * CLOCK_NS_PER_S),
    OPTS_DURATION("idle-timeout", "DUR",
                  "a client connection idle this long between requests is closed (default 300s)",
                  F, cfg.idle_timeout_ns, CLOCK_NS_PER_S, 86400 * CLOCK_NS_PER_S),
    OPTS_INT64("max-body-size", "BYTES", "largest request body (default 64M; larger: 413)", F,
               cfg.max_body, 1024, (int64_t)1 << 32),
    OPTS_INT("max-connections", "N",
             "client connections at once; more are closed as they arrive (default 20000)", F,
             cfg.max_conns, 1, 1 << 20),
    OPTS_DURATION("duration", "DUR", "stop after this long (default: until SIGINT/SIGTERM)", F,
                  cfg.duration_ns, CLOCK_NS_PER_MS, 365 * 86400 * CLOCK_NS_PER_S),
    OPTS_STRING("ready-file", "FILE",
                "once listening, write 'PORT ADMIN_PORT' there (scripts that use port 0)", F,
                ready_file),
    OPTS_FLAG("quiet", "no progress line every minute", F, cfg.quiet),
};
#undef F

int cli_proxy(int argc, char **argv)
{
    proxy_flags f;
    memset(&f, 0, sizeof f);
    proxy_config_default(&f.cfg);
    const opts_group groups[] = {{"proxy", proxy_specs, OPTS_COUNT(proxy_specs), &f}};
    if (opts_show_help(stdout, argc, argv, "stallscope proxy --upstream URL [options]",
                       "A reverse proxy in front of any OpenAI-compatible server (one per "
                       "replica: a sidecar).\nIt forwards every request untouched, times every "
                       "token of the /v1/completions and\n/v1/chat/completions streams it "
                       "carries (the kernel's receive stamp), and names the long\nprompt "
                       "that froze the others: stalls and causes on /metrics (Prometheus), "
                       "rows with --out.\nNo prompt or answer text is kept: lengths and "
                       "times only. SIGINT/SIGTERM stop it.",
                       groups, OPTS_COUNT(groups)))
        return CLI_EXIT_OK;
    char err[ERR_LEN] = "";
    if (opts_parse(argc, argv, groups, OPTS_COUNT(groups), NULL, 0, NULL, err) != 0)
        return cli_usage_error("proxy", err);
    if (!f.cfg.upstream[0])
        return cli_usage_error("proxy", "--upstream URL is required (the server to forward to: "
                                        "http://127.0.0.1:8000)");
    if (f.no_admin)
        f.cfg.admin[0] = '\0';
    if (f.ready_file[0])
        f.cfg.ready_file = f.ready_file;
    /* Ten thousand streams need twenty thousand descriptors: the soft limit to the hard. */
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
    /* A client holds two descriptors (its own and its upstream's); 64 for the rest. By
     * default no more clients than the limit allows are taken (past it, accept fails and
     * clients wait in the backlog); a --max-connections above it is kept, with a warning. */
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
        (uint64_t)f.cfg.max_conns * 2 + 64 > (uint64_t)lim.rlim_cur) {
        const int allowed = lim.rlim_cur > 66 ? (int)((lim.rlim_cur - 64) / 2) : 1;
        const bool given = opts_find(argc, argv, "max-connections") != NULL;
        fprintf(stderr,
                "stallscope proxy: %s%d client connections fit the descriptor limit (%llu, "
                "two a client; raise it: ulimit -n, systemd LimitNOFILE=)%s\n",
                given ? "warning: only " : "", allowed, (unsigned long long)lim.rlim_cur,
                given ? "" : ": --max-connections lowered to that");
        if (!given)
            f.cfg.max_conns = allowed;
    }
    if (proxy_run(&f.cfg, err) != 0) {
        fprintf(stderr, "stallscope proxy: %s\n", err);
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}
