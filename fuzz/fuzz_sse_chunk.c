/* libFuzzer target: the SSE chunk decoder and token counter (src/client/chunk.c, over
 * json_scan.c's scanner and jansson).
 *
 * Input: byte 0 picks the mode; the rest is either one event's data (modes 0-2: event type
 * "", "error" or "message") or a whole response body that goes through the splitter first
 * and then, event by event, through the decoder and the counter, as the client does (mode 3).
 * Checked: the decoder returns 0 or -1 and nothing else; its strings stay terminated inside
 * their arrays; a token count is never negative, the running completion count never goes
 * down (the client's per-request token total must be monotone whatever a server sends),
 * the completion count is never more than CHUNK_STOP_TOKEN_SLACK above the tokens delivered
 * (a usage above what streamed is refused), and with a max_tokens (bits 3-7 of byte 0; 0:
 * unbounded) neither the tokens delivered nor the completion count ever pass it. And the
 * client's in-place scanner (chunk_decode) decodes every event as the jansson reference
 * does (chunk_decode_jansson): the same return, the same fields. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/chunk.h"
#include "common/err.h"

static void check_chunk(const chunk_info *c, chunk_counter *n)
{
    if (strnlen(c->error, sizeof c->error) == sizeof c->error ||
        strnlen(c->finish_reason, sizeof c->finish_reason) == sizeof c->finish_reason) {
        fprintf(stderr, "fuzz_sse_chunk: unterminated string in the chunk\n");
        abort();
    }
    const int64_t before = n->delivered;
    const int k = chunk_counter_add(n, c);
    const int64_t completion = chunk_counter_completion(n);
    if (k < 0 || n->delivered != before + k || completion < n->delivered ||
        completion > n->delivered + CHUNK_STOP_TOKEN_SLACK ||
        (n->max_tokens > 0 && (n->delivered > n->max_tokens || completion > n->max_tokens))) {
        fprintf(stderr,
                "fuzz_sse_chunk: count %d, delivered %lld -> %lld, completion %lld, max %lld\n", k,
                (long long)before, (long long)n->delivered, (long long)completion,
                (long long)n->max_tokens);
        abort();
    }
}

static bool same_chunk(const chunk_info *a, const chunk_info *b)
{
    return a->done == b->done && a->is_error == b->is_error && strcmp(a->error, b->error) == 0 &&
           a->has_choices == b->has_choices && a->has_text == b->has_text &&
           a->has_usage == b->has_usage && a->bad_count == b->bad_count &&
           a->prompt_tokens == b->prompt_tokens && a->completion_tokens == b->completion_tokens &&
           strcmp(a->finish_reason, b->finish_reason) == 0 && a->stopped == b->stopped &&
           a->emit_ns == b->emit_ns && a->step == b->step;
}

static void decode_one(const char *data, size_t len, const char *type, chunk_counter *n)
{
    sse_event ev = {.data = data, .data_len = len, .type = type};
    chunk_info c, ref;
    char err[ERR_LEN], ref_err[ERR_LEN];
    const int rc = chunk_decode(&ev, &c, err);
    /* JSON never holds a NUL byte: the scanner refuses every one; jansson 2.14 drops one
     * right after a number or a literal ({"x":1<NUL>} loads), so those are not compared. */
    const bool has_nul = memchr(data, '\0', len) != NULL;
    if (has_nul && !(rc == -1 || (rc == 0 && c.is_error && strcmp(type, "error") == 0))) {
        fprintf(stderr, "fuzz_sse_chunk: the scanner took a chunk with a NUL byte\n");
        abort();
    }
    const int ref_rc = has_nul ? rc : chunk_decode_jansson(&ev, &ref, ref_err);
    if (has_nul)
        ref = c;
    if (rc != ref_rc || (rc == 0 && !same_chunk(&c, &ref))) {
        fprintf(stderr, "fuzz_sse_chunk: the scanner returned %d, jansson %d (%s)\n", rc, ref_rc,
                rc == 0 && ref_rc == 0 ? "different fields" : ref_rc ? ref_err : err);
        abort();
    }
    if (rc == 0)
        check_chunk(&c, n);
    else if (rc != -1 || strnlen(err, sizeof err) == sizeof err)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int mode = data[0] & 3;
    const size_t len = size - 1;
    /* The splitter hands the decoder NUL-terminated data; so does this copy, exact size. */
    char *copy = malloc(len + 1);
    if (!copy)
        return 0;
    memcpy(copy, data + 1, len);
    copy[len] = '\0';
    chunk_counter n;
    chunk_counter_init(&n, (int64_t)(data[0] >> 3));
    if (mode < 3) {
        static const char *const types[3] = {"", "error", "message"};
        decode_one(copy, len, types[mode], &n);
    } else {
        sse_parser p;
        sse_parser_init(&p, 1 << 16);
        const char *at = copy;
        size_t left = len;
        while (left > 0) {
            size_t used = 0;
            sse_event ev;
            const int r = sse_parse(&p, at, left, &used, &ev);
            if (r == SSE_ERROR)
                break;
            at += used;
            left -= used;
            if (r == SSE_EVENT && !chunk_counter_ended(&n))
                decode_one(ev.data, ev.data_len, ev.type, &n);
        }
        sse_parser_free(&p);
    }
    free(copy);
    return 0;
}
