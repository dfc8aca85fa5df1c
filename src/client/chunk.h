/* chunk — what a stream's events say, and what they add up to.
 *
 * The decoder: one event's data -> what a load generator needs from it, for the chunk
 * shapes of OpenAI completions ("choices[].text") and chat ("choices[].delta"), vLLM /
 * SGLang (the same, plus usage in every chunk with continuous_usage_stats), llama.cpp's
 * native /completion ("content", "stop", "tokens_predicted"), TGI ("token"), usage-only
 * chunks, "[DONE]", error events, and stallscope's own optional "stallscope": {"emit_ns",
 * "step"}. One rule (chunk.c) reads the chunk through json_scan's reader: in place, in one
 * pass, building nothing (no DOM); the same rule over jansson is the reference the tests
 * and the fuzzer hold it to.
 *
 * The counter: a stream's history (what it delivered, what its usage said, whether it
 * ended) turns each decoded chunk into the tokens it delivered, and refuses (and counts)
 * what cannot be true. */
#ifndef STALLSCOPE_CHUNK_H
#define STALLSCOPE_CHUNK_H
#include <stdbool.h>
#include <stdint.h>

#include "client/sse.h"

typedef struct chunk_info {
    bool done;         /* "data: [DONE]" */
    bool is_error;     /* an error event or an {"error": ...} body */
    char error[160];   /* its message */
    bool has_choices;  /* a generation chunk (choices[] non-empty, or a native token chunk) */
    bool has_text;     /* it carries non-empty generated text (or a token) */
    bool has_usage;    /* usage (or native counters) present */
    bool bad_count;    /* a count that cannot be one (negative, fractional, not a number, above
                          CHUNK_MAX_COUNT): it is left at -1, and the counter calls it a
                          violation */
    int64_t prompt_tokens;     /* -1 when absent (or bad) */
    int64_t completion_tokens; /* -1 when absent (or bad) */
    char finish_reason[16];    /* "" when none; "length", "stop", ... */
    bool stopped;              /* the server says the answer is over (finish or stop) */
    int64_t emit_ns;           /* stallscope's emit time, CLOCK_MONOTONIC ns; -1 absent */
    int64_t step;              /* stallscope's engine step index; -1 absent */
} chunk_info;

/* Decode one event. 0, or -1 when data is not JSON (err says so: a malformed stream).
 * An error event decodes fine: 0 with is_error set. Through the scanner (json_scan.h): it
 * accepts the JSON jansson 2.14 accepts and looks only at the members above (of duplicate
 * keys, the last), so it gives what chunk_decode_jansson gives (err's wording aside). One
 * exception: data with a NUL byte is never JSON and always refused, where jansson's lexer
 * drops one NUL right after a number or a literal ({"x":1<NUL>} loads as {"x":1}). */
int chunk_decode(const sse_event *ev, chunk_info *out, char *err);
/* The same rule over a jansson DOM: the reference (tests, fuzz/fuzz_sse_chunk). */
int chunk_decode_jansson(const sse_event *ev, chunk_info *out, char *err);

/* ---- the counter: one stream's tokens -------------------------------------------- */

/* The largest count a server may report: token counts are int32 in the token log. */
#define CHUNK_MAX_COUNT INT32_MAX

/* What a server sent that cannot be true. The event (or the count in it) is ignored, never
 * taken as tokens, and counted; docs/reference/run.md lists them. */
typedef enum chunk_violation {
    CHUNK_VIOLATION_NONE = 0,
    CHUNK_VIOLATION_AFTER_DONE,      /* any event after "data: [DONE]" (another [DONE] too) */
    CHUNK_VIOLATION_BAD_COUNT,       /* a usage count that is not a count (see bad_count) */
    CHUNK_VIOLATION_COUNT_BACKWARDS, /* usage.completion_tokens below an earlier one */
    CHUNK_VIOLATION_PAST_MAX,        /* usage.completion_tokens above the request's max_tokens,
                                      or a token once the request has all max_tokens */
    CHUNK_VIOLATION_ABOVE_STREAM,    /* usage.completion_tokens above the tokens streamed (see
                                      chunk_counter_add) */
    CHUNK_VIOLATION_KINDS
} chunk_violation;

/* One stream's accounting: what it delivered, what its usage said, whether it ended. */
typedef struct chunk_counter {
    int64_t max_tokens;        /* what the request asked for; <= 0: unknown, unbounded */
    int64_t delivered;         /* completion tokens delivered so far, <= max_tokens */
    int64_t usage_completion;  /* the last believable usage.completion_tokens, -1 none */
    int64_t usage_prompt;      /* the last believable usage.prompt_tokens, -1 none */
    bool done;                 /* "[DONE]" seen */
    int64_t violations;        /* events ignored or corrected, all kinds */
    int64_t by_kind[CHUNK_VIOLATION_KINDS]; /* the same by kind ([NONE] stays 0) */
    chunk_violation first;                  /* the first violation's kind, NONE without */
} chunk_counter;

void chunk_counter_init(chunk_counter *c, int64_t max_tokens);
/* True once the stream sent [DONE]: then every event is a violation (counted here) and is
 * not to be decoded further. */
bool chunk_counter_ended(chunk_counter *c);
/* Tokens one decoded chunk delivered. With usage in a generation chunk
 * (continuous_usage_stats) it is the increase of usage.completion_tokens, so an event
 * carrying k tokens counts k; without usage (or with a count the counter refuses), one per
 * chunk with text. A usage-only chunk delivers none. Never more than max_tokens in all.
 * A usage is believed only as far as the stream shows it: a chunk with text may carry
 * several tokens only in a stream whose usage counted every event before it (vLLM's
 * continuous usage, where a held-back token comes with the next); any other chunk's usage
 * (a usage-only or text-less chunk, or a first count after events counted one each) may
 * pass the tokens delivered by at most this chunk's text and CHUNK_STOP_TOKEN_SLACK. More
 * is CHUNK_VIOLATION_ABOVE_STREAM: the count is refused, the chunk counts as without usage. */
int chunk_counter_add(chunk_counter *c, const chunk_info *chunk);
/* A usage may count this many tokens the stream never showed: the stop token (EOS), which
 * streams no text. */
#define CHUNK_STOP_TOKEN_SLACK 1
/* The request's completion tokens: its last believable usage, or what was delivered when
 * that is more (a refused count leaves the usage behind the tokens taken). At most the
 * tokens delivered + CHUNK_STOP_TOKEN_SLACK. */
int64_t chunk_counter_completion(const chunk_counter *c);
/* "an event after [DONE]", ... for messages. */
const char *chunk_violation_text(chunk_violation v);
/* "after_done", "bad_count", "count_backwards", "past_max", "above_stream": the keys of
 * fidelity.json's "violations_by_kind" ("none" for NONE). */
const char *chunk_violation_name(chunk_violation v);

/* One event of a stream, decoded and counted: unless the stream has ended ([DONE]: the
 * event is then a violation, counted, and not decoded: *out is empty), chunk_decode, then
 * chunk_counter_add. Returns the tokens it delivered (>= 0) with *out the decoded chunk, or
 * -1 with err when the event fails the stream: data that is not JSON, or an error event
 * ("server error event: MESSAGE"). */
int chunk_counter_event(chunk_counter *c, const sse_event *ev, chunk_info *out, char *err);

#endif
