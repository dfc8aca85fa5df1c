/* redact — the one rule for credentials inside URLs, command lines and shell commands
 * (redact.h). Everything works on spans (pointer and length) into a sink that keeps what
 * fits and counts the rest, so a word of a command or a URL inside a message is one call. */
#include "common/redact.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A command inside a word inside a command ... (sh -c '...'): deeper ones are text. */
#define REDACT_MAX_DEPTH 4

/* Where a result goes: the first size - 1 bytes are kept, len counts them all. */
typedef struct sink {
    char *out;
    size_t size, len;
} sink;

static void put(sink *s, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++, s->len++)
        if (s->len + 1 < s->size)
            s->out[s->len] = p[i];
}

static void put_str(sink *s, const char *p)
{
    put(s, p, strlen(p));
}

static size_t finish(sink *s)
{
    if (s->size > 0)
        s->out[s->len < s->size ? s->len : s->size - 1] = '\0';
    return s->len;
}

/* ---- URLs -------------------------------------------------------------------------------- */

static bool scheme_char(char c)
{
    return isalnum((unsigned char)c) || c == '+' || c == '-' || c == '.';
}

/* The length of "scheme://" at the start of u[0, n), or 0 when it does not start so. */
static size_t scheme_len(const char *u, size_t n)
{
    if (n == 0 || !isalpha((unsigned char)u[0]))
        return 0;
    size_t i = 0;
    while (i < n && scheme_char(u[i]))
        i++;
    return i + 3 <= n && memcmp(u + i, "://", 3) == 0 ? i + 3 : 0;
}

static void url_span(sink *s, const char *u, size_t n)
{
    size_t i = scheme_len(u, n);
    put(s, u, i);
    size_t authority_end = i;
    while (authority_end < n && u[authority_end] != '/' && u[authority_end] != '?' &&
           u[authority_end] != '#')
        authority_end++;
    const char *at = NULL;
    for (size_t k = i; k < authority_end; k++)
        if (u[k] == '@')
            at = u + k;
    if (at) {
        put_str(s, REDACT_MASK "@");
        i = (size_t)(at - u) + 1;
    }
    size_t path_end = i;
    while (path_end < n && u[path_end] != '?' && u[path_end] != '#')
        path_end++;
    put(s, u + i, path_end - i);
    i = path_end;
    if (i < n && u[i] == '?') {
        put(s, "?", 1);
        i++;
        while (i < n && u[i] != '#') {
            size_t end = i;
            while (end < n && u[end] != '&' && u[end] != '#')
                end++;
            const char *eq = memchr(u + i, '=', end - i);
            if (eq) {
                put(s, u + i, (size_t)(eq - u) + 1 - i);
                put_str(s, REDACT_MASK);
            } else if (end > i) {
                put_str(s, REDACT_MASK); /* a bare ?TOKEN */
            }
            i = end;
            if (i < n && u[i] == '&') {
                put(s, "&", 1);
                i++;
            }
        }
    }
    if (i < n) { /* '#' */
        put(s, "#", 1);
        if (i + 1 < n)
            put_str(s, REDACT_MASK);
    }
}

/* Where a URL inside text ends: whitespace, a quote, an angle bracket. */
static bool url_end(char c)
{
    return isspace((unsigned char)c) || c == '"' || c == '\'' || c == '<' || c == '>' || c == '`';
}

static void text_span(sink *s, const char *t, size_t n)
{
    size_t i = 0;
    while (i < n) {
        const char *sep = memmem(t + i, n - i, "://", 3);
        if (!sep)
            break;
        const size_t k = (size_t)(sep - t);
        size_t start = k;
        while (start > i && scheme_char(t[start - 1]))
            start--;
        while (start < k && !isalpha((unsigned char)t[start]))
            start++;
        if (start == k) { /* "://" after no scheme: not a URL */
            put(s, t + i, k + 3 - i);
            i = k + 3;
            continue;
        }
        size_t end = k + 3;
        while (end < n && !url_end(t[end]))
            end++;
        /* A sentence's punctuation after the URL is not its last query value's: "GET
         * URL: refused" keeps its colon (only a query or fragment tail could lose a byte). */
        while (end > k + 3 && strchr(".,:;!)", t[end - 1]))
            end--;
        put(s, t + i, start - i);
        url_span(s, t + start, end - start);
        i = end;
    }
    put(s, t + i, n - i);
}

/* ---- words ------------------------------------------------------------------------------- */

