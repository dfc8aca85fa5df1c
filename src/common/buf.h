/* buf — the one growable byte buffer of stallscope.
 *
 * Every module that builds bytes of unknown length uses it: the server's SSE chunk encoding
 * and non-streamed answers (streams.c, openai.c), the /metrics text (metrics.c), the report's
 * verdict (table.c), the SVG that cairo writes for a plot (plot.c), the client's response
 * bodies and unparsed stream bytes (reply.c), the engine's stop-string tail (engine.c) and
 * the CSV reader's record (tokenlog_read.c). One type, one growth rule, one place to get the
 * NUL and the overflow checks right, instead of a hand-rolled copy per module.
 *
 * A zeroed struct is an empty buffer: `buf b = {0};`. After any append (even of zero
 * bytes) data is NUL-terminated, so text users can treat it as a C string; binary users
 * ignore the NUL (it is not counted in len). Before the first append data may be NULL.
 *
 * Out of memory. Appends return 0 or -1, and a failure also sets `failed`, which stays set
 * until buf_reset or buf_free: every later append returns -1 at once and leaves the content
 * as it was. So a caller building a message from many pieces may ignore the returns and
 * check `failed` once at the end; the content is then a prefix of what was meant, never a
 * text with a piece missing from its middle. */
#ifndef STALLSCOPE_BUF_H
#define STALLSCOPE_BUF_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct buf {
    char *data;  /* NUL-terminated once anything was appended; NULL before */
    size_t len;  /* bytes held, not counting the NUL */
    size_t cap;  /* bytes allocated (room for len + 1) */
    bool failed; /* an append ran out of memory: data is incomplete (sticky, see above) */
} buf;

/* Room for `extra` more bytes plus the NUL, so a caller may write data[len, len + extra)
 * directly, then advance len and put the NUL at data[len] itself. */
int buf_reserve(buf *b, size_t extra);
int buf_append(buf *b, const void *data, size_t n);
int buf_append_str(buf *b, const char *s);
int buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Drop the first n bytes (all when n >= len), moving the rest to the front. */
void buf_consume(buf *b, size_t n);
/* Empty it and clear `failed`, keeping the memory: a buffer reused per message does not
 * allocate after warm-up. */
void buf_reset(buf *b);
void buf_free(buf *b);
/* Hand the content over as a malloc'd NUL-terminated string ("" when empty) and leave b
 * empty. NULL when b failed or memory ran out; b is emptied either way. */
char *buf_detach(buf *b);

/* An array of items growing by doubling (from 64): room for `need` items of item_size in
 * *items, whose capacity is *cap (both updated). Amortised O(1) appends. 0, or -1 when out
 * of memory or past SIZE_MAX bytes (*items and *cap unchanged). */
int buf_grow_items(void **items, int64_t *cap, int64_t need, size_t item_size);

#endif
