/* driver_api — how the load generator talks to a server: the endpoint, the model, prompts
 * of exact lengths, the body of each request, and the probe that finds out what the server
 * takes (a part of the driver module, driver.h).
 *
 * Prompts have exact lengths: token-id arrays where the server takes them (driver_probe
 * finds out once), else text calibrated against the server's usage.prompt_tokens. Every
 * prompt's content is unique (seeded by phase, user, request), so a prefix cache cannot
 * hide a prefill. Answers are made long with ignore_eos + max_tokens; a server that ends
 * early anyway just makes the user start its next request sooner. */
#ifndef STALLSCOPE_DRIVER_API_H
#define STALLSCOPE_DRIVER_API_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "client/transport.h"
#include "workload/workload.h"

typedef enum { DRIVER_COMPLETIONS = 0, DRIVER_CHAT = 1 } driver_endpoint;

/* How to talk to this server: filled by the caller and driver_probe. */
typedef struct driver_api {
    driver_endpoint endpoint;
    char model[128];      /* "model" of each request; "" to leave it out */
    bool token_ids;       /* prompts as arrays of token ids (probed) */
    double text_overhead; /* text prompts: server tokens = overhead + per_word x words */
    double text_per_word;
    bool text_calibrated; /* false: the server reported no usage, lengths unverified */
    int vocab;            /* ids are drawn from [100, vocab) */
    bool timestamps;      /* ask for stallscope's per-chunk emit_ns ("stallscope" field) */
    bool request_ids;     /* name each request in the server's sched log by its id here
                             ("stallscope": {"request": N}): the embedded server */
    const char *extra_body; /* a JSON object merged over every body (--extra-body); NULL: none */
} driver_api;

void driver_api_defaults(driver_api *api);
/* "completions" | "chat" */
int driver_endpoint_parse(const char *text, driver_endpoint *out, char *err);
const char *driver_endpoint_path(driver_endpoint e);

/* Probe once: does the server take token-id prompts (a 1-token answer to an 8-token id
 * prompt, with usage agreeing)? If not, calibrate text against usage.prompt_tokens with two
 * prompt sizes. Notes go to `notes` (stderr). -1 with err when the server cannot be used
 * at all (refused, every probe failed). timeout bounds each probe request. */
int driver_probe(const transport *t, driver_api *api, const workload_config *wl, int64_t timeout_ns,
                 FILE *notes, char *err);

/* The JSON body of one request (malloc'ed, caller frees): prompt of prompt_tokens tokens,
 * unique per (salt, is_inject, index), answer of max_tokens; with api->request_ids and id >= 0,
 * the request's id for the server's sched log. */
char *driver_build_body(const driver_api *api, const workload_config *wl, uint64_t salt,
                        int is_inject, int64_t index, int prompt_tokens, int max_tokens,
                        int64_t id, size_t *len, char *err);
/* The same for a prompt described by its segments (workload_prompt): its ids, or as text
 * one pseudo-word per id with each segment scaled by the calibrated tokens per word (the
 * same segment gives the same words in every request). salt keeps runs apart (every
 * segment's index is xor-ed with salt << 48). */
char *driver_build_body_prompt(const driver_api *api, const workload_config *wl, uint64_t salt,
                               const workload_prompt *p, int max_tokens, int64_t id,
                               size_t *len, char *err);
/* The same with a prompt given as text (a trace row's, valid UTF-8 as JSON decoded it),
 * sent as it is: its length is whatever the server counts. */
char *driver_build_body_text(const driver_api *api, const char *text, size_t text_len,
                             int max_tokens, int64_t id, size_t *len, char *err);

#endif
