/* libFuzzer target: the Prometheus text exposition parser (src/client/prom.c), which reads
 * whatever a --target's /metrics sends during a run.
 *
 * Input: the exposition, from an exact-size heap copy (ASan catches a read past len). The
 * contract checked on what the parser accepts:
 *   - whole-text parsing and line-by-line parsing give the same samples and the same verdict;
 *   - every slice (name, family, label names and values) lies inside the input, names are
 *     metric names, a sample's family is a prefix of its name;
 *   - an accepted sample written back as "name{label="value",...} value" parses again to
 *     the same name, the same labels (unescaped) and the same value (NaN stays NaN);
 *   - a refusal says "line N, column C: ..." with N the line it stopped at. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/prom.h"
#include "common/err.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_prom: %s\n", what);
    abort();
}

typedef struct ctx {
    const char *base;
    size_t len;
    int samples;
} ctx;

static void inside(const ctx *c, const char *p, size_t n)
{
    if (n > 0 && (p < c->base || p + n > c->base + c->len))
        fail("a slice outside the input");
}

static void same_value(double a, double b)
{
    if (!(a == b || (isnan(a) && isnan(b))))
        fail("the value changed through a round trip");
}

static int check(void *arg, const prom_sample *s)
{
    ctx *c = arg;
    c->samples++;
    inside(c, s->name, s->name_len);
    if (s->family_len > s->name_len || memcmp(s->name, s->family, s->family_len) != 0)
        fail("the family is not a prefix of the name");
    /* Write it back: labels re-escaped from their unescaped values. */
    static char line[1 << 16];
    size_t at = 0;
    at += (size_t)snprintf(line, sizeof line, "%.*s{", (int)s->name_len, s->name);
    static char value[1 << 14];
    for (int i = 0; i < s->n_labels; i++) {
        const prom_label *l = &s->labels[i];
        inside(c, l->name, l->name_len);
        inside(c, l->value, l->value_len);
        char name[256];
        if (l->name_len >= sizeof name)
            return 0;
        memcpy(name, l->name, l->name_len);
        name[l->name_len] = '\0';
        int n = prom_label_get(s, name, value, sizeof value);
        if (n < 0 || (size_t)n > l->value_len)
            fail("a label's value cannot be read back");
        at += (size_t)snprintf(line + at, sizeof line - at, "%s=\"", name);
        for (int j = 0; j < n && at + 4 < sizeof line; j++) {
            char ch = value[j];
            if (ch == '\\' || ch == '"')
                line[at++] = '\\';
            if (ch == '\n') {
                line[at++] = '\\';
                ch = 'n';
            }
            line[at++] = ch;
        }
        at += (size_t)snprintf(line + at, sizeof line - at, "\",");
    }
    if (at + 40 >= sizeof line)
        return 0;
    at += (size_t)snprintf(line + at, sizeof line - at, "} %.17g", s->value);
    prom_parser p;
    prom_parser_init(&p);
    prom_sample back;
    char err[ERR_LEN];
    if (prom_parse_line(&p, line, at, &back, err) != 1) {
        fprintf(stderr, "fuzz_prom: '%s' -> %s\n", line, err);
        fail("a sample written back is refused");
    }
    if (back.name_len != s->name_len || memcmp(back.name, s->name, s->name_len) != 0 ||
        back.n_labels != s->n_labels)
        fail("a sample written back reads differently");
    same_value(back.value, s->value);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size ? size : 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    ctx whole = {text, size, 0};
    char err[ERR_LEN] = "";
    int rc = prom_parse(text, size, check, &whole, err);
    if (rc != 0 && rc != -1)
        fail("prom_parse returned something else than 0 or -1");
    if (rc == -1 && strncmp(err, "line ", 5) != 0)
        fail("a refusal without its line");

    /* Line by line, each line from its own exact-size copy. */
    prom_parser p;
    prom_parser_init(&p);
    int samples = 0, verdict = 0;
    size_t at = 0;
    while (at < size) {
        const char *nl = memchr(text + at, '\n', size - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : size - at;
        char *line = malloc(n ? n : 1);
        if (!line)
            break;
        memcpy(line, text + at, n);
        prom_sample s;
        char line_err[ERR_LEN];
        int r = prom_parse_line(&p, line, n, &s, line_err);
        free(line);
        if (r < 0) {
            verdict = -1;
            char want[32];
            snprintf(want, sizeof want, "line %d,", p.line);
            if (strncmp(line_err, want, strlen(want)) != 0 || strcmp(line_err, err) != 0)
                fail("line-by-line refusal differs from the whole text's");
            break;
        }
        samples += r;
        at += n + (nl ? 1 : 0);
    }
    if (verdict != rc || samples != whole.samples)
        fail("line by line and whole text disagree");
    free(text);
    return 0;
}
