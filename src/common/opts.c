#include "common/opts.h"

#include <stdbool.h>
#include <string.h>

#include "common/err.h"
#include "common/units.h"

const opts_spec *opts_lookup(const opts_group *groups, int n_groups, const char *name,
                             size_t name_len, int *group)
{
    for (int g = 0; g < n_groups; g++)
        for (int i = 0; i < groups[g].n_specs; i++) {
            const opts_spec *s = &groups[g].specs[i];
            if (strlen(s->name) == name_len && strncmp(s->name, name, name_len) == 0) {
                if (group)
                    *group = g;
                return s;
            }
        }
    return NULL;
}

/* The size the field of each kind must have. */
static size_t kind_size(opts_kind kind)
{
    switch (kind) {
    case OPTS_SET_FLAG:
        return sizeof(bool);
    case OPTS_SET_INT:
        return sizeof(int);
    case OPTS_SET_INT64:
    case OPTS_SET_DURATION:
        return sizeof(int64_t);
    case OPTS_SET_FRACTION:
    case OPTS_SET_POSITIVE:
        return sizeof(double);
    case OPTS_SET_STRING: /* any char array of at least 2 bytes */
    case OPTS_APPLY:
        return 0;
    }
    return 0;
}

int opts_check(const opts_group *groups, int n_groups, char *err)
{
    for (int g = 0; g < n_groups; g++)
        for (int i = 0; i < groups[g].n_specs; i++) {
            const opts_spec *s = &groups[g].specs[i];
            size_t want = kind_size(s->kind);
            if (s->kind == OPTS_APPLY ? !s->apply
                                      : (want ? s->size != want : s->size < 2))
                return err_set(err, "--%s: the spec's field does not fit its kind", s->name);
            if ((s->kind == OPTS_SET_FLAG) != (s->metavar == NULL) && s->kind != OPTS_APPLY)
                return err_set(err, "--%s: a flag takes no value, other kinds need one", s->name);
            if ((s->kind == OPTS_SET_INT || s->kind == OPTS_SET_INT64 ||
                 s->kind == OPTS_SET_DURATION) &&
                s->min > s->max)
                return err_set(err, "--%s: empty range", s->name);
        }
    return 0;
}

static int in_range(const char *value, int64_t v, int64_t min, int64_t max, char *err)
{
    if (v < min || v > max)
        return err_set(err, "'%s' is out of range [%lld, %lld]", value, (long long)min,
                       (long long)max);
    return 0;
}

static int set_field(const opts_spec *s, void *ctx, const char *value, char *err)
{
    char *field = (char *)ctx + s->offset;
    int64_t v = 0;
    double d = 0;
    switch (s->kind) {
    case OPTS_APPLY:
        return s->apply(ctx, value, err);
    case OPTS_SET_FLAG:
        *(bool *)field = true;
        return 0;
    case OPTS_SET_STRING:
        if (!value[0] || strlen(value) >= s->size)
            return err_set(err, "'%.60s' is empty or longer than %zu bytes", value, s->size - 1);
        memcpy(field, value, strlen(value) + 1);
        return 0;
    case OPTS_SET_INT:
    case OPTS_SET_INT64:
        if (units_parse_count(value, &v, err) != 0 || in_range(value, v, s->min, s->max, err) != 0)
            return -1;
        if (s->kind == OPTS_SET_INT)
            *(int *)field = (int)v;
        else
            *(int64_t *)field = v;
        return 0;
    case OPTS_SET_DURATION:
        if (units_parse_duration_ns(value, &v, err) != 0)
            return -1;
        if (v < s->min || v > s->max) {
            char lo[32], hi[32];
            units_format_duration(s->min, lo, sizeof lo);
            units_format_duration(s->max, hi, sizeof hi);
            return err_set(err, "'%s' is out of range [%s, %s]", value, lo, hi);
        }
        *(int64_t *)field = v;
        return 0;
    case OPTS_SET_FRACTION:
    case OPTS_SET_POSITIVE:
        if (units_parse_quantity(value, &d, err) != 0)
            return -1;
        if (s->kind == OPTS_SET_FRACTION && !(d > 0 && d <= 1))
            return err_set(err, "'%s' must be in (0, 1]", value);
        if (s->kind == OPTS_SET_POSITIVE && !(d > 0))
            return err_set(err, "'%s' must be positive", value);
        *(double *)field = d;
        return 0;
    }
    return err_set(err, "unknown option kind");
}

