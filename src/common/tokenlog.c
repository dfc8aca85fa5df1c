/* tokenlog — the log in memory, and the format written (tokenlog.h): rows, whole files,
 * the incremental writer of a live run. */
#include "common/tokenlog.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/fsio.h"

/* The event is the one row type that reaches 10^8 rows in an hour-long run at 256 users:
 * its size is the run's memory. */
_Static_assert(sizeof(tokenlog_event) <= 32, "tokenlog_event must stay within 32 bytes");

void tokenlog_init(tokenlog *log)
{
    memset(log, 0, sizeof *log);
}

void tokenlog_free(tokenlog *log)
{
    free(log->events);
    free(log->requests);
    free(log->steps);
    free(log->sched_events);
    tokenlog_init(log);
}

int tokenlog_add_event(tokenlog *log, const tokenlog_event *ev)
{
    if (log->n_events == log->cap_events &&
        buf_grow_items((void **)&log->events, &log->cap_events, log->n_events + 1, sizeof *ev) != 0)
        return -1;
    log->events[log->n_events++] = *ev;
    return 0;
}

int tokenlog_add_request(tokenlog *log, const tokenlog_request *req, int64_t *index)
{
    if (log->n_requests == log->cap_requests &&
        buf_grow_items((void **)&log->requests, &log->cap_requests, log->n_requests + 1,
                       sizeof *req) != 0)
        return -1;
    if (index)
        *index = log->n_requests;
    log->requests[log->n_requests++] = *req;
    return 0;
}

int tokenlog_add_step(tokenlog *log, const tokenlog_step *st)
{
    if (log->n_steps == log->cap_steps &&
        buf_grow_items((void **)&log->steps, &log->cap_steps, log->n_steps + 1, sizeof *st) != 0)
        return -1;
    log->steps[log->n_steps++] = *st;
    if (st->prefix_queries > 0)
        log->prefix_cache = true;
    return 0;
}

int tokenlog_add_sched_event(tokenlog *log, const tokenlog_sched_event *ev)
{
    if (log->n_sched_events == log->cap_sched_events &&
        buf_grow_items((void **)&log->sched_events, &log->cap_sched_events,
                       log->n_sched_events + 1, sizeof *ev) != 0)
        return -1;
    log->sched_events[log->n_sched_events++] = *ev;
    return 0;
}

const char *tokenlog_kind_name(int kind)
{
    return kind == TOKENLOG_INJECT ? "inject" : "bg";
}

const char *tokenlog_sched_event_name(int event)
{
    static const char *const names[TOKENLOG_N_SCHED_EVENTS] = {"preempted", "resumed",
                                                               "left_out", "rejoined"};
    return event >= 0 && event < TOKENLOG_N_SCHED_EVENTS ? names[event] : "?";
}

/* ---- rows ------------------------------------------------------------------------ */

/* One formatter per row kind serves both the stdio writers (tokenlog_write_dir, the
 * engine's step log) and the incremental row writer. ROW_MAX bounds the longest row: a
 * request whose two text fields are quoted with every character doubled is under 600. */
#define ROW_MAX 1024

static size_t row_length(int n, size_t size)
{
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/* Decimal digits of v (printf's %lld) at out; returns the end. */
static char *put_i64(char *out, int64_t v)
{
    return tokenlog_put_i64(out, v);
}

char *tokenlog_put_i64(char *out, int64_t v)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *out++ = '-';
    while (n > 0)
        *out++ = tmp[--n];
    return out;
}

/* By hand, not snprintf: tokens.csv reaches 10^8 rows, and printf's format parsing was
 * most of the time of writing them. The bytes are "%lld,%d,%lld,%s,%d\n". */
static size_t format_event(char *out, size_t size, const tokenlog_event *ev)
{
    if (size < 96) /* 20 + 11 + 20 + 6 + 11 digits and signs, 4 commas, a newline */
        return row_length(snprintf(out, size, "%lld,%d,%lld,%s,%d\n", (long long)ev->t_ns,
                                   ev->user, (long long)ev->request,
                                   tokenlog_kind_name(ev->kind), ev->n_tokens),
                          size);
    char *p = put_i64(out, ev->t_ns);
    *p++ = ',';
    p = put_i64(p, ev->user);
    *p++ = ',';
    p = put_i64(p, ev->request);
    *p++ = ',';
    const char *kind = tokenlog_kind_name(ev->kind);
    size_t len = strlen(kind);
    memcpy(p, kind, len);
    p += len;
    *p++ = ',';
    p = put_i64(p, ev->n_tokens);
    *p++ = '\n';
    *p = '\0';
    return (size_t)(p - out);
}

