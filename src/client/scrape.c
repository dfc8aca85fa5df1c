#include "client/scrape.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/fetch.h"
#include "client/prom.h"
#include "common/clock.h"
#include "common/err.h"

static const char *const COLUMN_NAMES[SCRAPE_COLUMNS] = {
    "running", "waiting", "kv_usage", "prompt_tokens", "generation_tokens", "steps"};

const char *scrape_column_name(scrape_column c)
{
    return (unsigned)c < SCRAPE_COLUMNS ? COLUMN_NAMES[c] : "?";
}

bool scrape_column_is_counter(scrape_column c)
{
    return c == SCRAPE_PROMPT_TOKENS || c == SCRAPE_GENERATION_TOKENS || c == SCRAPE_STEPS;
}

/* Each column's names, in order of preference (docs/reference/run.md has the same table). */
typedef struct known_name {
    const char *name;
    scrape_column column;
} known_name;

static const known_name KNOWN[] = {
    {"vllm:num_requests_running", SCRAPE_RUNNING},
    {"sglang:num_running_reqs", SCRAPE_RUNNING},
    {"llamacpp:requests_processing", SCRAPE_RUNNING},
    {"vllm:num_requests_waiting", SCRAPE_WAITING},
    {"sglang:num_queue_reqs", SCRAPE_WAITING},
    {"llamacpp:requests_deferred", SCRAPE_WAITING},
    {"vllm:kv_cache_usage_perc", SCRAPE_KV_USAGE},
    {"vllm:gpu_cache_usage_perc", SCRAPE_KV_USAGE},
    {"sglang:token_usage", SCRAPE_KV_USAGE},
    {"llamacpp:kv_cache_usage_ratio", SCRAPE_KV_USAGE},
    {"vllm:prompt_tokens_total", SCRAPE_PROMPT_TOKENS},
    {"sglang:prompt_tokens_total", SCRAPE_PROMPT_TOKENS},
    {"llamacpp:prompt_tokens_total", SCRAPE_PROMPT_TOKENS},
    {"vllm:generation_tokens_total", SCRAPE_GENERATION_TOKENS},
    {"sglang:generation_tokens_total", SCRAPE_GENERATION_TOKENS},
    {"llamacpp:tokens_predicted_total", SCRAPE_GENERATION_TOKENS},
    {"vllm:iteration_tokens_total_count", SCRAPE_STEPS},
    {"llamacpp:n_decode_total", SCRAPE_STEPS},
    {"stallscope_engine_steps_total", SCRAPE_STEPS},
};

bool scrape_lookup(const char *name, size_t len, scrape_column *column, int *rank)
{
    int seen[SCRAPE_COLUMNS] = {0};
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++) {
        const known_name *k = &KNOWN[i];
        int r = seen[k->column]++;
        if (strlen(k->name) == len && memcmp(k->name, name, len) == 0) {
            *column = k->column;
            *rank = r;
            return true;
        }
    }
    return false;
}

static int on_sample(void *ctx, const prom_sample *s)
{
    scrape_frame *f = ctx;
    scrape_column c;
    int rank;
    if (!scrape_lookup(s->name, s->name_len, &c, &rank) || isnan(s->value))
        return 0;
    if (f->has[c] && rank > f->rank[c])
        return 0; /* a name further down the column's list: the better one is there */
    if (!f->has[c] || rank < f->rank[c]) {
        f->has[c] = true;
        f->rank[c] = rank;
        f->value[c] = s->value;
        return 0;
    }
    /* Another series of the same name: one per model or engine. */
    if (c == SCRAPE_KV_USAGE)
        f->value[c] = fmax(f->value[c], s->value);
    else
        f->value[c] += s->value;
    return 0;
}

int scrape_frame_parse(scrape_frame *f, const char *text, size_t len, char *err)
{
    memset(f, 0, sizeof *f);
    return prom_parse(text, len, on_sample, f, err) == 0 ? 0 : -1;
}

void scrape_row_from(scrape_row *row, const scrape_frame *cur, const scrape_frame *prev,
                     int64_t t_ns, int64_t t_sent_ns)
{
    memset(row, 0, sizeof *row);
    row->t_ns = t_ns;
    row->t_sent_ns = t_sent_ns;
    for (int c = 0; c < SCRAPE_COLUMNS; c++) {
        if (!cur->has[c])
            continue;
        if (!scrape_column_is_counter((scrape_column)c)) {
            row->has[c] = true;
            row->value[c] = cur->value[c];
            continue;
        }
        if (!prev || !prev->has[c] || prev->rank[c] != cur->rank[c])
            continue;
        double delta = cur->value[c] - prev->value[c];
        /* A counter that went down was reset (a restarted server): it counted from 0. */
        row->value[c] = delta >= 0 ? delta : cur->value[c];
        row->has[c] = true;
    }
}