static int apply_spec(const opts_spec *s, void *ctx, const char *value, char *err)
{
    char inner[ERR_LEN];
    inner[0] = '\0';
    if (set_field(s, ctx, value, inner) != 0)
        return err_set(err, "--%s: %s", s->name, inner);
    return 0;
}

int opts_apply(const opts_group *groups, int n_groups, const char *name, const char *value,
               char *err)
{
    int g = 0;
    const opts_spec *s = opts_lookup(groups, n_groups, name, strlen(name), &g);
    if (!s)
        return err_set(err, "unknown option --%s (see --help)", name);
    if ((s->metavar != NULL) != (value != NULL))
        return err_set(err, s->metavar ? "--%s needs a value (%s)" : "--%s takes no value",
                       s->name, s->metavar);
    return apply_spec(s, groups[g].ctx, value, err);
}

int opts_parse(int argc, char **argv, const opts_group *groups, int n_groups, char **positional,
               int max_positional, int *n_positional, char *err)
{
    if (n_positional)
        *n_positional = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            if (!positional || !n_positional || *n_positional >= max_positional)
                return err_set(err, "unexpected argument '%s' (see --help)", arg);
            positional[(*n_positional)++] = argv[i];
            continue;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
        int g = 0;
        const opts_spec *spec = opts_lookup(groups, n_groups, name, name_len, &g);
        if (!spec)
            return err_set(err, "unknown option --%.*s (see --help)", (int)name_len, name);
        const char *value = NULL;
        if (spec->metavar) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else
                return err_set(err, "--%s needs a value (%s)", spec->name, spec->metavar);
        } else if (eq) {
            return err_set(err, "--%s takes no value", spec->name);
        }
        if (apply_spec(spec, groups[g].ctx, value, err) != 0)
            return -1;
    }
    return 0;
}

int opts_wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}

const char *opts_find(int argc, char **argv, const char *name)
{
    size_t len = strlen(name);
    const char *found = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, name, len) != 0)
            continue;
        if (a[2 + len] == '=')
            found = a + 3 + len;
        else if (a[2 + len] == '\0' && i + 1 < argc)
            found = argv[i + 1];
    }
    return found;
}

void opts_print_help(FILE *out, const char *usage, const char *description,
                     const opts_group *groups, int n_groups)
{
    fprintf(out, "usage: %s\n\n%s\n", usage, description);
    for (int g = 0; g < n_groups; g++) {
        fprintf(out, "\n%s:\n", groups[g].title);
        for (int i = 0; i < groups[g].n_specs; i++) {
            const opts_spec *s = &groups[g].specs[i];
            char left[64];
            snprintf(left, sizeof left, "--%s%s%s", s->name, s->metavar ? " " : "",
                     s->metavar ? s->metavar : "");
            if (strlen(left) > 28)
                fprintf(out, "  %s\n  %-28s  %s\n", left, "", s->help);
            else
                fprintf(out, "  %-28s  %s\n", left, s->help);
        }
    }
}

/* Markdown's own characters in a table cell are escaped, so the text reads as --help prints
 * it ('|' would end the cell, '<N>' would be an HTML tag, '***' emphasis). Inside a code span
 * only '|' needs it (a table splits its cells before it reads code spans). */
static void put_cell(FILE *out, const char *s, bool code)
{
    for (; *s; s++) {
        if (*s == '|' || (!code && (*s == '*' || *s == '<' || *s == '\\')))
            fputc('\\', out);
        fputc(*s, out);
    }
}

void opts_print_help_markdown(FILE *out, const char *usage, const char *description,
                              const opts_group *groups, int n_groups)
{
    fprintf(out, "```text\nusage: %s\n\n%s\n```\n", usage, description);
    for (int g = 0; g < n_groups; g++) {
        fprintf(out, "\n**%s**\n\n| option | what it does |\n| --- | --- |\n", groups[g].title);
        for (int i = 0; i < groups[g].n_specs; i++) {
            const opts_spec *s = &groups[g].specs[i];
            fprintf(out, "| `--%s", s->name);
            if (s->metavar) {
                fputc(' ', out);
                put_cell(out, s->metavar, true);
            }
            fputs("` | ", out);
            put_cell(out, s->help, false);
            fputs(" |\n", out);
        }
    }
}

int opts_show_help(FILE *out, int argc, char **argv, const char *usage, const char *description,
                   const opts_group *groups, int n_groups)
{
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help-markdown") == 0) {
            opts_print_help_markdown(out, usage, description, groups, n_groups);
            return 1;
        }
    if (!opts_wants_help(argc, argv))
        return 0;
    opts_print_help(out, usage, description, groups, n_groups);
    return 1;
}
