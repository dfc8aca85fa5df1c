/* routes — the endpoints and their handlers (routes.h). */
#include "server/routes.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/rng.h"
#include "server/answer.h"
#include "server/reqframe.h"
#include "server/streams.h"

#define SEED_SALT 0x73656564ULL /* "seed" */

/* Under AddressSanitizer the allocator is ASan's: glibc's mallinfo2 knows nothing of it. */
#if defined(__SANITIZE_ADDRESS__)
#define HEAP_FROM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEAP_FROM_ASAN 1
#endif
#endif
#ifdef HEAP_FROM_ASAN
size_t __sanitizer_get_current_allocated_bytes(void); /* <sanitizer/allocator_interface.h> */
#endif

static int64_t tokenize_cb(void *ctx, const char *text, size_t len, int32_t *ids,
                           int64_t max_ids)
{
    exec *x = ctx;
    return x->tokenize(x, text, len, ids, max_ids);
}

/* Seed of the emulated sampler: greedy (temperature 0) answers follow the prompt, seeded
 * answers the seed, the rest a per-request draw. */
static uint64_t sampling_seed(const openai_request *req, int64_t id)
{
    if (req->temperature == 0)
        return req->prompt_hash;
    if (req->has_seed)
        return req->seed;
    return rng_hash3((uint64_t)id, SEED_SALT, 0);
}

/* A stream's length is unknown when it starts. HTTP/1.1 gets it chunked; HTTP/1.0 has no
 * chunks, so its stream must end with the connection. evhttp, asked for keep-alive by a 1.0
 * client, instead announces "Content-Length: 0" and keeps the connection: the client reads
 * an empty answer and the stream as garbage after it. Forgetting the client's
 * "Connection: keep-alive" makes evhttp send the 1.0 stream unframed and close after it;
 * for HTTP/1.1, where keep-alive is the default anyway, nothing changes. */
static void forget_keep_alive(struct evhttp_request *hreq)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(hreq);
    const char *value;
    /* At most as many rounds as there are Connection fields (REQFRAME_MAX_FIELDS). */
    for (int i = 0; i < REQFRAME_MAX_FIELDS && (value = evhttp_find_header(in, "Connection")) &&
                    strncasecmp(value, "keep-alive", 10) == 0;
         i++)
        evhttp_remove_header(in, "Connection");
}

