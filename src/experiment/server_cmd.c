/* server_cmd — a --target's server started per configuration from the user's command
 * template (sweep's points, tune's candidates): placeholders filled from the configuration,
 * the command in its own process group with its output in a log, /health awaited. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/fetch.h"
#include "client/url.h"
#include "common/clock.h"
#include "common/err.h"
#include "experiment/config.h"
#include "experiment/server_cmd.h"

#define SERVER_STOP_GRACE_NS (30 * CLOCK_NS_PER_S)

/* Replace {name} placeholders; -1 with err on an unknown one. */
static int expand_template(const char *tmpl, const char *const *keys, const char *const *vals,
                           int n, char *out, size_t size, char *err)
{
    size_t len = 0;
    for (const char *p = tmpl; *p;) {
        if (*p == '{') {
            const char *close = strchr(p, '}');
            if (!close)
                return err_set(err, "--server-cmd: unclosed '{' in '%s'", tmpl);
            size_t klen = (size_t)(close - p - 1);
            int k = -1;
            for (int i = 0; i < n; i++)
                if (strlen(keys[i]) == klen && strncmp(keys[i], p + 1, klen) == 0)
                    k = i;
            if (k < 0)
                return err_set(err, "--server-cmd: unknown placeholder {%.*s} (known: {policy} "
                                    "{max_num_batched_tokens} {budget} {max_num_seqs} "
                                    "{chunked_prefill} {prefix_caching} {port} {host} {point})",
                               (int)klen, p + 1);
            int w = snprintf(out + len, size - len, "%s", vals[k]);
            if (w < 0 || (size_t)w >= size - len)
                return err_set(err, "--server-cmd: too long once expanded");
            len += (size_t)w;
            p = close + 1;
            continue;
        }
        if (len + 1 >= size)
            return err_set(err, "--server-cmd: too long once expanded");
        out[len++] = *p++;
    }
    out[len] = '\0';
    return 0;
}

/* host and port of a URL ("http://127.0.0.1:8000/v1" -> "127.0.0.1", "8000"), past any
 * user:password@ (which would otherwise fill {host} and {port}, and the password the command). */
static void url_host_port(const char *url, char *host, size_t hs, char *port, size_t ps)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    const char *authority_end = p + strcspn(p, "/?#");
    for (const char *c = p; c < authority_end; c++)
        if (*c == '@')
            p = c + 1; /* the last '@' ends the userinfo */
    bool https = strncmp(url, "https", 5) == 0;
    size_t n;
    if (p[0] == '[' && memchr(p, ']', (size_t)(authority_end - p))) {
        /* An IPv6 literal: {host} is the address a server's --host takes, without brackets. */
        n = (size_t)((const char *)memchr(p, ']', (size_t)(authority_end - p)) - p);
        snprintf(host, hs, "%.*s", (int)(n - 1), p + 1);
        n++; /* past the ']' */
    } else {
        n = strcspn(p, ":/?#");
        snprintf(host, hs, "%.*s", (int)n, p);
    }
    if (p[n] == ':')
        snprintf(port, ps, "%.*s", (int)strcspn(p + n + 1, "/?#"), p + n + 1);
    else
        snprintf(port, ps, "%s", https ? "443" : "80");
}

static bool health_200(void *ctx, char *why, size_t size)
{
    const transport_options *so = ctx;
    int status = 0;
    char err[ERR_LEN] = "";
    if (fetch_http(so, "GET", "/health", NULL, 2 * CLOCK_NS_PER_S, &status, NULL, err) != 0) {
        snprintf(why, size, "%s", err);
        return false;
    }
    if (status != 200)
        snprintf(why, size, "HTTP %d", status);
    return status == 200;
}

int experiment_server_command(const char *tmpl, const experiment_config *cfg, const char *point,
                              char *out, size_t size, char *err)
{
    char host[256], port[32], budget[32], seqs[32];
    url_host_port(cfg->client.target, host, sizeof host, port, sizeof port);
    snprintf(budget, sizeof budget, "%d", cfg->sched.max_num_batched_tokens);
    snprintf(seqs, sizeof seqs, "%d", cfg->sched.max_num_seqs);
    const char *keys[] = {"policy", "max_num_batched_tokens", "budget", "max_num_seqs",
                          "chunked_prefill", "prefix_caching", "port", "host", "point"};
    const char *vals[] = {sched_policy_name(cfg->sched.policy), budget, budget, seqs,
                          cfg->sched.policy == SCHED_CHUNKED ? "--enable-chunked-prefill"
                                                             : "--no-enable-chunked-prefill",
                          cfg->sched.prefix_caching ? "--enable-prefix-caching"
                                                    : "--no-enable-prefix-caching",
                          port, host, point};
    return expand_template(tmpl, keys, vals, (int)(sizeof keys / sizeof keys[0]), out, size, err);
}