/* RFC 4180 quoting, only when needed, so ordinary rows stay greppable. text holds at most
 * max bytes (the fixed-size fields may arrive unterminated from a careless writer). */
static size_t put_csv_text(char *out, size_t at, size_t size, const char *text, size_t max)
{
    size_t len = strnlen(text, max);
    bool quote = false;
    for (size_t i = 0; i < len && !quote; i++)
        quote = text[i] == ',' || text[i] == '"' || text[i] == '\r' || text[i] == '\n';
    if (quote && at + 1 < size)
        out[at++] = '"';
    for (size_t i = 0; i < len && at + 2 < size; i++) {
        if (quote && text[i] == '"')
            out[at++] = '"';
        out[at++] = text[i];
    }
    if (quote && at + 1 < size)
        out[at++] = '"';
    return at;
}

static size_t format_request(char *out, size_t size, const tokenlog_request *r)
{
    /* By hand as format_event (an hour has 10^5 requests); the bytes are the snprintf's. */
    size_t at;
    if (size >= 256) { /* 7 x 20 digits and signs, 3 x 11, the kind, 10 commas */
        char *p = put_i64(out, r->request);
        *p++ = ',';
        p = put_i64(p, r->user);
        *p++ = ',';
        const char *kind = tokenlog_kind_name(r->kind);
        size_t len = strlen(kind);
        memcpy(p, kind, len);
        p += len;
        const int64_t fields[] = {r->t_plan_ns, r->t_send_ns, r->t_first_ns, r->t_end_ns,
                                  r->prompt_tokens_requested, r->prompt_tokens,
                                  r->completion_tokens};
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
            *p++ = ',';
            p = put_i64(p, fields[i]);
        }
        *p++ = ',';
        at = (size_t)(p - out);
    } else {
        at = row_length(snprintf(out, size, "%lld,%d,%s,%lld,%lld,%lld,%lld,%d,%d,%d,",
                                 (long long)r->request, r->user, tokenlog_kind_name(r->kind),
                                 (long long)r->t_plan_ns, (long long)r->t_send_ns,
                                 (long long)r->t_first_ns, (long long)r->t_end_ns,
                                 r->prompt_tokens_requested, r->prompt_tokens,
                                 r->completion_tokens),
                        size);
    }
    at = put_csv_text(out, at, size, r->finish_reason, sizeof r->finish_reason);
    out[at++] = ',';
    at = put_csv_text(out, at, size, r->error, sizeof r->error);
    out[at++] = '\n';
    out[at] = '\0';
    return at;
}

static size_t format_step(char *out, size_t size, const tokenlog_step *st, bool prefix)
{
    if (size >= 224) { /* 5 x 20 digits and signs, 5 x 11, 9 commas, a newline */
        const int64_t fields[] = {st->step,          st->t_start_ns,     st->t_end_ns,
                                  st->decode_tokens, st->prefill_tokens, st->n_requests,
                                  st->modeled_ns,    st->late_ns,        st->prefix_queries,
                                  st->prefix_hits};
        const size_t n_fields = sizeof fields / sizeof fields[0] - (prefix ? 0 : 2);
        char *p = out;
        for (size_t i = 0; i < n_fields; i++) {
            if (i > 0)
                *p++ = ',';
            p = put_i64(p, fields[i]);
        }
        *p++ = '\n';
        *p = '\0';
        return (size_t)(p - out);
    }
    if (prefix)
        return row_length(snprintf(out, size, "%lld,%lld,%lld,%d,%d,%d,%lld,%lld,%d,%d\n",
                                   (long long)st->step, (long long)st->t_start_ns,
                                   (long long)st->t_end_ns, st->decode_tokens,
                                   st->prefill_tokens, st->n_requests, (long long)st->modeled_ns,
                                   (long long)st->late_ns, st->prefix_queries, st->prefix_hits),
                          size);
    return row_length(snprintf(out, size, "%lld,%lld,%lld,%d,%d,%d,%lld,%lld\n",
                               (long long)st->step, (long long)st->t_start_ns,
                               (long long)st->t_end_ns, st->decode_tokens, st->prefill_tokens,
                               st->n_requests, (long long)st->modeled_ns, (long long)st->late_ns),
                      size);
}

static size_t format_sched_event(char *out, size_t size, const tokenlog_sched_event *ev)
{
    return row_length(snprintf(out, size, "%lld,%lld,%lld,%s\n", (long long)ev->step,
                               (long long)ev->t_ns, (long long)ev->request,
                               tokenlog_sched_event_name(ev->event)),
                      size);
}

/* ---- writing with stdio ------------------------------------------------------------ */

void tokenlog_write_events_header(FILE *f)
{
    fputs(TOKENLOG_TOKENS_HEADER "\n", f);
}

