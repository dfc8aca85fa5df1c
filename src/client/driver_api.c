#include "client/driver_api.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/clock.h"
#include "common/err.h"

#define PROBE_PROMPT_TOKENS 8
#define CALIB_WORDS_SMALL 32
#define CALIB_WORDS_LARGE 1024
#define UNKNOWN_VOCAB 32000 /* every tokenizer in use has at least this many ids */

/* ---- API description --------------------------------------------------------------- */

void driver_api_defaults(driver_api *api)
{
    memset(api, 0, sizeof *api);
    api->endpoint = DRIVER_COMPLETIONS;
    api->text_per_word = 1.0;
    api->vocab = UNKNOWN_VOCAB;
}

int driver_endpoint_parse(const char *text, driver_endpoint *out, char *err)
{
    if (strcmp(text, "completions") == 0)
        *out = DRIVER_COMPLETIONS;
    else if (strcmp(text, "chat") == 0)
        *out = DRIVER_CHAT;
    else
        return err_set(err, "unknown endpoint '%s' (completions | chat)", text);
    return 0;
}

const char *driver_endpoint_path(driver_endpoint e)
{
    return e == DRIVER_CHAT ? "/v1/chat/completions" : "/v1/completions";
}

/* Text prompts: one pseudo-word per drawn id, syllables chosen by its bits. Words differ
 * from prompt to prompt (the ids do), so no two prompts share a prefix. */
static const char *const syllables[16] = {"ka", "lo", "mi", "ne", "su", "ta", "ri", "po",
                                          "ve", "zu", "ba", "de", "fi", "go", "hu", "ja"};

static int append_word(char *buf, size_t off, int32_t id)
{
    uint32_t u = (uint32_t)id;
    int n = 0;
    if (off > 0)
        buf[off + (size_t)n++] = ' ';
    const char *a = syllables[u & 15], *b = syllables[(u >> 4) & 15];
    memcpy(buf + off + n, a, 2), n += 2;
    memcpy(buf + off + n, b, 2), n += 2;
    if ((u >> 8) & 1) {
        memcpy(buf + off + n, syllables[(u >> 9) & 15], 2);
        n += 2;
    }
    return n;
}

/* The body around a prompt (taken: a JSON string or array of ids). */
static char *wrap_body(const driver_api *api, json_t *prompt, int max_tokens, int64_t id,
                       size_t *len, char *err)
{
    char *out = NULL;
    json_t *root = json_object();
    if (!root || !prompt)
        goto oom;
    if (api->model[0])
        json_object_set_new(root, "model", json_string(api->model));
    if (api->endpoint == DRIVER_CHAT) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("user"));
        json_object_set_new(msg, "content", prompt);
        json_t *messages = json_array();
        json_array_append_new(messages, msg);
        json_object_set_new(root, "messages", messages);
    } else {
        json_object_set_new(root, "prompt", prompt);
    }
    prompt = NULL;
    json_object_set_new(root, "max_tokens", json_integer(max_tokens));
    json_object_set_new(root, "stream", json_true());
    json_object_set_new(root, "ignore_eos", json_true());
    json_t *so = json_object();
    json_object_set_new(so, "include_usage", json_true());
    json_object_set_new(so, "continuous_usage_stats", json_true());
    json_object_set_new(root, "stream_options", so);
    const bool named = api->request_ids && id >= 0;
    if (api->timestamps || named) {
        json_t *ours = json_object();
        if (api->timestamps)
            json_object_set_new(ours, "timestamps", json_true());
        if (named)
            json_object_set_new(ours, "request", json_integer(id));
        json_object_set_new(root, "stallscope", ours);
    }
    if (api->extra_body && api->extra_body[0]) { /* checked an object when it was given */
        json_t *extra = json_loads(api->extra_body, 0, NULL);
        int rc = json_is_object(extra) ? json_object_update(root, extra) : 0;
        json_decref(extra);
        if (rc != 0)
            goto oom;
    }
    if (!(out = json_dumps(root, JSON_COMPACT)))
        goto oom;
    *len = strlen(out);
    json_decref(root);
    return out;
