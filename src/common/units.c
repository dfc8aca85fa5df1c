#include "common/units.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* Parse a finite decimal number and return a pointer to what follows, or NULL. */
static const char *parse_number(const char *text, double *out)
{
    if (!text || !*text)
        return NULL;
    /* strtod accepts leading spaces, hex and "inf"/"nan": we accept plain decimals only. */
    const char c = text[0];
    if (!(c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9')))
        return NULL;
    if (strchr(text, 'x') || strchr(text, 'X'))
        return NULL;
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno == ERANGE || !isfinite(v))
        return NULL;
    *out = v;
    return end;
}

int units_parse_count(const char *text, int64_t *out, char *err)
{
    double v;
    const char *rest = parse_number(text, &v);
    if (!rest)
        return err_set(err, "'%s' is not a size (examples: 8000, 8k, 16k)", text ? text : "");
    double mult = 1;
    if (*rest == 'k' || *rest == 'K')
        mult = 1e3, rest++;
    else if (*rest == 'M')
        mult = 1e6, rest++;
    if (*rest != '\0')
        return err_set(err, "'%s' is not a size: unexpected '%s' (examples: 8000, 8k, 16k)",
                       text, rest);
    v *= mult;
    if (v != floor(v))
        return err_set(err, "'%s' is not a whole number of tokens", text);
    if (v < -9.0e15 || v > 9.0e15)
        return err_set(err, "'%s' is out of range", text);
    *out = (int64_t)v;
    return 0;
}

int units_parse_duration_ns(const char *text, int64_t *out, char *err)
{
    double v;
    const char *rest = parse_number(text, &v);
    if (!rest)
        return err_set(err, "'%s' is not a duration (examples: 40s, 500ms, 1.5s)",
                       text ? text : "");
    double mult;
    /* A bare number would be seconds to one reader and milliseconds to another (a stall
     * threshold of "50"): only zero, the same in every unit, may go without one. */
    if (*rest == '\0' && v != 0)
        return err_set(err, "'%s' needs a unit: %ss or %sms? (ns, us, ms, s, m, h)", text, text,
                       text);
    if (*rest == '\0' || strcmp(rest, "s") == 0)
        mult = 1e9;
    else if (strcmp(rest, "ms") == 0)
        mult = 1e6;
    else if (strcmp(rest, "us") == 0)
        mult = 1e3;
    else if (strcmp(rest, "ns") == 0)
        mult = 1;
    else if (strcmp(rest, "m") == 0 || strcmp(rest, "min") == 0)
        mult = 60e9;
    else if (strcmp(rest, "h") == 0)
        mult = 3600e9;
    else
        return err_set(err, "'%s' is not a duration: unknown unit '%s' (use ns, us, ms, s, m, h)",
                       text, rest);
    v *= mult;
    if (v < -9.0e18 || v > 9.0e18)
        return err_set(err, "'%s' is out of range", text);
    *out = (int64_t)llround(v);
    return 0;
}

int units_parse_quantity(const char *text, double *out, char *err)
{
    double v;
    const char *rest = parse_number(text, &v);
    if (!rest)
        return err_set(err, "'%s' is not a number (examples: 989T, 3.35e12, 16G)",
                       text ? text : "");
    static const struct {
        char suffix;
        double mult;
    } si[] = {{'k', 1e3}, {'K', 1e3}, {'M', 1e6}, {'G', 1e9}, {'T', 1e12}, {'P', 1e15}};
    if (*rest) {
        size_t i;
        for (i = 0; i < sizeof si / sizeof si[0]; i++)
            if (*rest == si[i].suffix)
                break;
        if (i == sizeof si / sizeof si[0] || rest[1] != '\0')
            return err_set(err, "'%s' is not a number: unexpected '%s'", text, rest);
        v *= si[i].mult;
    }
    /* "41e305K" is finite until the suffix multiplies it (found by fuzz/fuzz_units). */
    if (!isfinite(v))
        return err_set(err, "'%s' is out of range", text);
    *out = v;
    return 0;
}

typedef int (*item_parser)(const char *, int64_t *, char *);

static int parse_list(const char *text, int64_t *out, int max, int *n, char *err,
                      item_parser parse)
{
    char buf[1024];
    if (!text || !*text || strlen(text) >= sizeof buf)
        return err_set(err, "'%s' is empty or too long for a list", text ? text : "");
    strcpy(buf, text);
    *n = 0;
    /* Split by hand: strtok would silently skip an empty item ("4k,,8k"). */
    for (char *item = buf;;) {
        char *comma = strchr(item, ',');
        if (comma)
            *comma = '\0';
        if (*item == '\0')
            return err_set(err, "'%s' has an empty item", text);
        if (*n >= max)
            return err_set(err, "'%s': at most %d items", text, max);
        if (parse(item, &out[*n], err) != 0)
            return -1;
        (*n)++;
        if (!comma)
            break;
        item = comma + 1;
    }
    return 0;
}

int units_parse_count_list(const char *text, int64_t *out, int max, int *n, char *err)
{
    return parse_list(text, out, max, n, err, units_parse_count);
}

int units_parse_duration_list(const char *text, int64_t *out, int max, int *n, char *err)
{
    return parse_list(text, out, max, n, err, units_parse_duration_ns);
}

void units_format_duration(int64_t ns, char *buf, size_t size)
{
    double a = fabs((double)ns);
    if (a >= 1e9)
        snprintf(buf, size, "%.2f s", (double)ns / 1e9);
    else if (a >= 1e6)
        snprintf(buf, size, "%.1f ms", (double)ns / 1e6);
    else if (a >= 1e3)
        snprintf(buf, size, "%.1f us", (double)ns / 1e3);
    else
        snprintf(buf, size, "%lld ns", (long long)ns);
}