static void handle_generate(server *s, struct evhttp_request *hreq, openai_endpoint endpoint)
{
    if (s->stopping) {
        answer_unavailable(s, hreq, "the server is shutting down");
        return;
    }
    struct evbuffer *input = evhttp_request_get_input_buffer(hreq);
    const size_t len = evbuffer_get_length(input);
    openai_error error;
    if (len > s->cfg.max_body_bytes) {
        openai_fail(&error, 413, "invalid_request_error", NULL,
                    "request body of %zu bytes exceeds the limit of %zu bytes", len,
                    s->cfg.max_body_bytes);
        answer_error(s, hreq, &error);
        return;
    }
    /* Load shedding before any parsing: a full queue costs a refusal, not a JSON parse.
     * A client should back off and retry (Retry-After), as from vLLM behind a gateway. */
    if (s->n_waiting >= s->cfg.max_waiting) {
        s->metrics.rejected_queue_full++;
        evhttp_add_header(evhttp_request_get_output_headers(hreq), "Retry-After", "1");
        openai_fail(&error, 429, "rate_limit_error", NULL,
                    "the server is overloaded: %d requests are already waiting for the engine "
                    "(--max-waiting %d); retry later",
                    s->n_waiting, s->cfg.max_waiting);
        answer_error(s, hreq, &error);
        return;
    }
    const char *body = len ? (const char *)evbuffer_pullup(input, (ev_ssize_t)len) : "";
    if (!body) {
        answer_error_text(s, hreq, 500, "server_error", "out of memory reading the body");
        return;
    }
    srv_stream *st = calloc(1, sizeof *st);
    if (!st) {
        answer_error_text(s, hreq, 500, "server_error", "out of memory");
        return;
    }
    const openai_limits limits = {
        .model_name = s->cfg.model_name,
        .max_model_len = s->cfg.sched.max_model_len,
        .vocab_size = s->x->vocab_size,
        .tokenize = tokenize_cb,
        .tokenize_ctx = s->x,
        .keep_text_ids = s->cfg.sched.prefix_caching,
    };
    if (openai_parse_request(endpoint, body, len, &limits, &st->req, &error) != 0) {
        free(st);
        answer_error(s, hreq, &error);
        return;
    }
    const int64_t id = s->next_id++;
    /* The scheduler's own admission rules (budget under mixed, KV capacity ...), checked on
     * a scheduler nobody steps, so its refusal is a 400 now, not an error mid-stream. */
    sched_req probe = {.id = id,
                       .prompt_tokens = st->req.prompt_tokens,
                       .max_tokens = st->req.max_tokens,
                       .min_tokens = st->req.min_tokens};
    char why[ERR_LEN];
    if (sched_add(s->probe, &probe, why) != 0) {
        openai_fail(&error, 400, "invalid_request_error",
                    endpoint == OPENAI_CHAT ? "messages" : "prompt", "%s", why);
        openai_request_free(&st->req);
        free(st);
        answer_error(s, hreq, &error);
        return;
    }
    sched_abort(s->probe, &probe);

    st->srv = s;
    st->id = id;
    st->created = (int64_t)time(NULL);
    st->t_arrival_ns = clock_now_ns();
    st->last_step = -1;
    st->streaming = st->req.stream;
    st->waiting = true;
    s->n_waiting++;
    st->http = hreq;
    st->conn = evhttp_request_get_connection(hreq);
    engine_req *er = &st->er;
    er->id = id;
    /* The sched log names it as its client does, when the client says (runner_http). */
    er->log_id = st->req.client_id >= 0 ? st->req.client_id : id;
    er->prompt_tokens = st->req.prompt_tokens;
    er->max_tokens = st->req.max_tokens;
    er->seq = (exec_seq){
        .seed = sampling_seed(&st->req, id),
        .temperature = st->req.temperature,
        .min_tokens = st->req.min_tokens,
        .ignore_eos = st->req.ignore_eos,
        .prompt_ids = st->req.prompt_ids,
        .n_prompt_ids = st->req.prompt_ids ? st->req.prompt_tokens : 0,
    };
    /* A text prompt's ids name its blocks for the prefix cache (the engine checks them). */
    er->cache_ids = st->req.text_ids;
    er->n_cache_ids = st->req.n_text_ids;
    er->stop = (const char *const *)st->req.stop;
    er->n_stop = st->req.n_stop;
    er->user = st;
    atomic_init(&er->cancel, false);
    openai_stream_init(&st->enc, &st->req, id, st->created, s->cfg.model_name);

    streams_add(s, st);
    if (st->streaming) {
        /* One small write per token: without TCP_NODELAY, Nagle holds a chunk back until
         * the client's (possibly delayed) ACK of the previous one, up to 40 ms on Linux. */
        struct bufferevent *bev = st->conn ? evhttp_connection_get_bufferevent(st->conn) : NULL;
        evutil_socket_t sock = bev ? bufferevent_getfd(bev) : -1;
        int one = 1;
        if (sock >= 0)
            setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct evkeyvalq *headers = evhttp_request_get_output_headers(hreq);
        evhttp_add_header(headers, "Content-Type", "text/event-stream; charset=utf-8");
        evhttp_add_header(headers, "Cache-Control", "no-cache");
        forget_keep_alive(hreq);
        evhttp_send_reply_start(hreq, 200, "OK");
    }
    engine_submit(s->engine, er);
}

static void handle_models(server *s, struct evhttp_request *hreq)
{
    char *body = openai_models_body(s->cfg.model_name, s->cfg.sched.max_model_len, s->created);
    if (!body) {
        answer_error_text(s, hreq, 500, "server_error", "out of memory");
        return;
    }
    answer_body(s, hreq, 200, "application/json", body, strlen(body));
    free(body);
}

static void handle_health(server *s, struct evhttp_request *hreq)
{
    if (s->stopping) {
        answer_unavailable(s, hreq, "the server is shutting down");
        return;
    }
    answer_body(s, hreq, 200, "application/json", "", 0);
}

/* Bytes the process holds from its allocator now (freed memory the allocator keeps for
 * reuse does not count, unlike RSS). */
static int64_t heap_in_use(void)
{
#ifdef HEAP_FROM_ASAN
    return (int64_t)__sanitizer_get_current_allocated_bytes();
#else
    const struct mallinfo2 info = mallinfo2();
    return (int64_t)(info.uordblks + info.hblkhd);
#endif
}

