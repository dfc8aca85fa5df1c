/* html_page — the pieces every page shares: the run report (html.c), the sweep report
 * (html_sweep.c) and tune's page (html_tune.c) are built of them; not part of the
 * module's interface. */
#ifndef STALLSCOPE_HTML_PAGE_H
#define STALLSCOPE_HTML_PAGE_H
#include <stdbool.h>
#include <stdio.h>

#include "report/plot.h"

/* Text with &, <, >, " and ' escaped. */
void html_escape(FILE *out, const char *text);
/* A relative URL: every byte outside [A-Za-z0-9._~/-] percent-encoded. */
void html_url(FILE *out, const char *path);
/* True when DIR/name exists (any kind of file). */
bool html_exists(const char *dir, const char *name);
/* path relative to root ("out/sim/baseline" under "out/sim" -> "baseline"). */
void html_rel(const char *root, const char *path, char *out, size_t size);

/* <!doctype html> ... <body> with the report's stylesheet; and its end. */
void html_begin(FILE *out, const char *title);
void html_end(FILE *out);
/* Close out, the open_memstream of *doc, and when rc is 0 (a failed close makes it -1)
 * write the document to DIR/report.html; *doc is freed either way. rc, or -1 with err. */
int html_finish_document(FILE *out, char **doc, size_t *doc_len, const char *dir, int rc,
                         char *err);

/* Render chart to DIR/plots/<name>.{png,svg} and inline the SVG in a <figure> with
 * links to both files; ids inside the SVG get the prefix <name>- so several charts can
 * live in one document. 0, or -1 with err. */
int html_figure(FILE *out, const char *root, const plot_chart *chart, const char *name,
                const char *caption, char *err);

#endif