oom:
    json_decref(prompt);
    json_decref(root);
    err_set(err, "out of memory building a request");
    return NULL;
}

char *driver_build_body_prompt(const driver_api *api, const workload_config *wl, uint64_t salt,
                               const workload_prompt *p, int max_tokens, int64_t id,
                               size_t *len, char *err)
{
    /* Token ids: each segment's ids as they are. Text: each segment becomes its share of
     * words (the calibrated tokens per word; the per-request overhead comes off the last),
     * the same words wherever the segment recurs, so shared segments share text too. */
    int64_t n_ids = 0;
    int *words = malloc((size_t)(p->n_segs > 0 ? p->n_segs : 1) * sizeof *words);
    if (!words) {
        err_set(err, "out of memory building a request");
        return NULL;
    }
    for (int i = 0; i < p->n_segs; i++) {
        words[i] = p->segs[i].tokens;
        if (!api->token_ids) {
            double w = ((double)p->segs[i].tokens -
                        (i == p->n_segs - 1 ? api->text_overhead : 0)) / api->text_per_word;
            words[i] = w < 1 ? 1 : (int)lround(w);
        }
        n_ids += words[i];
    }
    int32_t *ids = malloc((size_t)(n_ids > 0 ? n_ids : 1) * sizeof *ids);
    char *text = NULL;
    json_t *prompt = NULL;
    if (!ids) {
        free(words);
        err_set(err, "out of memory building a request");
        return NULL;
    }
    const int vocab = api->vocab > 0 ? api->vocab : UNKNOWN_VOCAB;
    for (int i = 0, off = 0; i < p->n_segs; off += words[i], i++)
        workload_segment_ids(wl, &p->segs[i], salt << 48, ids + off, words[i], vocab);
    if (api->token_ids) {
        prompt = json_array();
        for (int64_t i = 0; prompt && i < n_ids; i++)
            if (json_array_append_new(prompt, json_integer(ids[i])) != 0) {
                json_decref(prompt);
                prompt = NULL;
            }
    } else if ((text = malloc((size_t)n_ids * 7 + 1))) {
        size_t off = 0;
        for (int64_t i = 0; i < n_ids; i++)
            off += (size_t)append_word(text, off, ids[i]);
        text[off] = '\0';
        prompt = json_string(text);
    }
    free(words);
    free(ids);
    free(text);
    return wrap_body(api, prompt, max_tokens, id, len, err);
}

char *driver_build_body(const driver_api *api, const workload_config *wl, uint64_t salt,
                        int is_inject, int64_t index, int prompt_tokens, int max_tokens,
                        int64_t id, size_t *len, char *err)
{
    workload_segment seg = {.stream = is_inject ? WORKLOAD_SEG_INJECT : WORKLOAD_SEG_UNIQUE,
                            .index = (uint64_t)index, .tokens = prompt_tokens};
    const workload_prompt p = {.segs = &seg, .n_segs = 1, .cap_segs = 1, .tokens = prompt_tokens};
    return driver_build_body_prompt(api, wl, salt, &p, max_tokens, id, len, err);
}

char *driver_build_body_text(const driver_api *api, const char *text, size_t text_len,
                             int max_tokens, int64_t id, size_t *len, char *err)
{
    json_t *prompt = json_stringn_nocheck(text, text_len);
    return wrap_body(api, prompt, max_tokens, id, len, err);
}

/* ---- probe ------------------------------------------------------------------------- */

typedef struct probe_state {
    bool ended;
    transport_end end;
    int64_t tokens;
} probe_state;

static void probe_token(void *ctx, void *user, const transport_token *tok)
{
    (void)ctx;
    ((probe_state *)user)->tokens += tok->n_tokens;
}

static void probe_end(void *ctx, void *user, const transport_end *end)
{
    (void)ctx;
    probe_state *p = user;
    p->ended = true;
    p->end = *end;
}