static void handle_metrics(server *s, struct evhttp_request *hreq)
{
    buf b = {0};
    s->metrics.requests_open = s->n_streams;
    s->metrics.http_connections = conns_open(s->conns);
    s->metrics.read_timeouts = conns_timed_out_total(s->conns);
    s->metrics.write_stalls = conns_write_stalls_total(s->conns);
    s->metrics.heap_bytes = heap_in_use();
    metrics_format(&s->metrics, s->cfg.model_name, &b);
    if (b.failed) {
        buf_free(&b);
        answer_error_text(s, hreq, 500, "server_error", "out of memory");
        return;
    }
    answer_body(s, hreq, 200, "text/plain; version=0.0.4; charset=utf-8", b.data ? b.data : "",
              b.len);
    buf_free(&b);
}

/* POST /reset_prefix_cache, as vLLM's: the engine drops its cached prefix blocks at its next
 * step boundary (engine_reset_prefix_cache); 200 at once. calibrate --target resets between
 * probes where a server offers it. */
static void handle_reset_prefix_cache(server *s, struct evhttp_request *hreq)
{
    if (s->stopping) {
        answer_unavailable(s, hreq, "the server is shutting down");
        return;
    }
    engine_reset_prefix_cache(s->engine);
    answer_body(s, hreq, 200, "application/json", "", 0);
}

/* POST /slots/{id}?action=erase, as llama.cpp's server (only under --kv-layout unified, whose
 * slots it erases): the slot's retained cells are dropped at the engine's next step boundary
 * (engine_erase_slot; a slot taken then keeps its occupant's). 200 {"id_slot": id} at once;
 * 400 for an id past the slots or another action. calibrate --target erases every slot
 * between probes. */
