/* window — see window.h. */
#include "proxy/window.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"
#include "common/tokenlog.h"
#include "common/units.h"

#define HOUR_NS (3600 * CLOCK_NS_PER_S)

static bool has_meta(const char *dir)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/proxy.json", dir);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of dir that are directories, sorted; *n of them (free each, and the list). */
static char **subdirs(const char *dir, int *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char **list = NULL;
    int64_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (buf_grow_items((void **)&list, &cap, *n + 1, sizeof *list) != 0)
            break;
        list[(*n)++] = strdup(path);
    }
    closedir(d);
    if (*n > 1)
        qsort(list, (size_t)*n, sizeof *list, cmp_str);
    return list;
}

static void free_list(char **list, int n)
{
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

bool pwin_is_proxy_dir(const char *dir)
{
    if (has_meta(dir))
        return true;
    int n = 0;
    char **list = subdirs(dir, &n);
    bool any = false;
    for (int i = 0; i < n && !any; i++)
        any = has_meta(list[i]);
    free_list(list, n);
    return any;
}

/* "YYYY-MM-DD[THH[:MM[:SS]]][Z]" as UTC. */
static int parse_utc(const char *text, int64_t *out)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int y, mo, d, h = 0, mi = 0, s = 0, used = 0;
    if (sscanf(text, "%4d-%2d-%2d%n", &y, &mo, &d, &used) != 3)
        return -1;
    const char *rest = text + used;
    if (*rest == 'T' || *rest == ' ') {
        int k = 0;
        if (sscanf(rest + 1, "%2d%n", &h, &k) != 1)
            return -1;
        rest += 1 + k;
        if (*rest == ':' && sscanf(rest + 1, "%2d%n", &mi, &k) == 1) {
            rest += 1 + k;
            if (*rest == ':' && sscanf(rest + 1, "%2d%n", &s, &k) == 1)
                rest += 1 + k;
        }
    }
    if (*rest == 'Z')
        rest++;
    if (*rest || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 ||
        s < 0 || s > 60)
        return -1;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s;
    *out = (int64_t)timegm(&tm) * CLOCK_NS_PER_S;
    return 0;
}

int pwin_parse_time(const char *text, int64_t now_unix_ns, int64_t *out_unix_ns, char *err)
{
    if (parse_utc(text, out_unix_ns) == 0)
        return 0;
    if (text[0] == '@') { /* seconds since the epoch, as date(1) writes them: @1796181834.944 */
        char *end = NULL;
        long long sec = strtoll(text + 1, &end, 10);
        int64_t ns = 0, scale = 100000000;
        if (end != text + 1 && *end == '.')
            for (end++; *end >= '0' && *end <= '9'; end++, scale /= 10)
                ns += (*end - '0') * scale;
        if (end != text + 1 && *end == '\0' && sec > 0 && sec < 1LL << 33) {
            *out_unix_ns = (int64_t)sec * CLOCK_NS_PER_S + ns;
            return 0;
        }
    }
    int64_t ago = 0;
    char why[ERR_LEN];
    if (units_parse_duration_ns(text, &ago, why) == 0 && ago >= 0) {
        *out_unix_ns = now_unix_ns - ago;
        return 0;
    }
    return err_set(err, "'%s': a UTC time (2026-12-02T03:00, 2026-12-02T03:00:00Z), seconds "
                        "since the epoch (@1796181834.5) or a duration before now (90m, 2h)",
                   text);
}

/* One request kept: where it came from, and its row rebased. */
typedef struct kept {
    int session;
    int64_t old_id;
    tokenlog_request row;
} kept;

static int cmp_kept_key(const void *a, const void *b)
{
    const kept *x = a, *y = b;
    if (x->session != y->session)
        return x->session - y->session;
    return (x->old_id > y->old_id) - (x->old_id < y->old_id);
}

static int cmp_kept_send(const void *a, const void *b)
{
    const kept *x = a, *y = b;
    if (x->row.t_send_ns != y->row.t_send_ns)
        return (x->row.t_send_ns > y->row.t_send_ns) - (x->row.t_send_ns < y->row.t_send_ns);
    return cmp_kept_key(a, b);
}

static int cmp_event(const void *a, const void *b)
{
    const tokenlog_event *x = a, *y = b;
    if (x->t_ns != y->t_ns)
        return (x->t_ns > y->t_ns) - (x->t_ns < y->t_ns);
    return (x->request > y->request) - (x->request < y->request);
}

typedef struct session {
    char dir[4200];
    int64_t t0_unix_ns;
    char **parts;
    int n_parts;
} session;

/* The parts of s that may hold rows of requests sent in [from, to): their hour, the one
 * before (long requests end in the next hour) and after. */
