/* tokenlog_read — the token-log format read back (tokenlog.h): whole files into a log, a
 * file row by row, a live server's step log inside a run's window. */
#include "common/tokenlog.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"

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
        (r->n_fields > 7 && parse_i64(r, 7, "late_ns", &st->late_ns, err) != 0) ||
        (r->n_fields > 8 && (parse_i32(r, 8, "prefix_queries", &st->prefix_queries, err) != 0 ||
                             parse_i32(r, 9, "prefix_hits", &st->prefix_hits, err) != 0)))
        return -1;
    return 0;
}

static int sched_event_fields(const csv_reader *r, tokenlog_sched_event *ev, char *err)
{
    memset(ev, 0, sizeof *ev);
    if (parse_i64(r, 0, "step", &ev->step, err) != 0 ||
        parse_i64(r, 1, "t_ns", &ev->t_ns, err) != 0 ||
        parse_i64(r, 2, "request", &ev->request, err) != 0)
        return -1;
    for (ev->event = 0; ev->event < TOKENLOG_N_SCHED_EVENTS; ev->event++)
        if (strcmp(r->fields[3], tokenlog_sched_event_name(ev->event)) == 0)
            return 0;
    return err_set(err, "%s:%lld: event is '%s', not preempted, resumed, left_out or rejoined",
                   r->path, (long long)r->line_no, r->fields[3]);
}

/* How a file is read: every row as it is (artifacts), or a live server's step log (rows
 * rebased to the run's t = 0 and kept only inside the run's window). A writer killed
 * mid-row leaves its last row without a newline: with cut_tail_ok that row is dropped and
 * counted, any other malformed row is an error. */
typedef struct read_opts {
    int optional;         /* a missing file is no error */
    int cut_tail_ok;
    int64_t rebase_ns;    /* subtracted from step times */
    int64_t from_ns, to_ns; /* keep rows (a step by its start) in [from, to] (before
                             * rebasing); to < from: all */
    int64_t cut_rows;     /* out: rows dropped as cut */
} read_opts;

static int in_window(int64_t t_ns, const read_opts *o)
{
    return o->to_ns < o->from_ns || (t_ns >= o->from_ns && t_ns <= o->to_ns);
}

/* One file being read row by row: the header checked, every row parsed into its struct.
 * A row cut at the end of the file (a writer killed mid-row) is dropped and counted when
 * cut_tail_ok; any other malformed row is an error. */
struct tokenlog_reader {
    csv_reader csv;   /* csv.path is path below */
    char *path;       /* the reader's own copy: the caller's buffer may be gone by any read */
    tokenlog_file kind;
    int n_fields;
    int cut_tail_ok;
    int64_t cut_rows;
};

