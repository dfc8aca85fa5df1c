#include "common/opts.h"

#include <string.h>

#include "common/err.h"

static const opts_spec *find_spec(const opts_group *groups, int n_groups, const char *name,
                                  size_t name_len, void **ctx)
{
    for (int g = 0; g < n_groups; g++)
        for (int i = 0; i < groups[g].n_specs; i++) {
            const opts_spec *s = &groups[g].specs[i];
            if (strlen(s->name) == name_len && strncmp(s->name, name, name_len) == 0) {
                *ctx = groups[g].ctx;
                return s;
            }
        }
    return NULL;
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
        void *ctx = NULL;
        const opts_spec *spec = find_spec(groups, n_groups, name, name_len, &ctx);
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
        char inner[ERR_LEN];
        inner[0] = '\0';
        if (spec->apply(ctx, value, inner) != 0)
            return err_set(err, "--%s: %s", spec->name, inner);
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
