/* sse_feed — SSE text through the splitter (client/sse.h) in pieces: whole, one byte at a
 * time, or random sizes from a seed, each piece a private copy so ASan catches a read past
 * it; the events collected (test_sse, test_chunk). Include after <cmocka.h>. */
#ifndef STALLSCOPE_TEST_SSE_FEED_H
#define STALLSCOPE_TEST_SSE_FEED_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/sse.h"
#include "common/rng.h"

#define MAX_EVENTS 64

typedef struct collected {
    int n;
    char data[MAX_EVENTS][512];
    char type[MAX_EVENTS][32];
    int errors;
} collected;

/* Feed text in pieces whose sizes come from split(): 0 = whole, 1 = one byte at a time,
 * else random sizes from a seed. */
static inline void feed(const char *text, size_t len, size_t piece_max, uint64_t seed,
                        collected *out)
{
    sse_parser p;
    sse_parser_init(&p, 4096);
    memset(out, 0, sizeof *out);
    size_t off = 0;
    uint64_t state = seed;
    while (off < len) {
        size_t piece = len - off;
        if (piece_max == 1)
            piece = 1;
        else if (piece_max > 1)
            piece = (size_t)rng_range(&state, 1, (int64_t)piece_max);
        if (piece > len - off)
            piece = len - off;
        /* A private copy of just this piece, so reading past it is caught by ASan. */
        char *chunk = malloc(piece);
        memcpy(chunk, text + off, piece);
        const char *in = chunk;
        size_t left = piece;
        while (left > 0) {
            size_t used = 0;
            sse_event ev;
            int r = sse_parse(&p, in, left, &used, &ev);
            if (r == SSE_ERROR) {
                out->errors++;
                left = 0;
                break;
            }
            assert_true(used <= left);
            in += used;
            left -= used;
            if (r == SSE_EVENT) {
                assert_true(out->n < MAX_EVENTS);
                assert_int_equal(strlen(ev.data), ev.data_len);
                snprintf(out->data[out->n], sizeof out->data[0], "%s", ev.data);
                snprintf(out->type[out->n], sizeof out->type[0], "%s", ev.type);
                out->n++;
            }
        }
        free(chunk);
        off += piece;
    }
    sse_parser_free(&p);
}

#endif
