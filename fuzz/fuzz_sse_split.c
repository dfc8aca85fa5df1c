/* libFuzzer target: the SSE splitter (src/client/sse.c).
 *
 * Input: byte 0 picks max_event (small limits reach the "event too large" path), byte 1
 * seeds the split points, the rest is the stream. The stream is fed three ways — whole,
 * in pseudo-random pieces of 1..17 bytes, and one byte at a time — each piece from its own
 * exact-size heap copy, so ASan catches any read past what a read() would have returned.
 * The splitter promises the framing does not depend on how the bytes arrive: the three
 * runs must hand out the same events, in the same order, and fail (or not) the same way.
 * Every event must be NUL-terminated at data_len, carry no CR, and fit max_event. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/sse.h"
#include "pieces.h"

/* Events of one run, serialised (type NUL, length, data) so runs compare with memcmp. */
typedef struct record {
    unsigned char *bytes;
    size_t len, cap;
    int events;
    int errors;
} record;

static void record_append(record *r, const void *data, size_t len)
{
    if (r->len + len > r->cap) {
        size_t cap = r->cap ? r->cap : 256;
        while (cap < r->len + len)
            cap *= 2;
        r->bytes = realloc(r->bytes, cap);
        if (!r->bytes)
            abort(); /* libFuzzer's malloc limit, not a finding in the splitter */
        r->cap = cap;
    }
    memcpy(r->bytes + r->len, data, len);
    r->len += len;
}

static void check_event(const sse_event *ev, size_t max_event)
{
    if (ev->data[ev->data_len] != '\0' || ev->data_len > max_event ||
        memchr(ev->data, '\r', ev->data_len) || strlen(ev->type) >= 32) {
        fprintf(stderr, "fuzz_sse_split: malformed event (len %zu)\n", ev->data_len);
        abort();
    }
}

/* piece_mode: PIECES_WHOLE, PIECES_BYTEWISE, PIECES_RANDOM (pieces.h). */
static void run(const uint8_t *in, size_t len, size_t max_event, int piece_mode, uint32_t seed,
                record *out)
{
    sse_parser p;
    sse_parser_init(&p, max_event);
    size_t off = 0;
    uint32_t state = pieces_seed(seed);
    while (off < len && out->errors == 0) {
        const size_t piece = pieces_next(piece_mode, &state, len - off, 17);
        unsigned char *chunk = malloc(piece);
        if (!chunk)
            abort();
        memcpy(chunk, in + off, piece);
        const char *at = (const char *)chunk;
        size_t left = piece;
        while (left > 0) {
            size_t used = 0;
            sse_event ev;
            int r = sse_parse(&p, at, left, &used, &ev);
            if (used > left)
                abort();
            if (r == SSE_ERROR) {
                out->errors++;
                break;
            }
            at += used;
            left -= used;
            if (r == SSE_EVENT) {
                check_event(&ev, max_event ? max_event : SSE_DEFAULT_MAX_EVENT);
                record_append(out, ev.type, strlen(ev.type) + 1);
                record_append(out, &ev.data_len, sizeof ev.data_len);
                record_append(out, ev.data, ev.data_len);
                out->events++;
            } else if (left != 0) {
                abort(); /* NEED_MORE must mean every byte was taken */
            }
        }
        free(chunk);
        off += piece;
    }
    /* A cut stream: pending must agree too (the client reports "ended mid-event"). */
    const unsigned char pending = out->errors ? 2 : (unsigned char)sse_parser_pending(&p);
    record_append(out, &pending, 1);
    sse_parser_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    static const size_t limits[8] = {1, 2, 7, 16, 64, 300, 4096, 0};
    const size_t max_event_arg = limits[data[0] & 7];
    const uint32_t seed = data[1];
    const uint8_t *in = data + 2;
    const size_t len = size - 2;

    record whole = {0}, bytes = {0}, pieces = {0};
    run(in, len, max_event_arg, PIECES_WHOLE, seed, &whole);
    run(in, len, max_event_arg, PIECES_BYTEWISE, seed, &bytes);
    run(in, len, max_event_arg, PIECES_RANDOM, seed, &pieces);
    /* Errors included: the limit applies to a line's total length however it arrives,
     * so even the failing line is the same one. */
    const record *other[2] = {&bytes, &pieces};
    for (int i = 0; i < 2; i++) {
        const record *o = other[i];
        if (o->errors != whole.errors || o->events != whole.events || o->len != whole.len ||
            memcmp(o->bytes, whole.bytes, o->len) != 0) {
            fprintf(stderr,
                    "fuzz_sse_split: %s feeding differs from whole: events %d vs %d, errors "
                    "%d vs %d\n",
                    i == 0 ? "byte-at-a-time" : "piecewise", o->events, whole.events, o->errors,
                    whole.errors);
            abort();
        }
    }
    free(whole.bytes);
    free(bytes.bytes);
    free(pieces.bytes);
    return 0;
}