static int probe_once(const transport *t, const driver_api *api, const workload_config *wl,
                      int prompt_tokens, int64_t timeout_ns, probe_state *out, char *err)
{
    static const transport_handlers handlers = {NULL, probe_token, probe_end};
    memset(out, 0, sizeof *out);
    size_t len;
    char *body =
        driver_build_body(api, wl, 0xfe, 0, prompt_tokens, prompt_tokens, 1, -1, &len, err);
    if (!body)
        return -1;
    transport_request req = {driver_endpoint_path(api->endpoint), body, len, &handlers, out, 1};
    int rc = t->post(t->impl, &req, err);
    free(body);
    if (rc != 0)
        return -1;
    int64_t deadline = t->now(t->impl) + timeout_ns;
    while (!out->ended) {
        int64_t now = t->now(t->impl);
        if (now >= deadline) {
            t->cancel_all(t->impl, "the probe request timed out");
            break;
        }
        if (t->run(t->impl, now + 50 * CLOCK_NS_PER_MS < deadline ? now + 50 * CLOCK_NS_PER_MS
                                                                   : deadline,
                   err) != 0)
            return -1;
    }
    return 0;
}

int driver_probe(const transport *t, driver_api *api, const workload_config *wl, int64_t timeout_ns,
                 FILE *notes, char *err)
{
    probe_state p;
    if (api->endpoint == DRIVER_COMPLETIONS) {
        api->token_ids = true;
        if (probe_once(t, api, wl, PROBE_PROMPT_TOKENS, timeout_ns, &p, err) != 0)
            return -1;
        if (p.end.connect_failed)
            return err_set(err, "%s", p.end.error);
        if (p.end.http_status == 401 || p.end.http_status == 403)
            return err_set(err, "the target refused our credentials (HTTP %d on the probe "
                                "request: %s): --api-key KEY or OPENAI_API_KEY for a bearer "
                                "token, --header 'Name: value' for another scheme",
                           p.end.http_status, p.end.error);
        /* A server may add a BOS token to an id prompt: one token off is still exact for
         * our purpose (it is the same for every request). */
        if (!p.end.error[0] &&
            (p.end.prompt_tokens < 0 || llabs(p.end.prompt_tokens - PROBE_PROMPT_TOKENS) <= 1)) {
            if (p.end.prompt_tokens < 0 && notes)
                fprintf(notes, "note: the server reports no usage; prompt lengths are as sent\n");
            return 0;
        }
        if (notes)
            fprintf(notes, "note: the server does not take token-id prompts (%s); using text "
                           "calibrated against usage.prompt_tokens\n",
                    p.end.error[0] ? p.end.error : "its prompt count disagreed");
    }
    api->token_ids = false;
    api->text_overhead = 0;
    api->text_per_word = 1;
    probe_state small, large;
    if (probe_once(t, api, wl, CALIB_WORDS_SMALL, timeout_ns, &small, err) != 0)
        return -1;
    if (small.end.connect_failed || small.end.error[0])
        return err_set(err, "probe request failed: %s", small.end.error);
    if (probe_once(t, api, wl, CALIB_WORDS_LARGE, timeout_ns, &large, err) != 0)
        return -1;
    if (large.end.connect_failed || large.end.error[0])
        return err_set(err, "probe request failed: %s", large.end.error);
    if (small.end.prompt_tokens < 0 || large.end.prompt_tokens < 0 ||
        large.end.prompt_tokens <= small.end.prompt_tokens) {
        if (notes)
            fprintf(notes, "note: the server reports no usable usage.prompt_tokens; text prompts "
                           "use one word per token, lengths unverified\n");
        api->text_calibrated = false;
        return 0;
    }
    api->text_per_word = (double)(large.end.prompt_tokens - small.end.prompt_tokens) /
                         (CALIB_WORDS_LARGE - CALIB_WORDS_SMALL);
    api->text_overhead = (double)small.end.prompt_tokens - api->text_per_word * CALIB_WORDS_SMALL;
    api->text_calibrated = true;
    if (notes)
        fprintf(notes, "note: text prompts calibrated: tokens = %.1f + %.3f x words\n",
                api->text_overhead, api->text_per_word);
    return 0;
}
