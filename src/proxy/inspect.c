/* inspect — see inspect.h. */
#include "proxy/inspect.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

/* Fields that concern one connection, never forwarded (RFC 9110 7.6.1), and Expect. */
static const char *const hop_by_hop[] = {"connection", "keep-alive",          "proxy-connection",
                                         "proxy-authorization", "te", "trailer", "upgrade",
                                         "expect", "host"};

static bool named_in(const char *list, size_t list_len, const char *name, size_t name_len)
{
    size_t i = 0;
    while (i < list_len) {
        while (i < list_len && (list[i] == ' ' || list[i] == '\t' || list[i] == ','))
            i++;
        size_t j = i;
        while (j < list_len && list[j] != ',' && list[j] != ' ' && list[j] != '\t')
            j++;
        if (j - i == name_len && strncasecmp(list + i, name, name_len) == 0)
            return true;
        i = j;
    }
    return false;
}

/* The values of a head's Connection fields: several are one list (RFC 9110 5.3). As many as
 * a head the framing hands on has fields (reqframe.h's REQFRAME_MAX_FIELDS), so a well-framed
 * request is never refused here. */
#define MAX_CONNECTION_FIELDS 100
typedef struct conn_list {
    const char *value[MAX_CONNECTION_FIELDS];
    size_t len[MAX_CONNECTION_FIELDS];
    int n;
} conn_list;

static bool named_by_connection(const conn_list *c, const char *name, size_t n)
{
    for (int i = 0; i < c->n; i++)
        if (named_in(c->value[i], c->len[i], name, n))
            return true;
    return false;
}

static bool is_hop(const char *name, size_t n, const conn_list *conn)
{
    for (size_t k = 0; k < sizeof hop_by_hop / sizeof hop_by_hop[0]; k++)
        if (strlen(hop_by_hop[k]) == n && strncasecmp(name, hop_by_hop[k], n) == 0)
            return true;
    /* The body's framing goes on with the body, whatever Connection names: without it the
     * body would reach the upstream as the next request (smuggling). */
    if ((n == 14 && strncasecmp(name, "content-length", 14) == 0) ||
        (n == 17 && strncasecmp(name, "transfer-encoding", 17) == 0))
        return false;
    return named_by_connection(conn, name, n);
}

int pinsp_rewrite_head(const char *in, size_t len, const pinsp_upstream *up, buf *out,
                       pinsp_head *info)
{
    memset(info, 0, sizeof *info);
    const char *end = in + len;
    const char *eol = memmem(in, len, "\r\n", 2);
    if (!eol)
        return -1;
    const char *sp1 = memchr(in, ' ', (size_t)(eol - in));
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
    if (!sp1 || sp1 == in || !sp2 || (size_t)(sp1 - in) >= sizeof info->method ||
        eol - sp2 != 9 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0 || sp2[8] < '0' || sp2[8] > '9')
        return -1;
    memcpy(info->method, in, (size_t)(sp1 - in));
    info->minor = sp2[8] - '0';
    const char *target = sp1 + 1;
    size_t target_len = (size_t)(sp2 - target);
    size_t path_len = target_len;
    const char *q = memchr(target, '?', target_len);
    if (q)
        path_len = (size_t)(q - target);
    snprintf(info->path, sizeof info->path, "%.*s", (int)path_len, target);
    info->head_method = strcmp(info->method, "HEAD") == 0;

    /* The fields checked first (each "name: value", the empty line at the end), and what
     * the rewrite needs to know of them. */
    const char *fields = eol + 2;
    conn_list conn = {.n = 0};
    bool has_auth = false, ended = false;
    for (const char *line = fields; line < end;) {
        const char *le = memmem(line, (size_t)(end - line), "\r\n", 2);
        if (!le)
            break;
        if (le == line) {
            ended = true;
            break;
        }
        const char *colon = memchr(line, ':', (size_t)(le - line));
        if (!colon || colon == line)
            return -1;
        const char *v = colon + 1;
        while (v < le && (*v == ' ' || *v == '\t'))
            v++;
        const size_t n = (size_t)(colon - line);
        if (n == 10 && strncasecmp(line, "connection", 10) == 0) {
            if (conn.n == MAX_CONNECTION_FIELDS)
                return -1;
            conn.value[conn.n] = v;
            conn.len[conn.n++] = (size_t)(le - v);
        } else if (n == 13 && strncasecmp(line, "authorization", 13) == 0) {
            has_auth = true;
        } else if (n == 6 && strncasecmp(line, "expect", 6) == 0) {
            /* An HTTP/1.0 client's expectation is ignored (RFC 9110 10.1.1). */
            info->expect_continue = info->minor >= 1 && (size_t)(le - v) == 12 &&
                                    strncasecmp(v, "100-continue", 12) == 0;
        }
        line = le + 2;
    }
    if (!ended)
        return -1;
    info->keep_alive = info->minor >= 1 ? !named_by_connection(&conn, "close", 5)
                                        : named_by_connection(&conn, "keep-alive", 10);

    /* The client's version goes on: an HTTP/1.0 client cannot read the chunked body an
     * HTTP/1.1 request would get (RFC 9112 6.1), and the answer is forwarded as it comes. */
    buf_printf(out, "%s %s%.*s HTTP/1.%d\r\nHost: %.*s\r\n", info->method, up->path,
               (int)target_len, target, info->minor, (int)up->authority_len, up->authority);
    for (const char *line = fields; line < end;) {
        const char *le = memmem(line, (size_t)(end - line), "\r\n", 2);
        if (!le || le == line)
            break;
        const char *colon = memchr(line, ':', (size_t)(le - line));
        if (!is_hop(line, (size_t)(colon - line), &conn))
            buf_append(out, line, (size_t)(le + 2 - line));
        line = le + 2;
    }
    if (!has_auth && up->basic && up->basic[0])
        buf_printf(out, "Authorization: %s\r\n", up->basic);
    buf_append(out, "\r\n", 2);
    return out->failed ? -1 : 0;
}

