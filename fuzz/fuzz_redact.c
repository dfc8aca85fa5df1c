/* libFuzzer target: the redaction rule (src/common/redact.c), which every error message
 * (err_set), config.json's URLs and argv, and a --server-cmd template pass through.
 *
 * Input: the text up to the first NUL (as argv and messages give it); argv is the same text
 * split at '\n'. Checked: each function returns the length of its whole result and writes
 * exactly that when there is room; cut to any smaller size the result is a prefix of the
 * whole one (a cut never shows what the whole result masks); a redacted URL or text is a
 * fixed point (redacted again it is unchanged: the first pass left nothing the rule would
 * mask); err_set's message is terminated. A command or argv is not checked for a fixed
 * point: a quoted word the first pass read as a command ('X\= b' holds the words X= and b)
 * may read as one NAME=VALUE the second time, and lose more, never less. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/redact.h"

typedef size_t (*redact_fn)(const char *, char *, size_t);

static void fail(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_redact: %s for '%.300s'\n", what, text);
    abort();
}

/* The whole result (malloc'd), after the length and cut checks, and the fixed-point one when
 * fixed. */
static char *check(redact_fn fn, const char *name, const char *text, uint8_t cut_byte, bool fixed)
{
    const size_t n = fn(text, NULL, 0);
    char *whole = malloc(n + 1);
    if (!whole)
        return NULL;
    if (fn(text, whole, n + 1) != n || strlen(whole) != n)
        fail("length of the whole result", text);
    const size_t size = 1 + (size_t)cut_byte % (n + 1);
    char *cut = malloc(size);
    if (cut) {
        if (fn(text, cut, size) != n || strlen(cut) != size - 1 || memcmp(cut, whole, size - 1))
            fail("a cut result is not a prefix of the whole", text);
        free(cut);
    }
    const size_t again_n = fixed ? fn(whole, NULL, 0) : 0;
    char *again = fixed ? malloc(again_n + 1) : NULL;
    if (again) {
        fn(whole, again, again_n + 1);
        if (strcmp(again, whole) != 0) {
            fprintf(stderr, "fuzz_redact: %s once: '%.300s'\ntwice: '%.300s'\n", name, whole,
                    again);
            fail("not a fixed point", text);
        }
        free(again);
    }
    return whole;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    const uint8_t cut_byte = size ? data[size - 1] : 0;
    free(check(redact_url, "redact_url", text, cut_byte, true));
    free(check(redact_text, "redact_text", text, cut_byte, true));
    free(check(redact_command, "redact_command", text, cut_byte, false));

    char err[ERR_LEN];
    err_set(err, "%s", text);
    if (strnlen(err, sizeof err) == sizeof err)
        fail("unterminated error", text);

    /* argv: the lines */
    int argc = 0;
    char *argv[64];
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && argc < 64;
         line = strtok_r(NULL, "\n", &save))
        argv[argc++] = line;
    char **once = redact_argv(argc, argv);
    for (int i = 0; once && i < argc; i++)
        if (!once[i])
            fail("argv lost an element", argv[i]);
    if (once && once[argc])
        fail("argv is not NULL-terminated", text);
    redact_argv_free(argc, once);
    free(text);
    return 0;
}