static void handle_slot(server *s, struct evhttp_request *hreq, const char *id_text)
{
    if (s->stopping) {
        answer_unavailable(s, hreq, "the server is shutting down");
        return;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(hreq);
    const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
    bool erase = false; /* one of the &-separated parameters is action=erase */
    for (const char *q = query; q && *q && !erase;) {
        const size_t len = strcspn(q, "&");
        erase = len == strlen("action=erase") && strncmp(q, "action=erase", len) == 0;
        q += len + (q[len] == '&');
    }
    char *end = NULL;
    const long id = strtol(id_text, &end, 10);
    if (!erase) {
        answer_error_text(s, hreq, 400, "invalid_request_error",
                          "only ?action=erase is offered on /slots/{id}");
        return;
    }
    if (!*id_text || *end || id < 0 || id > 1000000 || engine_erase_slot(s->engine, (int)id) != 0) {
        answer_error_text(s, hreq, 400, "invalid_request_error",
                          "no such slot (this server has slots 0 to N - 1, N = max_num_seqs)");
        return;
    }
    char body[64];
    const int n = snprintf(body, sizeof body, "{\"id_slot\": %ld}", id);
    answer_body(s, hreq, 200, "application/json", body, (size_t)n);
}

/* GET /props, as llama.cpp's server (only under --kv-layout unified): {"total_slots": N,
 * "default_generation_settings": {"n_ctx": max_model_len}}; calibrate --target reads the slots
 * from it where it cannot erase them one by one. */
static void handle_props(server *s, struct evhttp_request *hreq)
{
    char body[160];
    const int n = snprintf(body, sizeof body,
                           "{\"total_slots\": %d, \"default_generation_settings\": {\"n_ctx\": %d}}",
                           engine_slots(s->engine), s->cfg.sched.max_model_len);
    answer_body(s, hreq, 200, "application/json", body, (size_t)n);
}

#define SLOTS_PREFIX "/slots/"

typedef enum {
    ROUTE_COMPLETIONS,
    ROUTE_CHAT,
    ROUTE_MODELS,
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_RESET_PREFIX_CACHE,
    ROUTE_SLOT,
    ROUTE_PROPS
} route_id;

static const struct route {
    const char *path;
    route_id id;
    enum evhttp_cmd_type method;
    const char *allow;
    bool needs_key;
} routes[] = {
    {"/v1/completions", ROUTE_COMPLETIONS, EVHTTP_REQ_POST, "POST", true},
    {"/v1/chat/completions", ROUTE_CHAT, EVHTTP_REQ_POST, "POST", true},
    {"/v1/models", ROUTE_MODELS, EVHTTP_REQ_GET, "GET, HEAD", true},
    {"/health", ROUTE_HEALTH, EVHTTP_REQ_GET, "GET, HEAD", false},
    {"/metrics", ROUTE_METRICS, EVHTTP_REQ_GET, "GET, HEAD", false},
    {"/reset_prefix_cache", ROUTE_RESET_PREFIX_CACHE, EVHTTP_REQ_POST, "POST", true},
    {SLOTS_PREFIX, ROUTE_SLOT, EVHTTP_REQ_POST, "POST", true}, /* a prefix: /slots/{id} */
    {"/props", ROUTE_PROPS, EVHTTP_REQ_GET, "GET, HEAD", true},
};

/* Does this route serve path on this server? A unified KV cache (slots) is llama.cpp's
 * server: its /props and slot erase are offered (the erase not under --no-slots), vLLM's
 * /reset_prefix_cache is not (as there); under paged, the other way round. */
static bool route_serves(const server *s, const struct route *r, const char *path)
{
    const bool slots = engine_slots(s->engine) > 0;
    if (r->id == ROUTE_SLOT)
        return slots && !s->cfg.no_slots && strncmp(path, SLOTS_PREFIX, strlen(SLOTS_PREFIX)) == 0;
    if (r->id == ROUTE_PROPS || r->id == ROUTE_RESET_PREFIX_CACHE)
        return strcmp(path, r->path) == 0 && slots == (r->id == ROUTE_PROPS);
    return strcmp(path, r->path) == 0;
}

/* "Authorization: Bearer <key>", the scheme case-insensitive. */
static bool authorized(const server *s, struct evhttp_request *hreq)
{
    const char *value =
        evhttp_find_header(evhttp_request_get_input_headers(hreq), "Authorization");
    if (!value || strncasecmp(value, "Bearer ", 7) != 0)
        return false;
    value += 7;
    while (*value == ' ')
        value++;
    return strcmp(value, s->cfg.api_key) == 0;
}

void routes_on_request(struct evhttp_request *hreq, void *arg)
{
    server *s = arg;
    conns_refusal refusal;
    if (conns_request_arrived(s->conns, evhttp_request_get_connection(hreq), &refusal)) {
        /* The framing refused this one (reqframe.h): nothing after it on this connection is
         * trusted, so close once it is answered. */
        evhttp_add_header(evhttp_request_get_output_headers(hreq), "Connection", "close");
        answer_error_text(s, hreq, refusal.status, "invalid_request_error", refusal.message);
        return;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(hreq);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path)
        path = "";
    const struct route *route = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (route_serves(s, &routes[i], path))
            route = &routes[i];
    if (!route) {
        openai_error error;
        openai_fail(&error, 404, "not_found_error", NULL, "no route for %.200s", path);
        answer_error(s, hreq, &error);
        return;
    }
    enum evhttp_cmd_type method = evhttp_request_get_command(hreq);
    const bool head_ok = method == EVHTTP_REQ_HEAD && route->method == EVHTTP_REQ_GET;
    if (method != route->method && !head_ok) {
        evhttp_add_header(evhttp_request_get_output_headers(hreq), "Allow", route->allow);
        openai_error error;
        openai_fail(&error, 405, "invalid_request_error", NULL, "%s allows only %s", route->path,
                    route->allow);
        answer_error(s, hreq, &error);
        return;
    }
    if (route->needs_key && s->cfg.api_key[0] && !authorized(s, hreq)) {
        answer_error_text(s, hreq, 401, "authentication_error",
                        "missing or wrong API key (Authorization: Bearer <key>)");
        return;
    }
    switch (route->id) {
    case ROUTE_COMPLETIONS: handle_generate(s, hreq, OPENAI_COMPLETIONS); break;
    case ROUTE_CHAT: handle_generate(s, hreq, OPENAI_CHAT); break;
    case ROUTE_MODELS: handle_models(s, hreq); break;
    case ROUTE_HEALTH: handle_health(s, hreq); break;
    case ROUTE_METRICS: handle_metrics(s, hreq); break;
    case ROUTE_RESET_PREFIX_CACHE: handle_reset_prefix_cache(s, hreq); break;
    case ROUTE_SLOT: handle_slot(s, hreq, path + strlen(SLOTS_PREFIX)); break;
    case ROUTE_PROPS: handle_props(s, hreq); break;
    }
}
