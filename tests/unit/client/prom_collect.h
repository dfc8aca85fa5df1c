/* prom_collect — a page through the exposition parser (client/prom.h), its samples
 * collected with their names and families; a page it refuses fails the test (test_prom,
 * test_scrape). Include after <cmocka.h>. */
#ifndef STALLSCOPE_TEST_PROM_COLLECT_H
#define STALLSCOPE_TEST_PROM_COLLECT_H
#include <stdio.h>
#include <string.h>

#include "client/prom.h"
#include "common/err.h"

#define MAX_SEEN 256

typedef struct seen {
    prom_sample s[MAX_SEEN];
    char names[MAX_SEEN][128];
    char families[MAX_SEEN][128];
    int n;
} seen;

static inline int collect(void *ctx, const prom_sample *s)
{
    seen *v = ctx;
    if (v->n == MAX_SEEN)
        return 7;
    v->s[v->n] = *s;
    snprintf(v->names[v->n], sizeof v->names[0], "%.*s", (int)s->name_len, s->name);
    snprintf(v->families[v->n], sizeof v->families[0], "%.*s", (int)s->family_len, s->family);
    v->n++;
    return 0;
}

static inline void parse_ok(const char *text, seen *v)
{
    char err[ERR_LEN] = "";
    memset(v, 0, sizeof *v);
    if (prom_parse(text, strlen(text), collect, v, err) != 0)
        fail_msg("refused: %s\n%s", err, text);
}

#endif
