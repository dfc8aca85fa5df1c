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

#define TOKENS_HEADER "t_ns,user,request,kind,n_tokens"
#define REQUESTS_HEADER                                                                   \
    "request,user,kind,t_plan_ns,t_send_ns,t_first_ns,t_end_ns,prompt_tokens_requested," \
    "prompt_tokens,completion_tokens,finish_reason,error"
#define STEPS_HEADER_V1 "step,t_start_ns,t_end_ns,decode_tokens,prefill_tokens,n_requests,modeled_ns"
#define STEPS_HEADER STEPS_HEADER_V1 ",late_ns"

void tokenlog_init(tokenlog *log)
{
    memset(log, 0, sizeof *log);
}

void tokenlog_free(tokenlog *log)
{
    free(log->events);
    free(log->requests);
    free(log->steps);
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
    return 0;
}

const char *tokenlog_kind_name(int kind)
{
    return kind == TOKENLOG_INJECT ? "inject" : "bg";
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

static size_t format_step(char *out, size_t size, const tokenlog_step *st)
{
    if (size >= 192) { /* 5 x 20 digits and signs, 3 x 11, 7 commas, a newline */
        const int64_t fields[] = {st->step,          st->t_start_ns,     st->t_end_ns,
                                  st->decode_tokens, st->prefill_tokens, st->n_requests,
                                  st->modeled_ns,    st->late_ns};
        char *p = out;
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
            if (i > 0)
                *p++ = ',';
            p = put_i64(p, fields[i]);
        }
        *p++ = '\n';
        *p = '\0';
        return (size_t)(p - out);
    }
    return row_length(snprintf(out, size, "%lld,%lld,%lld,%d,%d,%d,%lld,%lld\n",
                               (long long)st->step, (long long)st->t_start_ns,
                               (long long)st->t_end_ns, st->decode_tokens, st->prefill_tokens,
                               st->n_requests, (long long)st->modeled_ns, (long long)st->late_ns),
                      size);
}

/* ---- writing with stdio ------------------------------------------------------------ */

void tokenlog_write_events_header(FILE *f)
{
    fputs(TOKENS_HEADER "\n", f);
}

void tokenlog_write_event(FILE *f, const tokenlog_event *ev)
{
    char row[ROW_MAX];
    fwrite(row, 1, format_event(row, sizeof row, ev), f);
}

void tokenlog_write_requests_header(FILE *f)
{
    fputs(REQUESTS_HEADER "\n", f);
}

void tokenlog_write_request(FILE *f, const tokenlog_request *r)
{
    char row[ROW_MAX];
    fwrite(row, 1, format_request(row, sizeof row, r), f);
}

void tokenlog_write_steps_header(FILE *f)
{
    fputs(STEPS_HEADER "\n", f);
}

