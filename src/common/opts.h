/* opts — table-driven command-line parsing shared by every subcommand.
 * Options are "--name value", "--name=value" or "--flag". Each command assembles groups of
 * specs (workload, engine, scheduler, output ...) so the same flag means the same thing
 * everywhere, and --help is generated from the same tables. */
#ifndef STALLSCOPE_OPTS_H
#define STALLSCOPE_OPTS_H
#include <stdio.h>

typedef struct opts_spec {
    const char *name;    /* without the leading "--" */
    const char *metavar; /* "N", "DUR" ...; NULL for a flag without value */
    const char *help;    /* one line; may mention the default */
    /* Apply the option to ctx; value is NULL for flags. Returns 0 or -1 with err filled. */
    int (*apply)(void *ctx, const char *value, char *err);
} opts_spec;

typedef struct opts_group {
    const char *title;
    const opts_spec *specs;
    int n_specs;
    void *ctx;
} opts_group;

/* Parse argv[0..argc) (argv[0] is the first option, not the program). Positional
 * arguments are collected into positional[] (at most max_positional, count in *n_positional;
 * pass NULL/0 to refuse any). Returns 0, or -1 with err filled ("unknown option --x",
 * "--users needs a value", "--users: 'q' is not a size"). */
int opts_parse(int argc, char **argv, const opts_group *groups, int n_groups, char **positional,
               int max_positional, int *n_positional, char *err);

/* 1 when argv holds -h or --help. */
int opts_wants_help(int argc, char **argv);

/* The value of "--name" in argv (either form), or NULL; for pre-scans such as --preset. */
const char *opts_find(int argc, char **argv, const char *name);

void opts_print_help(FILE *out, const char *usage, const char *description,
                     const opts_group *groups, int n_groups);

#endif