static int64_t text_tokens(size_t bytes)
{
    return (int64_t)((bytes + PINSP_BYTES_PER_TOKEN - 1) / PINSP_BYTES_PER_TOKEN);
}

/* A completions prompt: a string, token ids, or an array of either (a batch: the sum). The
 * count is exact when every part is token ids; *exact is false whenever -1 (unknown) is
 * returned. */
static int64_t prompt_estimate(const json_t *p, bool *exact)
{
    *exact = false;
    if (json_is_string(p))
        return text_tokens(json_string_length(p));
    if (!json_is_array(p) || json_array_size(p) == 0)
        return -1;
    if (json_is_integer(json_array_get(p, 0))) {
        size_t i;
        const json_t *v;
        json_array_foreach(p, i, v) if (!json_is_integer(v)) return -1;
        *exact = true;
        return (int64_t)json_array_size(p);
    }
    int64_t sum = 0;
    bool all_exact = true;
    size_t i;
    const json_t *v;
    json_array_foreach(p, i, v)
    {
        bool e;
        const int64_t n = prompt_estimate(v, &e);
        if (n < 0)
            return -1;
        all_exact = all_exact && e;
        sum += n;
    }
    *exact = all_exact;
    return sum;
}

/* A chat message's content: a string, or parts {"type": "text", "text": ...}. */
static int64_t content_bytes(const json_t *c)
{
    if (json_is_string(c))
        return (int64_t)json_string_length(c);
    int64_t sum = 0;
    size_t i;
    const json_t *part;
    if (json_is_array(c))
        json_array_foreach(c, i, part)
        {
            const json_t *t = json_object_get(part, "text");
            if (json_is_string(t))
                sum += (int64_t)json_string_length(t);
        }
    return sum;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

void pinsp_read_body(const pinsp_head *head, const char *body, size_t len, pinsp_body *out)
{
    memset(out, 0, sizeof *out);
    out->prompt_tokens = -1;
    out->max_tokens = -1;
    if (strcmp(head->method, "POST") != 0 || len == 0)
        return;
    const bool chat = ends_with(head->path, "/chat/completions");
    const bool completions = !chat && ends_with(head->path, "/completions");
    if (!chat && !completions)
        return;
    json_t *j = json_loadb(body, len, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return;
    }
    out->stream = json_is_true(json_object_get(j, "stream"));
    out->observed = out->stream;
    const json_t *mt = json_object_get(j, "max_completion_tokens");
    if (!json_is_integer(mt))
        mt = json_object_get(j, "max_tokens");
    if (json_is_integer(mt))
        out->max_tokens = json_integer_value(mt);
    int64_t n = -1;
    if (completions) {
        n = prompt_estimate(json_object_get(j, "prompt"), &out->exact);
    } else {
        const json_t *msgs = json_object_get(j, "messages");
        if (json_is_array(msgs)) {
            int64_t bytes = 0;
            size_t i;
            const json_t *m;
            json_array_foreach(msgs, i, m) bytes += content_bytes(json_object_get(m, "content"));
            n = text_tokens((size_t)bytes) +
                (int64_t)json_array_size(msgs) * PINSP_TOKENS_PER_MESSAGE;
        }
    }
    out->prompt_tokens = n < 0 ? -1 : n > INT32_MAX ? INT32_MAX : (int32_t)n;
    out->exact = out->exact && n > 0;
    json_decref(j);
}