typedef union tokenlog_row {
    tokenlog_event ev;
    tokenlog_request req;
    tokenlog_step st;
    tokenlog_sched_event sched;
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
static int reader_open(tokenlog_reader *r, const char *path, tokenlog_file kind, int optional,
                       int cut_tail_ok, char *err)
{
    static const char *const headers[] = {TOKENLOG_TOKENS_HEADER, TOKENLOG_REQUESTS_HEADER,
                                          TOKENLOG_STEPS_HEADER, TOKENLOG_SCHED_EVENTS_HEADER};
    static const int n_fields_of[] = {5, 12, 8, 4};
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
    if (kind == TOKENLOG_STEPS_CSV && strcmp(joined, TOKENLOG_STEPS_HEADER_V1) == 0) {
        r->n_fields = 7; /* written before late_ns */
    } else if (kind == TOKENLOG_STEPS_CSV && strcmp(joined, TOKENLOG_STEPS_HEADER_PREFIX) == 0) {
        r->n_fields = 10; /* an engine with prefix caching */
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
        else if (r->kind == TOKENLOG_STEPS_CSV)
            bad = step_fields(&r->csv, &row->st, err) != 0;
        else if (r->kind == TOKENLOG_SCHED_EVENTS_CSV)
            bad = sched_event_fields(&r->csv, &row->sched, err) != 0;
        else if (r->kind == TOKENLOG_TOKENS_CSV)
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
static int read_path(tokenlog *log, const char *path, tokenlog_file kind, read_opts *o, char *err)
{
    tokenlog_reader r;
    int rc = reader_open(&r, path, kind, o->optional, o->cut_tail_ok, err);
    if (rc <= 0)
        return rc;
    if (kind == TOKENLOG_STEPS_CSV && r.n_fields == 10)
        log->prefix_cache = true;
    tokenlog_row row;
    int got;
    while ((got = reader_next(&r, &row, err)) == 1) {
        int oom = 0;
        if (kind == TOKENLOG_TOKENS_CSV) {
            oom = tokenlog_add_event(log, &row.ev) != 0;
        } else if (kind == TOKENLOG_REQUESTS_CSV) {
            oom = tokenlog_add_request(log, &row.req, NULL) != 0;
        } else if (kind == TOKENLOG_SCHED_EVENTS_CSV) {
            if (in_window(row.sched.t_ns, o)) {
                row.sched.t_ns -= o->rebase_ns;
                oom = tokenlog_add_sched_event(log, &row.sched) != 0;
            }
        } else if (in_window(row.st.t_start_ns, o)) {
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
    const tokenlog_file rows = kind == TOKENLOG_TOKENS_CSV ? kind : TOKENLOG_REQUESTS_CSV;
    if (reader_open(r, path, rows, 0, 1, err) != 1) {
        free(r);
        return NULL;
    }
    return r;
}

/* The next row of a reader opened for kind into out (size bytes of the row's union). */
static int reader_typed(tokenlog_reader *r, tokenlog_file kind, void *out, size_t size, char *err)
{
    tokenlog_row row;
    if (r->kind != kind)
        return err_set(err, "%s: not a %s file", r->csv.path,
                       kind == TOKENLOG_TOKENS_CSV ? "tokens.csv" : "requests.csv");
    int got = reader_next(r, &row, err);
    if (got == 1)
        memcpy(out, &row, size);
    return got;
}

int tokenlog_reader_event(tokenlog_reader *r, tokenlog_event *ev, char *err)
{
    return reader_typed(r, TOKENLOG_TOKENS_CSV, ev, sizeof *ev, err);
}

int tokenlog_reader_request(tokenlog_reader *r, tokenlog_request *req, char *err)
{
    return reader_typed(r, TOKENLOG_REQUESTS_CSV, req, sizeof *req, err);
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

static int read_file(tokenlog *log, const char *dir, const char *name, tokenlog_file kind,
                     read_opts *o, char *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return err_set(err, "%s/%s: path too long", dir, name);
    return read_path(log, path, kind, o, err);
}

/* A run directory's files into log (emptied first, and left empty on failure, so a caller
 * may tokenlog_free it either way): tokens.csv when `tokens`, requests.csv, and steps.csv and
 * sched_events.csv when present. */
static int read_dir(tokenlog *log, const char *dir, bool tokens, int64_t *cut_rows, char *err)
{
    tokenlog_init(log);
    read_opts rows = {.cut_tail_ok = 1, .to_ns = -1};
    read_opts steps = {.optional = 1, .cut_tail_ok = 1, .to_ns = -1};
    if ((tokens && read_file(log, dir, "tokens.csv", TOKENLOG_TOKENS_CSV, &rows, err) < 0) ||
        read_file(log, dir, "requests.csv", TOKENLOG_REQUESTS_CSV, &rows, err) < 0 ||
        read_file(log, dir, "steps.csv", TOKENLOG_STEPS_CSV, &steps, err) < 0 ||
        read_file(log, dir, "sched_events.csv", TOKENLOG_SCHED_EVENTS_CSV, &steps, err) < 0) {
        tokenlog_free(log);
        return -1;
    }
    if (cut_rows)
        *cut_rows = rows.cut_rows + steps.cut_rows;
    return 0;
}

int tokenlog_read_dir_rows(tokenlog *log, const char *dir, int64_t *cut_rows, char *err)
{
    return read_dir(log, dir, false, cut_rows, err);
}

int tokenlog_read_dir(tokenlog *log, const char *dir, int64_t *cut_rows, char *err)
{
    return read_dir(log, dir, true, cut_rows, err);
}

/* A live server's log of kind, inside the window and rebased. */
static int read_window(tokenlog *log, const char *path, tokenlog_file kind, int64_t t0_ns,
                       int64_t t_end_ns, int64_t *cut_rows, char *err)
{
    read_opts o = {.optional = 1, .cut_tail_ok = 1, .rebase_ns = t0_ns, .from_ns = t0_ns,
                   .to_ns = t_end_ns};
    int rc = read_path(log, path, kind, &o, err);
    if (cut_rows)
        *cut_rows = o.cut_rows;
    return rc < 0 ? -1 : 0;
}

int tokenlog_read_steps(tokenlog *log, const char *path, int64_t t0_ns, int64_t t_end_ns,
                        int64_t *cut_rows, char *err)
{
    return read_window(log, path, TOKENLOG_STEPS_CSV, t0_ns, t_end_ns, cut_rows, err);
}

int tokenlog_read_sched_events(tokenlog *log, const char *path, int64_t t0_ns, int64_t t_end_ns,
                               int64_t *cut_rows, char *err)
{
    return read_window(log, path, TOKENLOG_SCHED_EVENTS_CSV, t0_ns, t_end_ns, cut_rows, err);
}