static bool part_wanted(const char *part_dir, int64_t from, int64_t to)
{
    const char *name = strrchr(part_dir, '/');
    int64_t start;
    if (!name || parse_utc(name + 1, &start) != 0)
        return false;
    return start + 2 * HOUR_NS > from && start < to + HOUR_NS;
}

/* t on the window's clock; -1 for never, and for before the window's start (a request
 * carried over into the window, as a run's from before its t = 0). */
static int64_t rebase(int64_t t, int64_t t0, int64_t from)
{
    return t < 0 || t0 + t < from ? -1 : t0 + t - from;
}

/* One window being built: the sessions, the requests kept, the log they become. */
typedef struct win {
    session *ss;
    int n_s;
    int64_t from, to;
    kept *keep;
    int64_t n_keep, cap_keep;
    tokenlog log;
    pwin_result *res;
} win;

/* The sessions under dir (or dir itself): their t = 0 and hourly parts. 0, or -1 with err. */
static int read_sessions(win *w, const char *dir, char *err)
{
    int n_dirs = 0, rc = 0;
    char **dirs = NULL;
    if (has_meta(dir)) {
        dirs = malloc(sizeof *dirs);
        if (dirs)
            dirs[n_dirs++] = strdup(dir);
    } else {
        dirs = subdirs(dir, &n_dirs);
    }
    w->ss = calloc((size_t)(n_dirs ? n_dirs : 1), sizeof *w->ss);
    if (!w->ss)
        rc = err_set(err, "out of memory");
    for (int i = 0; rc == 0 && i < n_dirs; i++) {
        if (!has_meta(dirs[i]))
            continue;
        char path[4300];
        snprintf(path, sizeof path, "%s/proxy.json", dirs[i]);
        json_t *j = fsio_read_json(path, 0, err);
        if (!j) {
            rc = -1;
            break;
        }
        session *s = &w->ss[w->n_s++];
        snprintf(s->dir, sizeof s->dir, "%s", dirs[i]);
        s->t0_unix_ns = json_integer_value(json_object_get(j, "t0_unix_ns"));
        json_decref(j);
        s->parts = subdirs(s->dir, &s->n_parts);
    }
    free_list(dirs, n_dirs);
    if (rc == 0 && w->n_s == 0)
        rc = err_set(err, "%s: no proxy session here (a proxy's --out holds <session>/proxy.json)", dir);
    return rc;
}

/* The reader of one file of a part. NULL with err. */
static tokenlog_reader *part_file(const char *part, tokenlog_file kind, char *err)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", part,
             kind == TOKENLOG_TOKENS_CSV ? "tokens.csv" : "requests.csv");
    return tokenlog_reader_open(path, kind, err);
}

/* The requests of session i's part that overlap the window, rebased, into w->keep. 0, or -1
 * with err. */
static int read_requests(win *w, int i, const char *part, char *err)
{
    const session *s = &w->ss[i];
    const int64_t t0 = s->t0_unix_ns, from = w->from, to = w->to;
    tokenlog_reader *r = part_file(part, TOKENLOG_REQUESTS_CSV, err);
    if (!r)
        return -1;
    tokenlog_request q;
    int got;
    while ((got = tokenlog_reader_request(r, &q, err)) == 1) {
        /* In the window: sent before its end, and not ended before its start. */
        const int64_t end = q.t_end_ns >= 0 ? t0 + q.t_end_ns : INT64_MAX;
        if (q.t_send_ns < 0 || t0 + q.t_send_ns >= to || end < from)
            continue;
        if (buf_grow_items((void **)&w->keep, &w->cap_keep, w->n_keep + 1, sizeof *w->keep) != 0) {
            got = err_set(err, "out of memory");
            break;
        }
        kept *kp = &w->keep[w->n_keep++];
        kp->session = i;
        kp->old_id = q.request;
        kp->row = q;
        kp->row.t_plan_ns = rebase(q.t_plan_ns, t0, from);
        kp->row.t_send_ns = rebase(q.t_send_ns, t0, from);
        kp->row.t_first_ns = rebase(q.t_first_ns, t0, from);
        kp->row.t_end_ns = rebase(q.t_end_ns, t0, from);
        if (kp->row.t_first_ns >= to - from)
            kp->row.t_first_ns = -1;
        if (kp->row.t_end_ns >= to - from)
            kp->row.t_end_ns = -1;
    }
    w->res->cut_rows += tokenlog_reader_close(r);
    return got < 0 ? -1 : 0;
}

/* The tokens of session i's part in the window whose request was kept, into w->log. 0, or -1
 * with err. */
