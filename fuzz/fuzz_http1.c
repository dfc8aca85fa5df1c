/* libFuzzer target: the HTTP/1.1 response parser (src/client/http1.c).
 *
 * Input: byte 0 seeds the split points, the rest is what a server sent on one connection.
 * It is parsed as the raw transport does — heads (1xx skipped) until a final one, then its
 * body — three ways: whole, in pseudo-random pieces of 1..17 bytes, one byte at a time, each
 * piece from its own exact-size heap copy (ASan catches a read past what a read() returned).
 * The parser promises the result does not depend on how the bytes arrive: the three runs
 * must give the same head, the same body bytes, the same end or refusal. Every body span
 * must lie inside the bytes consumed, and a head's length inside the buffer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/http1.h"
#include "pieces.h"

typedef struct outcome {
    int status, framing, keep_alive, heads;
    int end; /* 0: open, 1: body ended, 2: refused */
    unsigned char body[8192];
    size_t body_len;
    size_t leftover;
} outcome;

static void run(const uint8_t *in, size_t len, int mode, uint32_t seed, outcome *out)
{
    memset(out, 0, sizeof *out);
    static char head[HTTP1_MAX_HEAD];
    size_t head_len = 0;
    int in_body = 0;
    http1_body body;
    http1_response resp;
    uint32_t state = pieces_seed(seed);
    size_t off = 0;
    while (off < len && out->end == 0) {
        const size_t n = pieces_next(mode, &state, len - off, 17);
        char *copy = malloc(n);
        if (!copy)
            abort();
        memcpy(copy, in + off, n);
        off += n;
        const char *at = copy;
        size_t left = n;
        while (left > 0 && out->end == 0) {
            if (!in_body) {
                ssize_t r;
                size_t take = left < sizeof head - head_len ? left : sizeof head - head_len;
                if (head_len == 0) {
                    r = http1_parse_head(at, left, &resp);
                } else {
                    memcpy(head + head_len, at, take);
                    r = http1_parse_head(head, head_len + take, &resp);
                }
                if (r == HTTP1_NEED_MORE) {
                    if (head_len == 0)
                        memcpy(head, at, take);
                    head_len += take;
                    if (take < left) { /* the head buffer is full: the parser must refuse */
                        fprintf(stderr, "fuzz_http1: more than the head limit and no refusal\n");
                        abort();
                    }
                    left = 0;
                    break;
                }
                if (r == HTTP1_ERROR) {
                    if (resp.error[0] == '\0')
                        abort(); /* a refusal says why */
                    out->end = 2;
                    break;
                }
                if (r <= (ssize_t)head_len || (size_t)r > head_len + left)
                    abort();
                const size_t used = (size_t)r - head_len;
                at += used;
                left -= used;
                head_len = 0;
                if (resp.status < 100 || resp.status > 999)
                    abort();
                if (resp.status < 200)
                    continue;
                out->heads++;
                out->status = resp.status;
                out->framing = resp.framing;
                out->keep_alive = resp.keep_alive;
                http1_body_init(&body, &resp);
                in_body = 1;
            }
            size_t used = 0, data_len = 0;
            const char *data = NULL;
            const int r = http1_body_feed(&body, at, left, &used, &data, &data_len);
            if (used > left)
                abort();
            if (r == HTTP1_ERROR) {
                out->end = 2;
                break;
            }
            if (r == HTTP1_BODY_DATA) {
                if (data < at || data + data_len > at + used || data_len == 0)
                    abort();
                size_t room = sizeof out->body - out->body_len;
                size_t keep = data_len < room ? data_len : room;
                memcpy(out->body + out->body_len, data, keep);
                out->body_len += data_len; /* counted in full, compared up to the room */
            } else if (r == HTTP1_BODY_MORE && used != left) {
                abort(); /* MORE means every byte was taken */
            }
            at += used;
            left -= used;
            if (body.done) {
                out->end = 1;
                out->leftover = left + (len - off);
            }
        }
        if (in_body && out->end == 0 && body.done) {
            out->end = 1;
            out->leftover = left + (len - off);
        }
        free(copy);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static outcome whole, bytes, pieces;
    run(data + 1, size - 1, PIECES_WHOLE, data[0], &whole);
    run(data + 1, size - 1, PIECES_BYTEWISE, data[0], &bytes);
    run(data + 1, size - 1, PIECES_RANDOM, data[0], &pieces);
    const outcome *other[2] = {&bytes, &pieces};
    for (int i = 0; i < 2; i++) {
        const outcome *o = other[i];
        size_t cmp = whole.body_len < sizeof whole.body ? whole.body_len : sizeof whole.body;
        if (o->end != whole.end || o->heads != whole.heads || o->status != whole.status ||
            o->framing != whole.framing || o->keep_alive != whole.keep_alive ||
            o->body_len != whole.body_len || o->leftover != whole.leftover ||
            memcmp(o->body, whole.body, cmp) != 0) {
            fprintf(stderr, "fuzz_http1: %s feeding differs from whole: end %d vs %d, body %zu vs "
                            "%zu, status %d vs %d\n",
                    i == 0 ? "byte-at-a-time" : "piecewise", o->end, whole.end, o->body_len,
                    whole.body_len, o->status, whole.status);
            abort();
        }
    }
    return 0;
}