const char *scrape_csv_header(void)
{
    return "t_ns,t_sent_ns,running,waiting,kv_usage,prompt_tokens,generation_tokens,steps\n";
}

size_t scrape_row_format(const scrape_row *row, char *out, size_t size)
{
    size_t at = 0;
    int n = snprintf(out, size, "%lld,%lld", (long long)row->t_ns, (long long)row->t_sent_ns);
    if (n < 0 || (size_t)n >= size)
        return 0;
    at = (size_t)n;
    for (int c = 0; c < SCRAPE_COLUMNS; c++) {
        if (row->has[c] && isfinite(row->value[c]))
            n = snprintf(out + at, size - at, ",%.10g", row->value[c]);
        else
            n = snprintf(out + at, size - at, ",");
        if (n < 0 || (size_t)n >= size - at)
            return 0;
        at += (size_t)n;
    }
    if (at + 2 > size)
        return 0;
    out[at++] = '\n';
    out[at] = '\0';
    return at;
}

/* ---- reading it back ------------------------------------------------------------------ */

void scrape_series_free(scrape_series *s)
{
    free(s->rows);
    memset(s, 0, sizeof *s);
}

static int parse_cell(const char *cell, size_t len, double *out)
{
    char text[64];
    if (len >= sizeof text)
        return -1;
    memcpy(text, cell, len);
    text[len] = '\0';
    char *end = NULL;
    errno = 0;
    *out = strtod(text, &end);
    return end == text + len && len > 0 && isfinite(*out) ? 0 : -1;
}

/* One row: 0, or -1 with why ("8 columns expected" ...). */
static int parse_row(const char *line, scrape_row *row, char *why, size_t size)
{
    memset(row, 0, sizeof *row);
    const char *cell = line;
    for (int col = 0; col < 2 + SCRAPE_COLUMNS; col++) {
        const char *comma = strchr(cell, ',');
        size_t n = comma ? (size_t)(comma - cell) : strlen(cell);
        double v = 0;
        if ((col < 1 + SCRAPE_COLUMNS) != (comma != NULL)) {
            snprintf(why, size, "%d columns expected", 2 + SCRAPE_COLUMNS);
            return -1;
        }
        if (n > 0 && parse_cell(cell, n, &v) != 0) {
            snprintf(why, size, "column %d is not a number", col + 1);
            return -1;
        }
        if (col < 2 && n == 0) {
            snprintf(why, size, "no time");
            return -1;
        }
        if (col == 0)
            row->t_ns = (int64_t)v;
        else if (col == 1)
            row->t_sent_ns = (int64_t)v;
        else if (n > 0) {
            row->has[col - 2] = true;
            row->value[col - 2] = v;
        }
        cell = comma ? comma + 1 : cell + n;
    }
    return 0;
}

int scrape_csv_read(const char *path, scrape_series *out, char *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set(err, "%s: %s", path, strerror(errno));
    char line[1024];
    int line_no = 0;
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        line_no++;
        size_t len = strlen(line);
        bool unterminated = len == 0 || line[len - 1] != '\n';
        if (unterminated && !feof(f)) {
            err_set(err, "%s:%d: line too long", path, line_no);
            goto done;
        }
        if (!unterminated)
            line[--len] = '\0';
        if (line_no == 1) {
            if (strncmp(line, scrape_csv_header(), strlen(scrape_csv_header()) - 1) != 0) {
                err_set(err, "%s:1: not the server_metrics.csv header", path);
                goto done;
            }
            continue;
        }
        if (len == 0)
            continue;
        scrape_row row;
        char why[64];
        if (parse_row(line, &row, why, sizeof why) != 0) {
            /* The writer sends each row whole, but a disk that filled can cut the last one:
             * without its LF it is dropped; anywhere else the file is not ours. */
            if (unterminated) {
                out->cut = true;
                break;
            }
            err_set(err, "%s:%d: %s", path, line_no, why);
            goto done;
        }
        if (out->n == out->cap) {
            int64_t cap = out->cap ? out->cap * 2 : 256;
            scrape_row *rows = realloc(out->rows, (size_t)cap * sizeof *rows);
            if (!rows) {
                err_set(err, "%s: out of memory", path);
                goto done;
            }
            out->rows = rows;
            out->cap = cap;
        }
        out->rows[out->n++] = row;
        for (int c = 0; c < SCRAPE_COLUMNS; c++)
            out->has[c] = out->has[c] || row.has[c];
    }
    if (ferror(f)) {
        err_set(err, "%s: %s", path, strerror(errno));
        goto done;
    }
    if (line_no == 0) {
        err_set(err, "%s: empty", path);
        goto done;
    }
    rc = 0;
