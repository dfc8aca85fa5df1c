/* libFuzzer target: the size and duration parsers (src/common/units.c), which read every
 * number a user types on the command line.
 *
 * Input: the bytes up to the first NUL are the text (as argv gives it). Every parser sees
 * it; the contract (units.h) is checked on what they accept: counts within +-9e15 and whole,
 * durations within +-9e18 ns, quantities finite, lists no longer than their array. An
 * accepted count printed back with %lld parses to the same value. The formatter gets the
 * parsed durations and an arbitrary int64 from the input's first 8 bytes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/units.h"

#define LIST_MAX 8

static void fail(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_units: %s for '%.200s'\n", what, text);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* argv strings are NUL-terminated; 1,100 bytes reach past the list parser's 1 KiB. */
    if (size > 1100)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[ERR_LEN];
    char formatted[64];

    int64_t count = 0;
    if (units_parse_count(text, &count, err) == 0) {
        if (count < -9000000000000000LL || count > 9000000000000000LL)
            fail("count out of range", text);
        char again[32];
        snprintf(again, sizeof again, "%lld", (long long)count);
        int64_t back = 0;
        if (units_parse_count(again, &back, err) != 0 || back != count)
            fail("count does not round-trip", text);
    } else if (strnlen(err, sizeof err) == sizeof err) {
        fail("unterminated error", text);
    }

    int64_t ns = 0;
    if (units_parse_duration_ns(text, &ns, err) == 0) {
        if (ns < -9000000000000000000LL || ns > 9000000000000000000LL)
            fail("duration out of range", text);
        units_format_duration(ns, formatted, sizeof formatted);
        if (strnlen(formatted, sizeof formatted) == sizeof formatted)
            fail("unterminated duration text", text);
    }

    double q = 0;
    if (units_parse_quantity(text, &q, err) == 0 && !isfinite(q))
        fail("quantity not finite", text);

    int64_t list[LIST_MAX];
    int n = -1;
    if (units_parse_count_list(text, list, LIST_MAX, &n, err) == 0 && (n < 1 || n > LIST_MAX))
        fail("count list length", text);
    n = -1;
    if (units_parse_duration_list(text, list, LIST_MAX, &n, err) == 0 &&
        (n < 1 || n > LIST_MAX))
        fail("duration list length", text);

    /* Any int64, INT64_MIN included, formats without overflow. */
    int64_t raw = 0;
    memcpy(&raw, data, size < sizeof raw ? size : sizeof raw);
    units_format_duration(raw, formatted, sizeof formatted);
    units_format_duration(raw, formatted, 4); /* truncation is snprintf's business */

    free(text);
    return 0;
}
