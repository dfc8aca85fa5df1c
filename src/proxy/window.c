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

int pwin_build(const char *dir, int64_t from, int64_t to, const char *out_dir, pwin_result *res,
               char *err)
{
    memset(res, 0, sizeof *res);
    int n_dirs = 0;
    char **dirs = NULL;
    if (has_meta(dir)) {
        dirs = malloc(sizeof *dirs);
        if (dirs)
            dirs[n_dirs++] = strdup(dir);
    } else {
        dirs = subdirs(dir, &n_dirs);
    }
    session *ss = calloc((size_t)(n_dirs ? n_dirs : 1), sizeof *ss);
    kept *keep = NULL;
    int64_t n_keep = 0, cap_keep = 0;
    tokenlog log;
    tokenlog_init(&log);
    int rc = -1, n_s = 0;
    if (!ss) {
        err_set(err, "out of memory");
        goto out;
    }
    for (int i = 0; i < n_dirs; i++) {
        if (!has_meta(dirs[i]))
            continue;
        char path[4300];
        snprintf(path, sizeof path, "%s/proxy.json", dirs[i]);
        json_t *j = fsio_read_json(path, 0, err);
        if (!j)
            goto out;
        session *s = &ss[n_s++];
        snprintf(s->dir, sizeof s->dir, "%s", dirs[i]);
        s->t0_unix_ns = json_integer_value(json_object_get(j, "t0_unix_ns"));
        json_decref(j);
        s->parts = subdirs(s->dir, &s->n_parts);
    }
    if (n_s == 0) {
        err_set(err, "%s: no proxy session here (a proxy's --out holds <session>/proxy.json)", dir);
        goto out;
    }
    if (from <= 0)
        from = ss[0].t0_unix_ns;
    if (to <= 0)
        to = clock_now_ns() + clock_realtime_offset_ns(1, NULL);
    if (to <= from) {
        err_set(err, "the window is empty (--to is not after --from)");
        goto out;
    }
    res->from_unix_ns = from;
    res->to_unix_ns = to;
    /* The requests sent in the window. */
    for (int i = 0; i < n_s; i++) {
        session *s = &ss[i];
        bool overlaps = false;
        for (int k = 0; k < s->n_parts; k++) {
            if (!part_wanted(s->parts[k], from, to))
                continue;
            overlaps = true;
            res->parts++;
            char path[4300];
            snprintf(path, sizeof path, "%s/requests.csv", s->parts[k]);
            tokenlog_reader *r = tokenlog_reader_open(path, TOKENLOG_REQUESTS_CSV, err);
            if (!r)
                goto out;
            tokenlog_request q;
            int got;
            while ((got = tokenlog_reader_request(r, &q, err)) == 1) {
                /* In the window: sent before its end, and not ended before its start. */
                const int64_t send = s->t0_unix_ns + q.t_send_ns;
                const int64_t end = q.t_end_ns >= 0 ? s->t0_unix_ns + q.t_end_ns : INT64_MAX;
                if (q.t_send_ns < 0 || send >= to || end < from)
                    continue;
                if (buf_grow_items((void **)&keep, &cap_keep, n_keep + 1, sizeof *keep) != 0) {
                    got = err_set(err, "out of memory");
                    break;
                }
                kept *kp = &keep[n_keep++];
                kp->session = i;
                kp->old_id = q.request;
                kp->row = q;
                kp->row.t_plan_ns = rebase(q.t_plan_ns, s->t0_unix_ns, from);
                kp->row.t_send_ns = rebase(q.t_send_ns, s->t0_unix_ns, from);
                kp->row.t_first_ns = rebase(q.t_first_ns, s->t0_unix_ns, from);
                kp->row.t_end_ns = rebase(q.t_end_ns, s->t0_unix_ns, from);
                if (kp->row.t_first_ns >= to - from)
                    kp->row.t_first_ns = -1;
                if (kp->row.t_end_ns >= to - from)
                    kp->row.t_end_ns = -1;
            }
            res->cut_rows += tokenlog_reader_close(r);
            if (got < 0)
                goto out;
        }
        res->sessions += overlaps; /* a session with rows in the window's hours */
    }
    /* Numbered in send order. */
    if (n_keep > 1)
        qsort(keep, (size_t)n_keep, sizeof *keep, cmp_kept_send);
    for (int64_t k = 0; k < n_keep; k++) {
        keep[k].row.request = k;
        int64_t index;
        if (tokenlog_add_request(&log, &keep[k].row, &index) != 0) {
            err_set(err, "out of memory");
            goto out;
        }
    }
    if (n_keep > 1)
        qsort(keep, (size_t)n_keep, sizeof *keep, cmp_kept_key);
    res->requests = n_keep;
    /* Their tokens, up to the window's end. */
    for (int i = 0; i < n_s; i++) {
        session *s = &ss[i];
        for (int k = 0; k < s->n_parts; k++) {
            if (!part_wanted(s->parts[k], from, to))
                continue;
            char path[4300];
            snprintf(path, sizeof path, "%s/tokens.csv", s->parts[k]);
            tokenlog_reader *r = tokenlog_reader_open(path, TOKENLOG_TOKENS_CSV, err);
            if (!r)
                goto out;
            tokenlog_event ev;
            int got;
            while ((got = tokenlog_reader_event(r, &ev, err)) == 1) {
                const int64_t t = s->t0_unix_ns + ev.t_ns;
                if (t < from || t >= to)
                    continue;
                kept key = {.session = i, .old_id = ev.request};
                kept *found = bsearch(&key, keep, (size_t)n_keep, sizeof *keep, cmp_kept_key);
                if (!found) {
                    res->orphans++;
                    continue;
                }
                ev.request = found->row.request;
                ev.t_ns = t - from;
                if (tokenlog_add_event(&log, &ev) != 0) {
                    got = err_set(err, "out of memory");
                    break;
                }
            }
            res->cut_rows += tokenlog_reader_close(r);
            if (got < 0)
                goto out;
        }
    }
    if (log.n_events > 1)
        qsort(log.events, (size_t)log.n_events, sizeof *log.events, cmp_event);
    res->events = log.n_events;
    if (tokenlog_write_dir(&log, out_dir, err) != 0)
        goto out;
    json_t *w = json_pack("{s:s, s:I, s:I, s:i, s:i, s:I, s:I, s:I, s:I}", "source", dir,
                          "from_unix_ns", (json_int_t)from, "to_unix_ns", (json_int_t)to,
                          "sessions", res->sessions, "parts", res->parts, "requests",
                          (json_int_t)res->requests, "events", (json_int_t)res->events,
                          "orphan_events", (json_int_t)res->orphans, "cut_rows",
                          (json_int_t)res->cut_rows);
    char path[4200];
    snprintf(path, sizeof path, "%s/window.json", out_dir);
    rc = w ? fsio_write_json(path, w, JSON_INDENT(2), err) : err_set(err, "out of memory");
    json_decref(w);
out:
    for (int i = 0; i < n_s; i++)
        free_list(ss[i].parts, ss[i].n_parts);
    free(ss);
    free_list(dirs, n_dirs);
    free(keep);
    tokenlog_free(&log);
    return rc;
}