static bool secret_part(const char *p, size_t n)
{
    static const char *const whole[] = {"key",    "apikey", "token",         "password",
                                        "passwd", "pass",   "secret",        "header",
                                        "auth",   "authorization", "credential", "credentials",
                                        "cookie", "bearer"};
    static const char *const endings[] = {"token", "password", "passwd", "secret", "apikey"};
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
        if (n == strlen(whole[i]) && strncasecmp(p, whole[i], n) == 0)
            return true;
    for (size_t i = 0; i < sizeof endings / sizeof endings[0]; i++) {
        const size_t len = strlen(endings[i]);
        if (n >= len && strncasecmp(p + n - len, endings[i], len) == 0)
            return true;
    }
    return false;
}

static bool url_part(const char *p, size_t n)
{
    return n == 3 && strncasecmp(p, "url", 3) == 0;
}

/* Whether a part of name[0, n) (split at '-' and '_') is one pred accepts. */
static bool any_part(const char *name, size_t n, bool (*pred)(const char *, size_t))
{
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && name[j] != '-' && name[j] != '_')
            j++;
        if (j > i && pred(name + i, j - i))
            return true;
        i = j + 1;
    }
    return false;
}

static bool command_part(const char *p, size_t n)
{
    return (n == 3 && strncasecmp(p, "cmd", 3) == 0) ||
           (n == 7 && strncasecmp(p, "command", 7) == 0);
}

/* What a flag's value is; also what a word makes of the next one (its flag's value). */
typedef enum { VALUE_ANY, VALUE_SECRET, VALUE_URL, VALUE_COMMAND } value_kind;

/* The value of a flag w[0, n) (dashes included, without its "=value"). */
static value_kind flag_value(const char *w, size_t n)
{
    if (n == 2 && w[1] == 'H') /* curl's header */
        return VALUE_SECRET;
    if (n == 2 && w[1] == 'c') /* sh -c '...' */
        return VALUE_COMMAND;
    if (n < 3 || w[1] != '-')
        return VALUE_ANY;
    const char *name = w + 2;
    const size_t len = n - 2;
    if (any_part(name, len, secret_part))
        return VALUE_SECRET;
    if ((len == 6 && memcmp(name, "target", 6) == 0) ||
        (len == 14 && memcmp(name, "scrape-metrics", 14) == 0) || any_part(name, len, url_part))
        return VALUE_URL;
    if (any_part(name, len, command_part))
        return VALUE_COMMAND;
    return VALUE_ANY;
}

/* The length of the identifier w starts with (NAME of NAME=VALUE), 0 when none. */
static size_t ident_len(const char *w, size_t n)
{
    if (n == 0 || !(isalpha((unsigned char)w[0]) || w[0] == '_'))
        return 0;
    size_t i = 1;
    while (i < n && (isalnum((unsigned char)w[i]) || w[i] == '_'))
        i++;
    return i;
}

static bool has_space(const char *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (isspace((unsigned char)w[i]))
            return true;
    return false;
}

static void command_span(sink *s, const char *c, size_t n, int depth);

/* A value of a known kind, w[0, n). A word of no known kind holding whitespace is taken for
 * a command too (sh -c's, a template inside argv): its words are each looked at. */
static void value_span(sink *s, value_kind kind, const char *w, size_t n, int depth)
{
    if (kind == VALUE_SECRET)
        put_str(s, REDACT_MASK);
    else if (kind == VALUE_URL)
        url_span(s, w, n);
    else if (depth < REDACT_MAX_DEPTH && (kind == VALUE_COMMAND || has_space(w, n)))
        command_span(s, w, n, depth + 1);
    else
        text_span(s, w, n);
}

/* The rule for one word w[0, n) (quotes already removed): *next is what the word before
 * made of it, and becomes what this one makes of the next. */
static void word_rule(sink *s, const char *w, size_t n, value_kind *next, int depth)
{
    const value_kind mine = *next;
    *next = VALUE_ANY;
    if (mine != VALUE_ANY) {
        value_span(s, mine, w, n, depth);
        return;
    }
    if (n > 2 && w[0] == '-' && w[1] == 'H') { /* -H'Name: value' */
        put(s, w, 2);
        put_str(s, REDACT_MASK);
        return;
    }
    if (n >= 2 && w[0] == '-') {
        const char *eq = memchr(w, '=', n);
        const size_t name_len = eq ? (size_t)(eq - w) : n;
        const value_kind kind = flag_value(w, name_len);
        if (kind != VALUE_ANY) {
            put(s, w, eq ? name_len + 1 : n);
            if (eq)
                value_span(s, kind, eq + 1, n - name_len - 1, depth);
            else
                *next = kind;
            return;
        }
    } else {
        /* NAME=VALUE is one value, spaces and all (NAME='a b' in a command) */
        const size_t id = ident_len(w, n);
        if (id > 0 && id < n && w[id] == '=' && any_part(w, id, secret_part)) {
            put(s, w, id + 1);
            put_str(s, REDACT_MASK);
            return;
        }
    }
    value_span(s, VALUE_ANY, w, n, depth);
}