done:
    fclose(f);
    return rc;
}

/* ---- the scraper ------------------------------------------------------------------------ */

struct scraper {
    scrape_options opt;
    char url[1024];
    char *key;            /* a copy of the API key, freed at the end */
    int fd;
    pthread_t thread;
    atomic_bool stop;
    _Atomic int64_t t0_ns;    /* 0 until the run's t = 0 is known */
    _Atomic int64_t t_end_ns; /* the run's planned end */
    scrape_stats stats;
};

int scrape_split_url(const char *url, char *origin, size_t origin_size, char *path,
                     size_t path_size)
{
    const char *host = strstr(url, "://");
    if (!host)
        return -1;
    const char *slash = strchr(host + 3, '/');
    size_t origin_len = slash ? (size_t)(slash - url) : strlen(url);
    const char *rest = slash ? slash : "/";
    if (origin_len >= origin_size || strlen(rest) >= path_size)
        return -1;
    memcpy(origin, url, origin_len);
    origin[origin_len] = '\0';
    strcpy(path, rest);
    return 0;
}

/* One GET of so->base_url, a whole URL: fetch_http joins a base and a path, and normalises
 * the base (a trailing "/" or "/v1" goes), so the path is passed apart and kept as is. */
static int get(const transport_options *so, int64_t timeout_ns, int *status, char **body, char *err)
{
    char origin[1024], path[1024];
    if (scrape_split_url(so->base_url, origin, sizeof origin, path, sizeof path) != 0)
        return err_set(err, "'%s' is not a URL this scraper can ask", so->base_url);
    transport_options at = *so;
    at.base_url = origin;
    return fetch_http(&at, "GET", path, NULL, timeout_ns, status, body, err);
}

/* One GET; the body parsed into f. 0, or -1 with err. */
static int scrape_once(const transport_options *so, int64_t timeout_ns, scrape_frame *f, char *err)
{
    int status = 0;
    char *body = NULL;
    if (get(so, timeout_ns, &status, &body, err) != 0)
        return -1;
    int rc = 0;
    if (status != 200)
        rc = err_set(err, "GET %s: HTTP %d", so->base_url, status);
    else if (scrape_frame_parse(f, body, strlen(body), err) != 0) {
        char why[ERR_LEN];
        snprintf(why, sizeof why, "%s", err);
        rc = err_set(err, "GET %s: not the Prometheus text format (%s)", so->base_url, why);
    }
    free(body);
    return rc;
}

int scrape_probe(const transport_options *so, int64_t timeout_ns, char *url_out, size_t size,
                 char *err)
{
    scrape_frame f;
    snprintf(url_out, size, "%s", so->base_url);
    if (scrape_once(so, timeout_ns, &f, err) != 0) {
        /* prometheus_client's ASGI app mounted at /metrics (vLLM before it routed the path
         * itself) answers /metrics with a redirect to /metrics/: follow that one. */
        size_t n = strlen(so->base_url);
        if (!strstr(err, ": HTTP 30") || n == 0 || so->base_url[n - 1] == '/' || n + 2 > size)
            return -1;
        char first[ERR_LEN];
        snprintf(first, sizeof first, "%s", err);
        transport_options slash = *so;
        snprintf(url_out, size, "%s/", so->base_url);
        slash.base_url = url_out;
        if (scrape_once(&slash, timeout_ns, &f, err) != 0) {
            snprintf(url_out, size, "%s", so->base_url);
            return err_set(err, "%s", first);
        }
    }
    for (int c = 0; c < SCRAPE_COLUMNS; c++)
        if (f.has[c])
            return 0;
    return err_set(err, "GET %s: none of the metric names stallscope reads (docs/reference/run.md)",
                   so->base_url);
}