void tokenlog_write_step(FILE *f, const tokenlog_step *st)
{
    char row[ROW_MAX];
    fwrite(row, 1, format_step(row, sizeof row, st), f);
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

int tokenlog_writer_open(tokenlog_writer *w, const char *path, tokenlog_file kind, char *err)
{
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->kind = kind;
    const char *base = strrchr(path, '/');
    snprintf(w->name, sizeof w->name, "%s", base ? base + 1 : path);
    if ((w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        return err_set(err, "cannot create %s: %s", path, strerror(errno));
    w->open = true;
    w->write_at = pwrite;
    const char *header = kind == TOKENLOG_REQUESTS_CSV ? REQUESTS_HEADER "\n" : TOKENS_HEADER "\n";
    /* The header at once: a run killed before its first flush leaves a valid empty file. */
    if (writer_add(w, header, strlen(header), err) != 0 || tokenlog_writer_flush(w, err) != 0) {
        close(w->fd);
        buf_free(&w->pending);
        w->open = false;
        return -1;
    }
    return 0;
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

typedef enum { FILE_TOKENS, FILE_REQUESTS, FILE_STEPS } file_kind;

/* Written beside and renamed over, so a reader (or a run killed meanwhile) never finds a
 * file cut by this rewrite: the incremental copy a live run kept stays until the whole one
 * replaces it. */
static int write_file(const tokenlog *log, const char *dir, const char *name, file_kind kind,
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
    case FILE_TOKENS:
        tokenlog_write_events_header(f);
        for (int64_t i = 0; i < log->n_events; i++)
            tokenlog_write_event(f, &log->events[i]);
        break;
    case FILE_REQUESTS:
        tokenlog_write_requests_header(f);
        for (int64_t i = 0; i < log->n_requests; i++)
            tokenlog_write_request(f, &log->requests[i]);
        break;
    case FILE_STEPS:
        tokenlog_write_steps_header(f);
        for (int64_t i = 0; i < log->n_steps; i++)
            tokenlog_write_step(f, &log->steps[i]);
        break;
    }
    return fsio_commit(&out, err);
}

int tokenlog_write_dir(const tokenlog *log, const char *dir, char *err)
{
    if (fsio_mkdirs(dir, err) != 0)
        return -1;
    if (write_file(log, dir, "tokens.csv", FILE_TOKENS, err) != 0)
        return -1;
    return tokenlog_write_dir_rows(log, dir, err);
}

int tokenlog_write_steps(const tokenlog *log, const char *dir, char *err)
{
    if (fsio_mkdirs(dir, err) != 0)
        return -1;
    return log->n_steps > 0 ? write_file(log, dir, "steps.csv", FILE_STEPS, err) : 0;
}

int tokenlog_write_dir_rows(const tokenlog *log, const char *dir, char *err)
{
    if (fsio_mkdirs(dir, err) != 0 ||
        write_file(log, dir, "requests.csv", FILE_REQUESTS, err) != 0)
        return -1;
    if (log->n_steps > 0 && write_file(log, dir, "steps.csv", FILE_STEPS, err) != 0)
        return -1;
    return 0;
}

/* ---- reading --------------------------------------------------------------------- */

#define CSV_MAX_FIELDS 16

/* One CSV record: the raw text (possibly several physical lines when a quoted field holds
 * a newline), and its fields unquoted in place. */
typedef struct csv_reader {
    FILE *f;
    const char *path;
    char *line;       /* getline's buffer */
    size_t line_cap;
    buf rec;          /* the record being assembled */
    int64_t line_no;  /* physical line where the current record starts */
    int64_t next_line;
    char *fields[CSV_MAX_FIELDS];
    int n_fields;
    int unterminated; /* the record ended at end of file without its newline */
} csv_reader;

/* Split r->rec into fields, removing the quoting in place. */
static int split_fields(csv_reader *r, char *err)
{
    char *p = r->rec.data;
    r->n_fields = 0;
    for (;;) {
        if (r->n_fields == CSV_MAX_FIELDS)
            return err_set(err, "%s:%lld: more than %d fields", r->path, (long long)r->line_no,
                           CSV_MAX_FIELDS);
        char *field = p;
        r->fields[r->n_fields++] = field;
        if (*p == '"') {
            char *out = p;
            p++;
            for (;;) {
                if (*p == '\0')
                    return err_set(err, "%s:%lld: unterminated quoted field", r->path,
                                   (long long)r->line_no);
                if (*p == '"') {
                    if (p[1] == '"') {
                        *out++ = '"';
                        p += 2;
                        continue;
                    }
                    p++;
                    break;
                }
                *out++ = *p++;
            }
            if (*p != ',' && *p != '\0')
                return err_set(err, "%s:%lld: text after a closing quote in field %d", r->path,
                               (long long)r->line_no, r->n_fields);
            char next = *p;
            *out = '\0';
            if (next == '\0')
                return 0;
            p++;
        } else {
            while (*p && *p != ',') {
                if (*p == '"')
                    return err_set(err, "%s:%lld: stray quote in field %d", r->path,
                                   (long long)r->line_no, r->n_fields);
                p++;
            }
            if (*p == '\0')
                return 0;
            *p++ = '\0';
        }
    }
}

static int quotes_balanced(const char *s, size_t n)
{
    size_t q = 0;
    for (size_t i = 0; i < n; i++)
        q += s[i] == '"';
    return q % 2 == 0;
}

/* Next non-empty record: 1, 0 at end of file, -1 with err. */
static int csv_next(csv_reader *r, char *err)
{
    for (;;) {
        buf_reset(&r->rec);
        r->line_no = r->next_line;
        int have = 0;
        for (;;) {
            ssize_t n = getline(&r->line, &r->line_cap, r->f);
            if (n < 0) {
                if (ferror(r->f))
                    return err_set(err, "%s: read failed: %s", r->path, strerror(errno));
                if (!have)
                    return 0;
                return err_set(err, "%s:%lld: unterminated quoted field at end of file",
                               r->path, (long long)r->line_no);
            }
            r->next_line++;
            have = 1;
            r->unterminated = r->line[n - 1] != '\n';
            if (buf_append(&r->rec, r->line, (size_t)n) != 0)
                return err_set(err, "%s: out of memory", r->path);
            /* An odd number of quotes so far means a quoted field holds a newline: the
             * record continues on the next physical line. */
            if (quotes_balanced(r->rec.data, r->rec.len))
                break;
        }
        buf *rec = &r->rec;
        while (rec->len > 0 &&
               (rec->data[rec->len - 1] == '\n' || rec->data[rec->len - 1] == '\r'))
            rec->data[--rec->len] = '\0';
        if (rec->len == 0)
            continue; /* blank line: a trailing newline is no row */
        if (split_fields(r, err) != 0)
            return -1;
        return 1;
    }
}

static int parse_i64(const csv_reader *r, int i, const char *name, int64_t *out, char *err)
{
    const char *s = r->fields[i];
    /* The usual field by hand (a long run's files have 10^5-10^8 rows): an optional '-' and
     * 1 to 18 digits, which cannot overflow; anything else goes through strtoll. */
    const char *d = s + (*s == '-');
    uint64_t v18 = 0; /* 19 digits fit in 64 unsigned bits */
    int digits = 0;
    while (digits < 19 && d[digits] >= '0' && d[digits] <= '9') {
        v18 = v18 * 10 + (uint64_t)(d[digits] - '0');
        digits++;
    }
    if (digits >= 1 && digits <= 18 && d[digits] == '\0') {
        *out = *s == '-' ? -(int64_t)v18 : (int64_t)v18;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || *s == ' ')
        return err_set(err, "%s:%lld: %s is '%s', not an integer", r->path,
                       (long long)r->line_no, name, s);
    *out = v;
    return 0;
}

static int parse_i32(const csv_reader *r, int i, const char *name, int32_t *out, char *err)
{
    int64_t v = 0;
    if (parse_i64(r, i, name, &v, err) != 0)
        return -1;
    if (v < INT32_MIN || v > INT32_MAX)
        return err_set(err, "%s:%lld: %s %lld is out of range", r->path, (long long)r->line_no,
                       name, (long long)v);
    *out = (int32_t)v;
    return 0;
}

static int parse_kind(const csv_reader *r, int i, int32_t *out, char *err)
{
    const char *s = r->fields[i];
    if (strcmp(s, "bg") == 0)
        *out = TOKENLOG_BG;
    else if (strcmp(s, "inject") == 0)
        *out = TOKENLOG_INJECT;
    else
        return err_set(err, "%s:%lld: kind is '%s', not bg or inject", r->path,
                       (long long)r->line_no, s);
    return 0;
}

/* Text longer than the in-memory field is cut, not refused: the rest of the row is
 * still good data. */
static void copy_text(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src);
}

static int event_fields(const csv_reader *r, tokenlog_event *ev, char *err)
{
    memset(ev, 0, sizeof *ev);
    if (parse_i64(r, 0, "t_ns", &ev->t_ns, err) != 0 || parse_i32(r, 1, "user", &ev->user, err) != 0 ||
        parse_i64(r, 2, "request", &ev->request, err) != 0 || parse_kind(r, 3, &ev->kind, err) != 0 ||
        parse_i32(r, 4, "n_tokens", &ev->n_tokens, err) != 0)
        return -1;
    return 0;
}

static int request_fields(const csv_reader *r, tokenlog_request *out, char *err)
{
    tokenlog_request q;
    memset(&q, 0, sizeof q);
    if (parse_i64(r, 0, "request", &q.request, err) != 0 ||
        parse_i32(r, 1, "user", &q.user, err) != 0 || parse_kind(r, 2, &q.kind, err) != 0 ||
        parse_i64(r, 3, "t_plan_ns", &q.t_plan_ns, err) != 0 ||
        parse_i64(r, 4, "t_send_ns", &q.t_send_ns, err) != 0 ||
        parse_i64(r, 5, "t_first_ns", &q.t_first_ns, err) != 0 ||
        parse_i64(r, 6, "t_end_ns", &q.t_end_ns, err) != 0 ||
        parse_i32(r, 7, "prompt_tokens_requested", &q.prompt_tokens_requested, err) != 0 ||
        parse_i32(r, 8, "prompt_tokens", &q.prompt_tokens, err) != 0 ||
        parse_i32(r, 9, "completion_tokens", &q.completion_tokens, err) != 0)
        return -1;
    copy_text(q.finish_reason, sizeof q.finish_reason, r->fields[10]);
    copy_text(q.error, sizeof q.error, r->fields[11]);
    *out = q;
    return 0;
}

static int step_fields(const csv_reader *r, tokenlog_step *st, char *err)
{
    memset(st, 0, sizeof *st);
    if (parse_i64(r, 0, "step", &st->step, err) != 0 ||
        parse_i64(r, 1, "t_start_ns", &st->t_start_ns, err) != 0 ||
        parse_i64(r, 2, "t_end_ns", &st->t_end_ns, err) != 0 ||
        parse_i32(r, 3, "decode_tokens", &st->decode_tokens, err) != 0 ||
        parse_i32(r, 4, "prefill_tokens", &st->prefill_tokens, err) != 0 ||
        parse_i32(r, 5, "n_requests", &st->n_requests, err) != 0 ||
        parse_i64(r, 6, "modeled_ns", &st->modeled_ns, err) != 0 ||
        (r->n_fields > 7 && parse_i64(r, 7, "late_ns", &st->late_ns, err) != 0))
        return -1;
    return 0;
}

/* How a file is read: every row as it is (artifacts), or a live server's step log (rows
 * rebased to the run's t = 0 and kept only inside the run's window). A writer killed
 * mid-row leaves its last row without a newline: with cut_tail_ok that row is dropped and
 * counted, any other malformed row is an error. */
typedef struct read_opts {
    int optional;         /* a missing file is no error */
    int cut_tail_ok;
    int64_t rebase_ns;    /* subtracted from step times */
    int64_t from_ns, to_ns; /* keep steps starting in [from, to] (before rebasing); to < from: all */
    int64_t cut_rows;     /* out: rows dropped as cut */
} read_opts;

static int keep_step(const tokenlog_step *st, const read_opts *o)
{
    return o->to_ns < o->from_ns || (st->t_start_ns >= o->from_ns && st->t_start_ns <= o->to_ns);
}

/* One file being read row by row: the header checked, every row parsed into its struct.
 * A row cut at the end of the file (a writer killed mid-row) is dropped and counted when
 * cut_tail_ok; any other malformed row is an error. */
struct tokenlog_reader {
    csv_reader csv;   /* csv.path is path below */
    char *path;       /* the reader's own copy: the caller's buffer may be gone by any read */
    file_kind kind;
    int n_fields;
    int cut_tail_ok;
    int64_t cut_rows;
};

typedef union tokenlog_row {
    tokenlog_event ev;
    tokenlog_request req;
    tokenlog_step st;
} tokenlog_row;

static void reader_close(tokenlog_reader *r)
{
    if (r->csv.f)
        fclose(r->csv.f);
    free(r->path);
    free(r->csv.line);
    buf_free(&r->csv.rec);
    memset(r, 0, sizeof *r);
}

/* 1 open (header read and checked), 0 absent and optional, -1 error (r closed). */
static int reader_open(tokenlog_reader *r, const char *path, file_kind kind, int optional,
                       int cut_tail_ok, char *err)
{
    static const char *const headers[] = {TOKENS_HEADER, REQUESTS_HEADER, STEPS_HEADER};
    static const int n_fields_of[] = {5, 12, 8};
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->n_fields = n_fields_of[kind];
    r->cut_tail_ok = cut_tail_ok;
    if (!(r->path = strdup(path)))
        return err_set(err, "%s: out of memory", path);
    r->csv.path = r->path;
    r->csv.next_line = 1;
    r->csv.f = fopen(path, "r");
    if (!r->csv.f) {
        int e = errno;
        if (!(optional && e == ENOENT))
            err_set(err, "%s: %s", path, strerror(e));
        reader_close(r);
        return optional && e == ENOENT ? 0 : -1;
    }
    setvbuf(r->csv.f, NULL, _IOFBF, 1 << 20);
    int got = csv_next(&r->csv, err);
    if (got == 0)
        err_set(err, "%s: empty file (expected the header '%s')", path, headers[kind]);
    if (got <= 0)
        goto fail;
    /* Compare the header as a joined line: fields are split in place. */
    char joined[256];
    size_t len = 0;
    joined[0] = '\0';
    for (int i = 0; i < r->csv.n_fields && len < sizeof joined; i++)
        len += (size_t)snprintf(joined + len, sizeof joined - len, "%s%s", i ? "," : "",
                                r->csv.fields[i]);
    if (kind == FILE_STEPS && strcmp(joined, STEPS_HEADER_V1) == 0) {
        r->n_fields = 7; /* written before late_ns */
    } else if (strcmp(joined, headers[kind]) != 0) {
        err_set(err, "%s:%lld: header is '%.60s', expected '%s'", path,
                (long long)r->csv.line_no, joined, headers[kind]);
        goto fail;
    }
    return 1;
fail:
    reader_close(r);
    return -1;
}

/* The next row: 1, 0 at the end of the file, -1 with err. */
static int reader_next(tokenlog_reader *r, tokenlog_row *row, char *err)
{
    int got;
    while ((got = csv_next(&r->csv, err)) == 1) {
        int bad = r->csv.n_fields != r->n_fields;
        if (bad)
            err_set(err, "%s:%lld: %d fields, expected %d", r->csv.path,
                    (long long)r->csv.line_no, r->csv.n_fields, r->n_fields);
        else if (r->kind == FILE_STEPS)
            bad = step_fields(&r->csv, &row->st, err) != 0;
        else if (r->kind == FILE_TOKENS)
            bad = event_fields(&r->csv, &row->ev, err) != 0;
        else
            bad = request_fields(&r->csv, &row->req, err) != 0;
        if (!bad)
            return 1;
        if (!(r->cut_tail_ok && r->csv.unterminated))
            return -1;
        r->cut_rows++;
    }
    if (got < 0 && r->cut_tail_ok && r->csv.unterminated) {
        r->cut_rows++; /* a quoted field cut at end of file */
        got = 0;
    }
    return got;
}

/* Every row of a file into log: 1 read, 0 absent and optional, -1 error. */
static int read_path(tokenlog *log, const char *path, file_kind kind, read_opts *o, char *err)
{
    tokenlog_reader r;
    int rc = reader_open(&r, path, kind, o->optional, o->cut_tail_ok, err);
    if (rc <= 0)
        return rc;
    tokenlog_row row;
    int got;
    while ((got = reader_next(&r, &row, err)) == 1) {
        int oom = 0;
        if (kind == FILE_TOKENS) {
            oom = tokenlog_add_event(log, &row.ev) != 0;
        } else if (kind == FILE_REQUESTS) {
            oom = tokenlog_add_request(log, &row.req, NULL) != 0;
        } else if (keep_step(&row.st, o)) {
            row.st.t_start_ns -= o->rebase_ns;
            row.st.t_end_ns -= o->rebase_ns;
            oom = tokenlog_add_step(log, &row.st) != 0;
        }
        if (oom) {
            err_set(err, "%s: out of memory", path);
            got = -1;
            break;
        }
    }
    o->cut_rows += r.cut_rows;
    reader_close(&r);
    return got < 0 ? -1 : 1;
}

tokenlog_reader *tokenlog_reader_open(const char *path, tokenlog_file kind, char *err)
{
    tokenlog_reader *r = malloc(sizeof *r);
    if (!r) {
        err_set(err, "%s: out of memory", path);
        return NULL;
    }
    if (reader_open(r, path, kind == TOKENLOG_TOKENS_CSV ? FILE_TOKENS : FILE_REQUESTS, 0, 1,
                    err) != 1) {
        free(r);
        return NULL;
    }
    return r;
}

/* The next row of a reader opened for kind into out (size bytes of the row's union). */
static int reader_typed(tokenlog_reader *r, file_kind kind, void *out, size_t size, char *err)
{
    tokenlog_row row;
    if (r->kind != kind)
        return err_set(err, "%s: not a %s file", r->csv.path,
                       kind == FILE_TOKENS ? "tokens.csv" : "requests.csv");
    int got = reader_next(r, &row, err);
    if (got == 1)
        memcpy(out, &row, size);
    return got;
}

int tokenlog_reader_event(tokenlog_reader *r, tokenlog_event *ev, char *err)
{
    return reader_typed(r, FILE_TOKENS, ev, sizeof *ev, err);
}

int tokenlog_reader_request(tokenlog_reader *r, tokenlog_request *req, char *err)
{
    return reader_typed(r, FILE_REQUESTS, req, sizeof *req, err);
}

int64_t tokenlog_reader_close(tokenlog_reader *r)
{
    if (!r)
        return 0;
    int64_t cut = r->cut_rows;
    reader_close(r);
    free(r);
    return cut;
}

static int read_file(tokenlog *log, const char *dir, const char *name, file_kind kind,
                     read_opts *o, char *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return err_set(err, "%s/%s: path too long", dir, name);
    return read_path(log, path, kind, o, err);
}

int tokenlog_read_dir_rows(tokenlog *log, const char *dir, int64_t *cut_rows, char *err)
{
    tokenlog_init(log);
    read_opts rows = {.cut_tail_ok = 1, .to_ns = -1};
    read_opts steps = {.optional = 1, .cut_tail_ok = 1, .to_ns = -1};
    if (read_file(log, dir, "requests.csv", FILE_REQUESTS, &rows, err) < 0 ||
        read_file(log, dir, "steps.csv", FILE_STEPS, &steps, err) < 0) {
        tokenlog_free(log);
        return -1;
    }
    if (cut_rows)
        *cut_rows = rows.cut_rows + steps.cut_rows;
    return 0;
}

int tokenlog_read_dir(tokenlog *log, const char *dir, int64_t *cut_rows, char *err)
{
    /* Always start from an empty log, and leave it empty on failure, so a caller may
     * tokenlog_free it either way. */
    tokenlog_init(log);
    read_opts rows = {.cut_tail_ok = 1, .to_ns = -1};
    read_opts steps = {.optional = 1, .cut_tail_ok = 1, .to_ns = -1};
    if (read_file(log, dir, "tokens.csv", FILE_TOKENS, &rows, err) < 0 ||
        read_file(log, dir, "requests.csv", FILE_REQUESTS, &rows, err) < 0 ||
        read_file(log, dir, "steps.csv", FILE_STEPS, &steps, err) < 0) {
        tokenlog_free(log);
        return -1;
    }
    if (cut_rows)
        *cut_rows = rows.cut_rows + steps.cut_rows;
    return 0;
}

int tokenlog_read_steps(tokenlog *log, const char *path, int64_t t0_ns, int64_t t_end_ns,
                        int64_t *cut_rows, char *err)
{
    read_opts o = {.optional = 1, .cut_tail_ok = 1, .rebase_ns = t0_ns, .from_ns = t0_ns,
                   .to_ns = t_end_ns};
    int rc = read_path(log, path, FILE_STEPS, &o, err);
    if (cut_rows)
        *cut_rows = o.cut_rows;
    return rc < 0 ? -1 : 0;
}