static int read_tokens(win *w, int i, const char *part, char *err)
{
    const int64_t t0 = w->ss[i].t0_unix_ns;
    tokenlog_reader *r = part_file(part, TOKENLOG_TOKENS_CSV, err);
    if (!r)
        return -1;
    tokenlog_event ev;
    int got;
    while ((got = tokenlog_reader_event(r, &ev, err)) == 1) {
        const int64_t t = t0 + ev.t_ns;
        if (t < w->from || t >= w->to)
            continue;
        kept key = {.session = i, .old_id = ev.request};
        kept *found = bsearch(&key, w->keep, (size_t)w->n_keep, sizeof *w->keep, cmp_kept_key);
        if (!found) {
            w->res->orphans++;
            continue;
        }
        ev.request = found->row.request;
        ev.t_ns = t - w->from;
        if (tokenlog_add_event(&w->log, &ev) != 0) {
            got = err_set(err, "out of memory");
            break;
        }
    }
    w->res->cut_rows += tokenlog_reader_close(r);
    return got < 0 ? -1 : 0;
}

/* read (read_requests or read_tokens) over every part of every session the window wants. */
static int each_part(win *w, int (*read)(win *, int, const char *, char *), bool count,
                     char *err)
{
    for (int i = 0; i < w->n_s; i++) {
        const session *s = &w->ss[i];
        bool overlaps = false;
        for (int k = 0; k < s->n_parts; k++) {
            if (!part_wanted(s->parts[k], w->from, w->to))
                continue;
            overlaps = true;
            w->res->parts += count;
            if (read(w, i, s->parts[k], err) != 0)
                return -1;
        }
        if (count)
            w->res->sessions += overlaps; /* a session with rows in the window's hours */
    }
    return 0;
}

/* The requests kept, numbered in send order, into w->log; then w->keep by (session, id) for
 * their tokens to find. 0, or -1 with err. */
static int number_requests(win *w, char *err)
{
    if (w->n_keep > 1)
        qsort(w->keep, (size_t)w->n_keep, sizeof *w->keep, cmp_kept_send);
    for (int64_t k = 0; k < w->n_keep; k++) {
        w->keep[k].row.request = k;
        int64_t index;
        if (tokenlog_add_request(&w->log, &w->keep[k].row, &index) != 0)
            return err_set(err, "out of memory");
    }
    if (w->n_keep > 1)
        qsort(w->keep, (size_t)w->n_keep, sizeof *w->keep, cmp_kept_key);
    w->res->requests = w->n_keep;
    return 0;
}

static int write_window(win *w, const char *dir, const char *out_dir, char *err)
{
    if (w->log.n_events > 1)
        qsort(w->log.events, (size_t)w->log.n_events, sizeof *w->log.events, cmp_event);
    const pwin_result *res = w->res;
    w->res->events = w->log.n_events;
    if (tokenlog_write_dir(&w->log, out_dir, err) != 0)
        return -1;
    json_t *j = json_pack("{s:s, s:I, s:I, s:i, s:i, s:I, s:I, s:I, s:I}", "source", dir,
                          "from_unix_ns", (json_int_t)w->from, "to_unix_ns", (json_int_t)w->to,
                          "sessions", res->sessions, "parts", res->parts, "requests",
                          (json_int_t)res->requests, "events", (json_int_t)res->events,
                          "orphan_events", (json_int_t)res->orphans, "cut_rows",
                          (json_int_t)res->cut_rows);
    char path[4200];
    snprintf(path, sizeof path, "%s/window.json", out_dir);
    const int rc = j ? fsio_write_json(path, j, JSON_INDENT(2), err) : err_set(err, "out of memory");
    json_decref(j);
    return rc;
}

int pwin_build(const char *dir, int64_t from, int64_t to, const char *out_dir, pwin_result *res,
               char *err)
{
    memset(res, 0, sizeof *res);
    win w = {.res = res};
    tokenlog_init(&w.log);
    int rc = read_sessions(&w, dir, err);
    if (rc == 0) {
        w.from = from > 0 ? from : w.ss[0].t0_unix_ns;
        w.to = to > 0 ? to : clock_now_ns() + clock_realtime_offset_ns(1, NULL);
        res->from_unix_ns = w.from;
        res->to_unix_ns = w.to;
        if (w.to <= w.from)
            rc = err_set(err, "the window is empty (--to is not after --from)");
    }
    if (rc == 0)
        rc = each_part(&w, read_requests, true, err);
    if (rc == 0)
        rc = number_requests(&w, err);
    if (rc == 0)
        rc = each_part(&w, read_tokens, false, err);
    if (rc == 0)
        rc = write_window(&w, dir, out_dir, err);
    for (int i = 0; i < w.n_s; i++)
        free_list(w.ss[i].parts, w.ss[i].n_parts);
    free(w.ss);
    free(w.keep);
    tokenlog_free(&w.log);
    return rc;
}