/* One shell word from c[i]: its text without quotes into w (room for n - i bytes), *wn its
 * length; returns where the word ends (the first unquoted whitespace, or n). */
static size_t shell_word(const char *c, size_t n, size_t i, char *w, size_t *wn)
{
    size_t k = 0;
    char quote = 0;
    for (; i < n; i++) {
        const char ch = c[i];
        if (quote == '\'') {
            if (ch == '\'')
                quote = 0;
            else
                w[k++] = ch;
        } else if (quote == '"') {
            if (ch == '"')
                quote = 0;
            else if (ch == '\\' && i + 1 < n && strchr("\"\\$`", c[i + 1]))
                w[k++] = c[++i];
            else
                w[k++] = ch;
        } else if (isspace((unsigned char)ch)) {
            break;
        } else if (ch == '\'' || ch == '"') {
            quote = ch;
        } else if (ch == '\\' && i + 1 < n) {
            w[k++] = c[++i];
        } else {
            w[k++] = ch;
        }
    }
    *wn = k;
    return i;
}

/* A changed word as a shell would read it back: bare, or in single quotes. */
static void put_shell(sink *s, const char *r, size_t n)
{
    bool bare = n > 0;
    for (size_t i = 0; i < n && bare; i++)
        bare = !isspace((unsigned char)r[i]) && !strchr("'\"\\$`&|;<>()", r[i]);
    if (bare) {
        put(s, r, n);
        return;
    }
    put(s, "'", 1);
    for (size_t i = 0; i < n; i++) {
        if (r[i] == '\'')
            put_str(s, "'\\''");
        else
            put(s, r + i, 1);
    }
    put(s, "'", 1);
}

/* The rule's result for one word into a fresh string (counted first, then written). */
static char *word_result(const char *w, size_t n, value_kind *next, int depth, size_t *len)
{
    const value_kind before = *next;
    sink count = {NULL, 0, 0};
    word_rule(&count, w, n, next, depth);
    sink r = {malloc(count.len + 1), count.len + 1, 0};
    if (!r.out)
        return NULL;
    *next = before;
    word_rule(&r, w, n, next, depth);
    *len = finish(&r);
    return r.out;
}

static void command_span(sink *s, const char *c, size_t n, int depth)
{
    char *w = malloc(n + 1);
    if (!w) { /* nothing is shown that was not checked */
        put_str(s, REDACT_MASK);
        return;
    }
    value_kind next = VALUE_ANY;
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        while (start < n && isspace((unsigned char)c[start]))
            start++;
        put(s, c + i, start - i);
        if (start == n)
            break;
        size_t wn = 0, rn = 0;
        const size_t end = shell_word(c, n, start, w, &wn);
        char *r = word_result(w, wn, &next, depth, &rn);
        if (!r)
            put_str(s, REDACT_MASK);
        else if (rn == wn && memcmp(r, w, wn) == 0)
            put(s, c + start, end - start); /* untouched: its own bytes, quotes and all */
        else
            put_shell(s, r, rn);
        free(r);
        i = end;
    }
    free(w);
}

/* ---- the public face ------------------------------------------------------------------------ */

size_t redact_url(const char *url, char *out, size_t size)
{
    sink s = {out, size, 0};
    url_span(&s, url, strlen(url));
    return finish(&s);
}

size_t redact_text(const char *text, char *out, size_t size)
{
    sink s = {out, size, 0};
    text_span(&s, text, strlen(text));
    return finish(&s);
}

size_t redact_command(const char *command, char *out, size_t size)
{
    sink s = {out, size, 0};
    command_span(&s, command, strlen(command), 0);
    return finish(&s);
}

char **redact_argv(int argc, char *const *argv)
{
    char **out = calloc((size_t)(argc > 0 ? argc : 0) + 1, sizeof *out);
    if (!out)
        return NULL;
    value_kind next = VALUE_ANY;
    for (int i = 0; i < argc; i++) {
        size_t len = 0;
        if (!(out[i] = word_result(argv[i], strlen(argv[i]), &next, 0, &len))) {
            redact_argv_free(i, out);
            return NULL;
        }
    }
    return out;
}

void redact_argv_free(int argc, char **argv)
{
    if (!argv)
        return;
    for (int i = 0; i < argc; i++)
        free(argv[i]);
    free(argv);
}