void tokenlog_write_event(FILE *f, const tokenlog_event *ev)
{
    char row[ROW_MAX];
    fwrite(row, 1, format_event(row, sizeof row, ev), f);
}

void tokenlog_write_requests_header(FILE *f)
{
    fputs(TOKENLOG_REQUESTS_HEADER "\n", f);
}

void tokenlog_write_request(FILE *f, const tokenlog_request *r)
{
    char row[ROW_MAX];
    fwrite(row, 1, format_request(row, sizeof row, r), f);
}

void tokenlog_write_steps_header(FILE *f, bool prefix)
{
    fputs(prefix ? TOKENLOG_STEPS_HEADER_PREFIX "\n" : TOKENLOG_STEPS_HEADER "\n", f);
}

void tokenlog_write_step(FILE *f, const tokenlog_step *st, bool prefix)
{
    char row[ROW_MAX];
    fwrite(row, 1, format_step(row, sizeof row, st, prefix), f);
}

void tokenlog_write_sched_events_header(FILE *f)
{
    fputs(TOKENLOG_SCHED_EVENTS_HEADER "\n", f);
}

void tokenlog_write_sched_event(FILE *f, const tokenlog_sched_event *ev)
{
    char row[ROW_MAX];
    fwrite(row, 1, format_sched_event(row, sizeof row, ev), f);
}

/* ---- the incremental row writer ------------------------------------------------------ */

/* A write(2) interrupted before it wrote anything is tried again, this many times. */
#define WRITE_ATTEMPTS 8

/* The end of the last whole row in rows[0, len). */
static size_t last_row_end(const char *rows, size_t len)
{
    while (len > 0 && rows[len - 1] != '\n')
        len--;
    return len;
}

/* Why a write to a regular file fell short of its length: past `ulimit -f` (EFBIG), else
 * the disk (or a quota) ran out. Finding out by writing again would raise SIGXFSZ. */
static const char *short_write_reason(int64_t file_end)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
        (uint64_t)file_end >= (uint64_t)limit.rlim_cur)
        return strerror(EFBIG);
    return strerror(ENOSPC);
}

static int writer_fail(tokenlog_writer *w, const char *why, char *err)
{
    snprintf(w->error, sizeof w->error, "cannot write %s: %s", w->name, why);
    buf_reset(&w->pending); /* never written now; the caller's log still has them */
    return err_set(err, "%s", w->error);
}

int tokenlog_writer_flush(tokenlog_writer *w, char *err)
{
    if (!w->open)
        return 0;
    if (w->error[0])
        return err_set(err, "%s", w->error);
    const char *rows = w->pending.data;
    const size_t len = w->pending.len;
    for (int attempt = 0; len > 0; attempt++) {
        /* At our own offset: the file's end is always the end of a row we wrote. */
        ssize_t n = w->write_at(w->fd, rows, len, (off_t)w->size);
        if (n < 0 && errno == EINTR && attempt + 1 < WRITE_ATTEMPTS)
            continue;
        if (n < 0)
            return writer_fail(w, strerror(errno), err); /* nothing of it written */
        if ((size_t)n == len)
            break;
        /* Short: the disk (or `ulimit -f`) ran out mid-way, and the file may end inside a
         * row. Cut it back to its last whole row at once and stop: a regular file does not
         * take more after a short write, and trying would raise SIGXFSZ past `ulimit -f`. */
        const int64_t cut_at = (int64_t)n + w->size;
        const size_t kept = last_row_end(rows, (size_t)n);
        if (ftruncate(w->fd, (off_t)(w->size + (int64_t)kept)) != 0)
            return writer_fail(w, strerror(errno), err);
        w->size += (int64_t)kept;
        return writer_fail(w, short_write_reason(cut_at), err);
    }
    w->size += (int64_t)len;
    buf_reset(&w->pending);
    return 0;
}

static int writer_add(tokenlog_writer *w, const char *row, size_t len, char *err)
{
    if (!w->open)
        return err_set(err, "%s is not open", w->name[0] ? w->name : "a token-log file");
    if (w->error[0])
        return err_set(err, "%s", w->error);
    if (buf_append(&w->pending, row, len) != 0)
        return writer_fail(w, "out of memory", err);
    return w->pending.len > TOKENLOG_WRITER_MAX_PENDING ? tokenlog_writer_flush(w, err) : 0;
}

