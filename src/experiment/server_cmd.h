/* server_cmd — a --target's server, started per configuration (server_cmd.c): sweep's
 * points, tune's candidates. */
#ifndef STALLSCOPE_EXPERIMENT_SERVER_CMD_H
#define STALLSCOPE_EXPERIMENT_SERVER_CMD_H
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/proc.h"
#include "experiment/config.h"

/* The --server-cmd template with its placeholders filled from cfg: {policy}
 * {max_num_batched_tokens} (also {budget}) {max_num_seqs} {chunked_prefill} (vLLM's
 * --enable-chunked-prefill or --no-enable-chunked-prefill) {port} {host} (of
 * cfg->client.target) {point} (the caller's label). 0, or -1 with err (unknown placeholder). */
int experiment_server_command(const char *tmpl, const experiment_config *cfg, const char *point,
                              char *out, size_t size, char *err);
/* Before anything runs (a search, a sweep's first point): the template expands (its
 * placeholders are known) and the program it starts exists: the first word of the command,
 * past VAR=value assignments, is executable (a path) or found on PATH. A first word the
 * shell alone can resolve (a builtin or keyword, `exec`, one with $ or a glob) is taken as
 * it is. 0, or -1 with err naming the program (bad input). *names_port: whether the command
 * names {port} or the port of cfg->client.target, so the server can listen where --target
 * points. */
int experiment_server_command_check(const char *tmpl, const experiment_config *cfg,
                                    bool *names_port, char *err);
/* Start it (output to log_path) and wait for the target's /health to answer 200, at most
 * timeout_ns. 0, or -1 with err (the server stopped again). */
int experiment_server_start(const char *tmpl, const experiment_config *cfg, const char *point,
                            const char *log_path, int64_t timeout_ns,
                            const volatile sig_atomic_t *interrupted, proc *server, char *err);
/* TERM, 30 s, then KILL; harmless on a server never started. */
void experiment_server_stop(proc *server);

#endif