static void note_failure(scraper *s, const char *why)
{
    s->stats.failures++;
    if (!s->stats.first_error[0])
        snprintf(s->stats.first_error, sizeof s->stats.first_error, "%s", why);
}

static void *scrape_thread(void *arg)
{
    scraper *s = arg;
    scrape_frame prev, cur;
    bool have_prev = false;
    int64_t next = clock_now_ns();
    while (!atomic_load(&s->stop)) {
        char err[ERR_LEN] = "";
        int64_t sent = clock_now_ns();
        s->stats.scrapes++;
        int rc = scrape_once(&s->opt.so, s->opt.timeout_ns, &cur, err);
        int64_t done = clock_now_ns();
        if (rc != 0) {
            note_failure(s, err);
        } else {
            int64_t t0 = atomic_load(&s->t0_ns), t_end = atomic_load(&s->t_end_ns);
            if (t0 > 0 && done >= t0 && done <= t_end) {
                scrape_row row;
                char line[512];
                scrape_row_from(&row, &cur, have_prev ? &prev : NULL, done - t0, sent - t0);
                size_t len = scrape_row_format(&row, line, sizeof line);
                /* One write(2) per row: a run that dies keeps whole rows. */
                if (len == 0 || write(s->fd, line, len) != (ssize_t)len) {
                    char why[ERR_LEN];
                    snprintf(why, sizeof why, "cannot write %s: %s", s->opt.csv_path,
                             len == 0 ? "row too long" : strerror(errno));
                    note_failure(s, why);
                    break;
                }
                s->stats.rows++;
            }
            prev = cur;
            have_prev = true;
        }
        /* An absolute schedule; a scrape longer than the period skips the periods it ate. */
        next += s->opt.period_ns;
        int64_t now = clock_now_ns();
        while (next <= now) {
            next += s->opt.period_ns;
            s->stats.late++;
        }
        while (!atomic_load(&s->stop) && clock_now_ns() < next) {
            int64_t slice = clock_now_ns() + 20 * CLOCK_NS_PER_MS;
            clock_sleep_until_ns(slice < next ? slice : next);
        }
    }
    return NULL;
}

scraper *scrape_start(const scrape_options *opt, char *err)
{
    scraper *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(err, "out of memory");
        return NULL;
    }
    s->opt = *opt;
    s->fd = -1;
    if (s->opt.period_ns <= 0)
        s->opt.period_ns = SCRAPE_PERIOD_NS;
    if (s->opt.timeout_ns <= 0) {
        s->opt.timeout_ns = s->opt.period_ns * 4;
        if (s->opt.timeout_ns > CLOCK_NS_PER_S)
            s->opt.timeout_ns = CLOCK_NS_PER_S;
    }
    snprintf(s->url, sizeof s->url, "%s", opt->so.base_url ? opt->so.base_url : "");
    s->opt.so.base_url = s->url;
    if (opt->so.api_key && !(s->key = strdup(opt->so.api_key)))
        goto oom;
    s->opt.so.api_key = s->key;
    atomic_init(&s->stop, false);
    atomic_init(&s->t0_ns, 0);
    atomic_init(&s->t_end_ns, 0);
    s->fd = open(opt->csv_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
    const char *header = scrape_csv_header();
    if (s->fd < 0 || write(s->fd, header, strlen(header)) != (ssize_t)strlen(header)) {
        err_set(err, "cannot write %s: %s", opt->csv_path, strerror(errno));
        goto fail;
    }
    int rc = pthread_create(&s->thread, NULL, scrape_thread, s);
    if (rc != 0) {
        err_set(err, "cannot start the metrics scraper: %s", strerror(rc));
        goto fail;
    }
    return s;
oom:
    err_set(err, "out of memory");
fail:
    if (s->fd >= 0)
        close(s->fd);
    free(s->key);
    free(s);
    return NULL;
}

void scrape_set_window(scraper *s, int64_t t0_ns, int64_t t_end_ns)
{
    if (!s)
        return;
    atomic_store(&s->t_end_ns, t_end_ns); /* first: t0 > 0 is what opens the window */
    atomic_store(&s->t0_ns, t0_ns);
}

void scrape_stop(scraper *s, scrape_stats *out)
{
    if (!s)
        return;
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    close(s->fd);
    if (out)
        *out = s->stats;
    free(s->key);
    free(s);
}
