/* html_page — the pieces every stallscope page shares (html_page.h): escaping, links,
 * the stylesheet, figures (a chart inlined with its files) and writing the page. */
#include "report/html_page.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/fsio.h"

void html_escape(FILE *out, const char *text)
{
    for (const char *p = text ? text : ""; *p; p++) {
        switch (*p) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        case '\'':
            fputs("&#39;", out);
            break;
        default:
            fputc(*p, out);
        }
    }
}

void html_url(FILE *out, const char *path)
{
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("._~/-", *p))
            fputc(*p, out);
        else
            fprintf(out, "%%%02X", *p);
    }
}

bool html_exists(const char *dir, const char *name)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

void html_rel(const char *root, const char *path, char *out, size_t size)
{
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/')
        n--;
    if (strncmp(path, root, n) == 0 && (path[n] == '/' || path[n] == '\0')) {
        const char *rest = path + n;
        while (*rest == '/')
            rest++;
        snprintf(out, size, "%s", *rest ? rest : ".");
        return;
    }
    snprintf(out, size, "%s", path);
}

static const char STYLE[] =
    "body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:0 auto;max-width:1000px;"
    "padding:16px 24px 48px;color:#222;line-height:1.45}\n"
    "h1{font-size:1.5em;margin:0.4em 0 0.2em}h2{font-size:1.2em;margin-top:1.8em;"
    "border-bottom:1px solid #ddd;padding-bottom:3px}\n"
    ".meta{color:#666;font-size:0.92em;margin:0}\n"
    ".verdict{background:#fbf3ea;border-left:4px solid #d9541a;padding:10px 14px;"
    "font-size:1.02em}\n"
    ".verdict.model{background:#f2f2f2;border-left-color:#404040}\n"
    "pre{background:#f7f7f7;padding:10px;overflow-x:auto;font-size:0.85em;line-height:1.3}\n"
    "table{border-collapse:collapse;font-size:0.9em;margin:8px 0}\n"
    "th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}\n"
    "th{background:#f3f3f3}td.k,th.k{text-align:left}td.p{white-space:nowrap}\n"
    "figure{margin:12px 0}figure svg{max-width:100%;height:auto;display:block}\n"
    "figcaption{font-size:0.85em;color:#555}\n"
    ".note{font-size:0.88em;color:#555}\n"
    "ul.files{columns:2;font-size:0.9em}\n";

void html_begin(FILE *out, const char *title)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>",
          out);
    html_escape(out, title);
    fprintf(out, "</title>\n<style>\n%s</style>\n</head>\n<body>\n", STYLE);
}

void html_end(FILE *out)
{
    fputs("<p class=\"note\">Written by stallscope; rebuild with <code>stallscope report "
          "DIR</code>. Self-contained: no script, no network.</p>\n</body>\n</html>\n",
          out);
}

/* The SVG with its XML declaration dropped and every id prefixed, so the glyphs and clip
 * paths of one chart never resolve to another's in the same document. */
static void inline_svg(FILE *out, const char *svg, const char *prefix)
{
    const char *p = svg;
    if (strncmp(p, "<?xml", 5) == 0) {
        const char *end = strstr(p, "?>");
        if (end)
            p = end + 2;
        while (*p == '\n' || *p == '\r')
            p++;
    }
    static const char *const refs[] = {"id=\"", "href=\"#", "url(#"};
    enum { N_REFS = sizeof refs / sizeof refs[0] };
    /* Each ref's next hit, searched again only once passed (a ref absent from a large SVG
     * would otherwise be searched for to its end at every hit of the others). */
    const char *next[N_REFS];
    for (size_t i = 0; i < N_REFS; i++)
        next[i] = strstr(p, refs[i]);
    while (*p) {
        const char *best = NULL;
        size_t best_len = 0;
        for (size_t i = 0; i < N_REFS; i++) {
            if (next[i] && next[i] < p)
                next[i] = strstr(p, refs[i]);
            const char *hit = next[i];
            if (hit && (!best || hit < best)) {
                best = hit;
                best_len = strlen(refs[i]);
            }
        }
        if (!best) {
            fputs(p, out);
            break;
        }
        fwrite(p, 1, (size_t)(best - p) + best_len, out);
        fprintf(out, "%s-", prefix);
        p = best + best_len;
    }
}

int html_figure(FILE *out, const char *root, const plot_chart *chart, const char *name,
                const char *caption, char *err)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/plots", root);
    if (fsio_mkdirs(dir, err) != 0)
        return -1;
    char *svg = NULL;
    if (plot_render_both(chart, dir, name, &svg, err) != 0)
        return -1;
    fprintf(out, "<figure id=\"fig-%s\">\n", name);
    inline_svg(out, svg, name);
    free(svg);
    fputs("<figcaption>", out);
    if (caption && caption[0]) {
        html_escape(out, caption);
        fputc(' ', out);
    }
    fprintf(out, "(<a href=\"plots/%s.png\">PNG</a>, <a href=\"plots/%s.svg\">SVG</a>)"
                 "</figcaption>\n</figure>\n",
            name, name);
    return 0;
}

int html_finish_document(FILE *out, char **doc, size_t *doc_len, const char *dir, int rc,
                         char *err)
{
    if (fclose(out) != 0 && rc == 0)
        rc = err_set(err, "report: %s", strerror(errno));
    if (rc == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/report.html", dir);
        rc = fsio_write_atomic(path, *doc, *doc_len, err);
    }
    free(*doc);
    *doc = NULL;
    return rc;
}
