#include "common/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Small enough that a buffer per request costs little, large enough that the short texts
 * most users build need one allocation. */
#define BUF_MIN_CAP 64

static int fail(buf *b)
{
    b->failed = true;
    return -1;
}

int buf_reserve(buf *b, size_t extra)
{
    if (b->failed)
        return -1;
    /* len + extra + 1 must not wrap: a wrapped size would "fit" and the copy overrun. */
    if (extra > SIZE_MAX - 1 - b->len)
        return fail(b);
    const size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    /* Doubling keeps a stream of small appends at O(log n) reallocations. */
    size_t cap = b->cap ? b->cap : BUF_MIN_CAP;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *grown = realloc(b->data, cap);
    if (!grown)
        return fail(b);
    b->data = grown;
    b->cap = cap;
    return 0;
}

int buf_append(buf *b, const void *data, size_t n)
{
    if (buf_reserve(b, n) != 0)
        return -1;
    if (n > 0) /* data may be NULL when n is 0, and memcpy must not see it */
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_append_str(buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_printf(buf *b, const char *fmt, ...)
{
    if (b->failed)
        return -1;
    /* First try the room there is: most pieces fit, and then one vsnprintf does it all. */
    const size_t room = b->cap - b->len; /* >= 1 whenever data is allocated; 0 before */
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(room ? b->data + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= room) {
        if (buf_reserve(b, (size_t)n) == 0)
            vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
        else
            n = -1;
    }
    va_end(again);
    if (n < 0) {
        /* The first try may have written a cut piece over the NUL: put it back. */
        if (b->data)
            b->data[b->len] = '\0';
        return fail(b);
    }
    b->len += (size_t)n;
    return 0;
}

void buf_consume(buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->data, b->data + n, b->len - n);
        b->len -= n;
    }
    if (b->data)
        b->data[b->len] = '\0';
}

void buf_reset(buf *b)
{
    b->len = 0;
    b->failed = false;
    if (b->data)
        b->data[0] = '\0';
}

void buf_free(buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

char *buf_detach(buf *b)
{
    buf_append(b, "", 0); /* an empty buffer still hands over "" */
    char *out = b->failed ? NULL : b->data;
    if (!out)
        free(b->data);
    memset(b, 0, sizeof *b);
    return out;
}

int buf_grow_items(void **items, int64_t *cap, int64_t need, size_t item_size)
{
    if (need <= *cap)
        return 0;
    int64_t new_cap = *cap > 0 ? *cap : 64;
    while (new_cap < need) {
        if (new_cap > INT64_MAX / 2)
            return -1;
        new_cap *= 2;
    }
    if (item_size == 0 || (uint64_t)new_cap > SIZE_MAX / item_size)
        return -1;
    void *p = realloc(*items, (size_t)new_cap * item_size);
    if (!p)
        return -1;
    *items = p;
    *cap = new_cap;
    return 0;
}
