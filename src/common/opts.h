/* opts — table-driven command-line parsing shared by every subcommand.
 * Options are "--name value", "--name=value" or "--flag". Each command assembles groups of
 * specs (workload, engine, scheduler, output ...) so the same flag means the same thing
 * everywhere, and --help is generated from the same tables.
 *
 * Most options set one field of the group's struct: a spec says which (its offset and
 * size) and what it holds (a flag, a string, a count, a duration, a fraction), and the one
 * parser of that kind checks and stores the value. A spec with an apply() function does
 * anything else (a choice among names, a range "MIN..MAX"). Sizes accept 8000, 8k, 16k;
 * durations need a unit (40s, 500ms; a bare 0 is zero), so a number never means seconds
 * in one command and milliseconds in another. */
#ifndef STALLSCOPE_OPTS_H
#define STALLSCOPE_OPTS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    OPTS_APPLY = 0,   /* apply(ctx, value, err) */
    OPTS_SET_FLAG,    /* bool <- true (no value) */
    OPTS_SET_STRING,  /* char[size] <- value: non-empty, fits */
    OPTS_SET_INT,     /* int <- a count in [min, max] */
    OPTS_SET_INT64,   /* int64_t <- a count in [min, max] */
    OPTS_SET_DURATION,/* int64_t ns <- a duration in [min, max] ns */
    OPTS_SET_FRACTION,/* double <- a number in (0, 1] */
    OPTS_SET_POSITIVE,/* double <- a quantity > 0 ("8e9", "989T") */
} opts_kind;

typedef struct opts_spec {
    const char *name;    /* without the leading "--" */
    const char *metavar; /* "N", "DUR" ...; NULL for a flag without value */
    const char *help;    /* one line; may mention the default */
    /* OPTS_APPLY: apply the option to ctx; value is NULL for flags. 0, or -1 with err. */
    int (*apply)(void *ctx, const char *value, char *err);
    opts_kind kind;
    size_t offset, size; /* the field set in ctx (OPTS_SET_*) */
    int64_t min, max;    /* range of INT, INT64, DURATION */
} opts_spec;

/* Spec builders: T is the group's struct type, F a field of it (nested fields work:
 * wl.users). */
#define OPTS_FIELD_(T, F) offsetof(T, F), sizeof(((T *)0)->F)
#define OPTS_FLAG(NAME, HELP, T, F) {NAME, NULL, HELP, NULL, OPTS_SET_FLAG, OPTS_FIELD_(T, F), 0, 0}
#define OPTS_STRING(NAME, META, HELP, T, F) \
    {NAME, META, HELP, NULL, OPTS_SET_STRING, OPTS_FIELD_(T, F), 0, 0}
#define OPTS_INT(NAME, META, HELP, T, F, MIN, MAX) \
    {NAME, META, HELP, NULL, OPTS_SET_INT, OPTS_FIELD_(T, F), MIN, MAX}
#define OPTS_INT64(NAME, META, HELP, T, F, MIN, MAX) \
    {NAME, META, HELP, NULL, OPTS_SET_INT64, OPTS_FIELD_(T, F), MIN, MAX}
#define OPTS_DURATION(NAME, META, HELP, T, F, MIN, MAX) \
    {NAME, META, HELP, NULL, OPTS_SET_DURATION, OPTS_FIELD_(T, F), MIN, MAX}
#define OPTS_FRACTION(NAME, META, HELP, T, F) \
    {NAME, META, HELP, NULL, OPTS_SET_FRACTION, OPTS_FIELD_(T, F), 0, 0}
#define OPTS_POSITIVE(NAME, META, HELP, T, F) \
    {NAME, META, HELP, NULL, OPTS_SET_POSITIVE, OPTS_FIELD_(T, F), 0, 0}
#define OPTS_FN(NAME, META, HELP, FN) {NAME, META, HELP, FN, OPTS_APPLY, 0, 0, 0, 0}

typedef struct opts_group {
    const char *title;
    const opts_spec *specs;
    int n_specs;
    void *ctx;
} opts_group;

#define OPTS_COUNT(specs) ((int)(sizeof(specs) / sizeof((specs)[0])))

/* Parse argv[0..argc) (argv[0] is the first option, not the program). Positional
 * arguments are collected into positional[] (at most max_positional, count in *n_positional;
 * pass NULL/0 to refuse any). Returns 0, or -1 with err filled ("unknown option --x",
 * "--users needs a value", "--users: 'q' is not a size"). */
int opts_parse(int argc, char **argv, const opts_group *groups, int n_groups, char **positional,
               int max_positional, int *n_positional, char *err);

/* Apply one option by name to its group, as if "--name=value" had been typed (value NULL
 * for a flag). 0, or -1 with err. */
int opts_apply(const opts_group *groups, int n_groups, const char *name, const char *value,
               char *err);

/* The spec of --name in groups (NULL when none), and its group's index in *group. */
const opts_spec *opts_lookup(const opts_group *groups, int n_groups, const char *name,
                             size_t name_len, int *group);

/* Check that every OPTS_SET_* spec's field has the size its kind writes: a table that
 * points a count at a double is caught by the unit tests, not by a user. 0, or -1 with
 * err naming the spec. */
int opts_check(const opts_group *groups, int n_groups, char *err);

/* 1 when argv holds -h or --help. */
int opts_wants_help(int argc, char **argv);

/* A command's help, when argv asks for it: -h or --help print opts_print_help's text,
 * --help-markdown the same usage, description and options as Markdown (docs/reference/cli.md
 * is every command's, from `stallscope help --markdown`). 1 when it printed, 0 when argv
 * asked for no help. */
int opts_show_help(FILE *out, int argc, char **argv, const char *usage, const char *description,
                   const opts_group *groups, int n_groups);

/* The value of "--name" in argv (either form), or NULL; for pre-scans such as --preset. */
const char *opts_find(int argc, char **argv, const char *name);

void opts_print_help(FILE *out, const char *usage, const char *description,
                     const opts_group *groups, int n_groups);
/* The same as Markdown: the usage and description in a text block as --help prints them,
 * then one table of options per group. */
void opts_print_help_markdown(FILE *out, const char *usage, const char *description,
                              const opts_group *groups, int n_groups);

#endif