/* The shell's own words: a program that is not a file. */
static bool shell_word(const char *w)
{
    static const char *const words[] = {
        "exec", "cd",    ".",     "source", "export", "set",  "unset", "ulimit", "umask",
        "eval", "command", "builtin", "if", "for",    "while", "until", "case", "!",
        "{",    "time",  "trap",  "true",   "false",  ":",    "exit",  "return", "wait",
        "read", "test",  "[",     "echo",   "printf", "kill", "type",  "alias",  "local"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcmp(w, words[i]) == 0)
            return true;
    return false;
}

/* The first word of a shell command at *p (one plain or wholly quoted word), into word;
 * *p past it. False when the shell would have to expand it ($, globs, ~, escapes) or the
 * command opens with something else (a subshell, a redirection). */
static bool first_word(const char **p, char *word, size_t size)
{
    const char *s = *p + strspn(*p, " \t\n");
    size_t n;
    if (*s == '\'' || *s == '"') {
        const char *close = strchr(s + 1, *s);
        if (!close || (close[1] && !strchr(" \t\n;&|", close[1])))
            return false;
        n = (size_t)(close - s - 1);
        if (*s == '"' && memchr(s + 1, '$', n) != NULL)
            return false;
        snprintf(word, size, "%.*s", (int)n, s + 1);
        *p = close + 1;
    } else {
        n = strcspn(s, " \t\n;&|<>()");
        if (n == 0)
            return false;
        snprintf(word, size, "%.*s", (int)n, s);
        *p = s + n;
        if (strpbrk(word, "$`\\*?[~'\"") != NULL)
            return false;
    }
    return n > 0 && n < size;
}

static bool executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* Whether the shell finds program on PATH (an empty entry is the working directory). */
static bool on_path(const char *program)
{
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/bin:/bin";
    for (const char *dir = path;;) {
        const size_t len = strcspn(dir, ":");
        char full[4200];
        snprintf(full, sizeof full, "%.*s%s%s", (int)len, len ? dir : ".", "/", program);
        if (executable(full))
            return true;
        if (!dir[len])
            return false;
        dir += len + 1;
    }
}

int experiment_server_command_check(const char *tmpl, const experiment_config *cfg,
                                    bool *names_port, char *err)
{
    char cmd[4096], word[1024], host[256], port[32];
    if (experiment_server_command(tmpl, cfg, "check", cmd, sizeof cmd, err) != 0)
        return -1;
    url_host_port(cfg->client.target, host, sizeof host, port, sizeof port);
    *names_port = strstr(tmpl, "{port}") != NULL || strstr(cmd, port) != NULL;
    const char *p = cmd;
    /* Past VAR=value assignments (bounded by the command's length). */
    while (first_word(&p, word, sizeof word)) {
        const char *eq = strchr(word, '=');
        if (eq && eq > word && strspn(word, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                            "0123456789_") == (size_t)(eq - word))
            continue;
        if (shell_word(word))
            return 0;
        if (strchr(word, '/') ? executable(word) : on_path(word))
            return 0;
        return err_set(err, "--server-cmd: %s: %s", word,
                       strchr(word, '/') ? "no executable file there"
                                         : "not found on PATH: give its path");
    }
    return 0; /* a first word only the shell can resolve */
}

int experiment_server_start(const char *tmpl, const experiment_config *cfg, const char *point,
                            const char *log_path, int64_t timeout_ns,
                            const volatile sig_atomic_t *interrupted, proc *server, char *err)
{
    char cmd[4096];
    memset(server, 0, sizeof *server);
    if (experiment_server_command(tmpl, cfg, point, cmd, sizeof cmd, err) != 0)
        return -1;
    proc_spec spec = {.shell = cmd, .log_path = log_path, .die_with_parent = true};
    if (proc_start(server, &spec, err) != 0)
        return -1;
    transport_options so = {.base_url = cfg->client.target, .insecure = cfg->client.insecure};
    char why[ERR_LEN];
    if (proc_wait_ready(server, health_200, &so, timeout_ns, 250 * CLOCK_NS_PER_MS, interrupted,
                        why) != 0) {
        experiment_server_stop(server);
        char base[600];
        url_base(cfg->client.target, base, sizeof base);
        return err_set(err, "%s/health did not answer 200: %s", base, why);
    }
    return 0;
}

void experiment_server_stop(proc *server)
{
    if (server->pid > 0)
        proc_stop(server, SERVER_STOP_GRACE_NS);
}