int tokenlog_writer_open_header(tokenlog_writer *w, const char *path, const char *header,
                                char *err)
{
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->kind = -1;
    const char *base = strrchr(path, '/');
    snprintf(w->name, sizeof w->name, "%s", base ? base + 1 : path);
    if ((w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        return err_set(err, "cannot create %s: %s", path, strerror(errno));
    w->open = true;
    w->write_at = pwrite;
    /* The header at once: a run killed before its first flush leaves a valid empty file. */
    if (writer_add(w, header, strlen(header), err) != 0 || writer_add(w, "\n", 1, err) != 0 ||
        tokenlog_writer_flush(w, err) != 0) {
        close(w->fd);
        buf_free(&w->pending);
        w->open = false;
        return -1;
    }
    return 0;
}

int tokenlog_writer_open(tokenlog_writer *w, const char *path, tokenlog_file kind, char *err)
{
    const char *header = kind == TOKENLOG_REQUESTS_CSV ? TOKENLOG_REQUESTS_HEADER
                                                       : TOKENLOG_TOKENS_HEADER;
    if (tokenlog_writer_open_header(w, path, header, err) != 0)
        return -1;
    w->kind = kind;
    return 0;
}

int tokenlog_writer_row(tokenlog_writer *w, const char *row, size_t len, char *err)
{
    if (len == 0 || row[len - 1] != '\n')
        return err_set(err, "%s: a row must end with its newline", w->name);
    return writer_add(w, row, len, err);
}

int tokenlog_writer_event(tokenlog_writer *w, const tokenlog_event *ev, char *err)
{
    char row[ROW_MAX];
    return writer_add(w, row, format_event(row, sizeof row, ev), err);
}

int tokenlog_writer_request(tokenlog_writer *w, const tokenlog_request *r, char *err)
{
    char row[ROW_MAX];
    return writer_add(w, row, format_request(row, sizeof row, r), err);
}

int tokenlog_writer_close(tokenlog_writer *w, char *err)
{
    if (!w->open)
        return 0;
    int rc = tokenlog_writer_flush(w, err);
    if (close(w->fd) != 0 && rc == 0)
        rc = writer_fail(w, strerror(errno), err);
    buf_free(&w->pending);
    w->open = false;
    w->fd = -1;
    return rc;
}

/* Written beside and renamed over, so a reader (or a run killed meanwhile) never finds a
 * file cut by this rewrite: the incremental copy a live run kept stays until the whole one
 * replaces it. */
static int write_file(const tokenlog *log, const char *dir, const char *name, tokenlog_file kind,
                      char *err)
{
    char path[4096];
    fsio_file out;
    if (fsio_join(path, sizeof path, dir, name, err) != 0 || fsio_create(&out, path, err) != 0)
        return -1;
    FILE *f = out.f;
    /* Large buffer: tokens.csv reaches gigabytes in long runs. */
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    switch (kind) {
    case TOKENLOG_TOKENS_CSV:
        tokenlog_write_events_header(f);
        for (int64_t i = 0; i < log->n_events; i++)
            tokenlog_write_event(f, &log->events[i]);
        break;
    case TOKENLOG_REQUESTS_CSV:
        tokenlog_write_requests_header(f);
        for (int64_t i = 0; i < log->n_requests; i++)
            tokenlog_write_request(f, &log->requests[i]);
        break;
    case TOKENLOG_STEPS_CSV:
        tokenlog_write_steps_header(f, log->prefix_cache);
        for (int64_t i = 0; i < log->n_steps; i++)
            tokenlog_write_step(f, &log->steps[i], log->prefix_cache);
        break;
    case TOKENLOG_SCHED_EVENTS_CSV:
        tokenlog_write_sched_events_header(f);
        for (int64_t i = 0; i < log->n_sched_events; i++)
            tokenlog_write_sched_event(f, &log->sched_events[i]);
        break;
    }
    return fsio_commit(&out, err);
}

int tokenlog_write_dir(const tokenlog *log, const char *dir, char *err)
{
    if (fsio_mkdirs(dir, err) != 0)
        return -1;
    if (write_file(log, dir, "tokens.csv", TOKENLOG_TOKENS_CSV, err) != 0)
        return -1;
    return tokenlog_write_dir_rows(log, dir, err);
}

int tokenlog_write_steps(const tokenlog *log, const char *dir, char *err)
{
    if (fsio_mkdirs(dir, err) != 0)
        return -1;
    if (log->n_steps > 0 && write_file(log, dir, "steps.csv", TOKENLOG_STEPS_CSV, err) != 0)
        return -1;
    if (log->n_sched_events > 0 &&
        write_file(log, dir, "sched_events.csv", TOKENLOG_SCHED_EVENTS_CSV, err) != 0)
        return -1;
    return 0;
}

int tokenlog_write_dir_rows(const tokenlog *log, const char *dir, char *err)
{
    if (fsio_mkdirs(dir, err) != 0 ||
        write_file(log, dir, "requests.csv", TOKENLOG_REQUESTS_CSV, err) != 0)
        return -1;
    return tokenlog_write_steps(log, dir, err);
}
