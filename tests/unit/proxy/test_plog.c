/* proxy/plog and proxy/window: the proxy's files and the window report reads them over.
 * plog: plog_open makes DIR/<session>/proxy.json (the session its UTC start), a second
 * proxy started in the same second into the same DIR gets "-2" (a third "-3"), rows land in
 * the part of the UTC hour their time is in, a time an hour later opens the next part (its
 * tokens.csv, requests.csv and stalls.csv each with its header), times are rebased to the
 * session's t = 0, rows reach the disk at plog_tick once PLOG_FLUSH_NS passed, and a
 * stalls.csv row's format (culprits "id:prompt;id:prompt;+N"). window: pwin_build over two
 * sessions and two hours written with plog (requests renumbered by send time across the
 * sessions, tokens rebased to the window's start, requests sent before --from left out and
 * their tokens counted orphans, tokens at or after --to dropped, a session wholly outside
 * the window not counted), and pwin_parse_time (UTC forms, durations before now). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <jansson.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/fsio.h"
#include "common/tokenlog.h"
#include "proxy/plog.h"
#include "proxy/window.h"

#define S CLOCK_NS_PER_S
#define MS CLOCK_NS_PER_MS
#define MINUTE (60 * S)
#define HOUR (3600 * S)
/* 2024-03-10T00:00:00Z: well in the past, so "to now" holds every row */
#define DAY0 (1710028800LL * S)
/* The monotonic clock's reading at each session's t = 0: any, unrelated to the wall's. */
#define MONO0 (777 * S)

static void make_tmpdir(char *dir, size_t size)
{
    snprintf(dir, size, "/tmp/test_plog_XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void remove_tmpdir(const char *dir)
{
    char err[ERR_LEN];
    assert_int_equal(fsio_remove_tree(dir, err), 0);
}

/* The file's text (freed by the caller), NULL when it does not exist. */
static char *read_text(const char *dir, const char *name)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *text = calloc(1, 1 << 20);
    assert_non_null(text);
    size_t n = fread(text, 1, (1 << 20) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

static bool exists(const char *dir, const char *name)
{
    char path[1024];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return false;
    return stat(path, &st) == 0;
}

static pobs_config obs_cfg(void)
{
    pobs_config c;
    pobs_config_default(&c);
    return c;
}

/* A session started at wall time t0_wall (Unix ns), its t = 0 at MONO0 on the monotonic
 * clock. */
static void open_session(plog *p, const char *dir, int64_t t0_wall, const pobs_config *obs)
{
    const plog_meta meta = {MONO0, t0_wall, "127.0.0.1:8000", 1.0, obs};
    char err[ERR_LEN] = "";
    if (plog_open(p, dir, &meta, err) != 0)
        fail_msg("plog_open: %s", err);
}

static void close_session(plog *p)
{
    char err[ERR_LEN] = "";
    if (plog_close(p, err) != 0)
        fail_msg("plog_close: %s", err);
}

/* ---- plog ----------------------------------------------------------------------------- */

static void test_open_writes_meta(void **state)
{
    (void)state;
    char dir[64];
    make_tmpdir(dir, sizeof dir);
    const pobs_config obs = obs_cfg();
    plog p;
    open_session(&p, dir, DAY0 + 3 * HOUR + 15 * MINUTE + 7 * S + 123456789, &obs);
    char want[128];
    snprintf(want, sizeof want, "%s/20240310T031507Z", dir);
    assert_string_equal(p.session, want);
    char path[4200];
    snprintf(path, sizeof path, "%s/proxy.json", p.session);
    char err[ERR_LEN];
    json_t *j = fsio_read_json(path, 0, err);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "format")), "stallscope-proxy-1");
    assert_string_equal(json_string_value(json_object_get(j, "session")), "20240310T031507Z");
    assert_true(json_integer_value(json_object_get(j, "t0_unix_ns")) ==
                DAY0 + 3 * HOUR + 15 * MINUTE + 7 * S + 123456789);
    assert_true(json_integer_value(json_object_get(j, "t0_monotonic_ns")) == MONO0);
    assert_string_equal(json_string_value(json_object_get(j, "upstream")), "127.0.0.1:8000");
    assert_true(json_real_value(json_object_get(j, "sample")) == 1.0);
    assert_true(json_is_object(json_object_get(j, "stall_threshold")));
    json_decref(j);
    assert_true(pwin_is_proxy_dir(dir));
    assert_true(pwin_is_proxy_dir(p.session));
    /* no rows yet: no hour's part */
    assert_false(exists(p.session, "2024-03-10T03"));
    close_session(&p);
    assert_false(exists(p.session, "2024-03-10T03"));
    remove_tmpdir(dir);
}

static void test_same_second(void **state)
{
    (void)state;
    char dir[64];
    make_tmpdir(dir, sizeof dir);
    const pobs_config obs = obs_cfg();
    plog a, b, c;
    const int64_t t0 = DAY0 + 3 * HOUR;
    open_session(&a, dir, t0, &obs);
    open_session(&b, dir, t0 + 999 * MS, &obs); /* the same second */
    open_session(&c, dir, t0 + 500 * MS, &obs);
    char want[128];
    snprintf(want, sizeof want, "%s/20240310T030000Z", dir);
    assert_string_equal(a.session, want);
    snprintf(want, sizeof want, "%s/20240310T030000Z-2", dir);
    assert_string_equal(b.session, want);
    snprintf(want, sizeof want, "%s/20240310T030000Z-3", dir);
    assert_string_equal(c.session, want);
    assert_true(exists(b.session, "proxy.json"));
    assert_true(exists(c.session, "proxy.json"));
    char *meta = read_text(b.session, "proxy.json");
    assert_non_null(strstr(meta, "\"20240310T030000Z-2\""));
    free(meta);
    close_session(&a);
    close_session(&b);
    close_session(&c);
    remove_tmpdir(dir);
}

static void test_hourly_parts(void **state)
{
    (void)state;
    char dir[64];
    make_tmpdir(dir, sizeof dir);
    const pobs_config obs = obs_cfg();
    plog p;
    /* t = 0 at 03:40:00; 04:00:00 is t = 20 min */
    open_session(&p, dir, DAY0 + 3 * HOUR + 40 * MINUTE, &obs);
    const int64_t hour_end = MONO0 + 20 * MINUTE;
    tokenlog_event ev = {MONO0 + 5 * S, 0, 3, 1, TOKENLOG_BG};
    assert_int_equal(plog_event(&p, &ev, ev.t_ns), 0);
    assert_string_equal(p.hour, "2024-03-10T03");
    ev.t_ns = hour_end - 1;
    assert_int_equal(plog_event(&p, &ev, ev.t_ns), 0);
    /* stamped in the last ns of 03, handed on in 04: the hour it is written in */
    ev.t_ns = hour_end - 2;
    assert_int_equal(plog_event(&p, &ev, hour_end), 0);
    assert_string_equal(p.hour, "2024-03-10T04");
    tokenlog_request r;
    memset(&r, 0, sizeof r);
    r.request = 0;
    r.user = 3;
    r.kind = TOKENLOG_BG;
    r.t_plan_ns = MONO0 + 4 * S;
    r.t_send_ns = MONO0 + 4 * S + 100;
    r.t_first_ns = MONO0 + 5 * S;
    r.t_end_ns = hour_end + 2 * S;
    r.prompt_tokens_requested = r.prompt_tokens = 40;
    r.completion_tokens = 3;
    snprintf(r.finish_reason, sizeof r.finish_reason, "length");
    assert_int_equal(plog_request(&p, &r, r.t_end_ns), 0);
    close_session(&p);

    char part03[4200], part04[4200];
    snprintf(part03, sizeof part03, "%s/2024-03-10T03", p.session);
    snprintf(part04, sizeof part04, "%s/2024-03-10T04", p.session);
    const char *const files[] = {"tokens.csv", "requests.csv", "stalls.csv"};
    const char *const headers[] = {TOKENLOG_TOKENS_HEADER "\n", TOKENLOG_REQUESTS_HEADER "\n",
                                   PLOG_STALLS_HEADER "\n"};
    for (int f = 0; f < 3; f++) {
        char *a = read_text(part03, files[f]), *b = read_text(part04, files[f]);
        if (!a || !b)
            fail_msg("%s missing in a part", files[f]);
        assert_memory_equal(a, headers[f], strlen(headers[f]));
        assert_memory_equal(b, headers[f], strlen(headers[f]));
        free(a);
        free(b);
    }
    /* times from the session's t = 0 */
    char *t03 = read_text(part03, "tokens.csv");
    assert_string_equal(t03, TOKENLOG_TOKENS_HEADER "\n"
                             "5000000000,3,0,bg,1\n"
                             "1199999999999,3,0,bg,1\n");
    char *t04 = read_text(part04, "tokens.csv");
    assert_string_equal(t04, TOKENLOG_TOKENS_HEADER "\n1199999999998,3,0,bg,1\n");
    char *r03 = read_text(part03, "requests.csv");
    assert_string_equal(r03, TOKENLOG_REQUESTS_HEADER "\n");
    char *r04 = read_text(part04, "requests.csv");
    assert_string_equal(r04, TOKENLOG_REQUESTS_HEADER "\n"
                             "0,3,bg,4000000000,4000000100,5000000000,1202000000000,40,40,3,"
                             "length,\n");
    free(t03);
    free(t04);
    free(r03);
    free(r04);
    remove_tmpdir(dir);
}

/* Rows wait in memory until PLOG_FLUSH_NS passed (a crash loses at most that), then reach
 * the disk whole. */
static void test_tick_flushes(void **state)
{
    (void)state;
    char dir[64];
    make_tmpdir(dir, sizeof dir);
    const pobs_config obs = obs_cfg();
    plog p;
    open_session(&p, dir, DAY0 + 3 * HOUR, &obs);
    const tokenlog_event ev = {MONO0 + S, 4, 0, 2, TOKENLOG_BG};
    assert_int_equal(plog_event(&p, &ev, ev.t_ns), 0);
    char part[4200];
    snprintf(part, sizeof part, "%s/2024-03-10T03", p.session);
    assert_int_equal(plog_tick(&p, MONO0 + S), 0); /* the first tick flushes */
    char *text = read_text(part, "tokens.csv");
    assert_string_equal(text, TOKENLOG_TOKENS_HEADER "\n1000000000,0,4,bg,2\n");
    free(text);
    assert_int_equal(plog_event(&p, &ev, ev.t_ns + 1), 0);
    assert_int_equal(plog_tick(&p, MONO0 + S + PLOG_FLUSH_NS - 1), 0); /* too soon */
    text = read_text(part, "tokens.csv");
    assert_string_equal(text, TOKENLOG_TOKENS_HEADER "\n1000000000,0,4,bg,2\n");
    free(text);
    assert_int_equal(plog_tick(&p, MONO0 + S + PLOG_FLUSH_NS), 0);
    text = read_text(part, "tokens.csv");
    assert_string_equal(text, TOKENLOG_TOKENS_HEADER "\n1000000000,0,4,bg,2\n1000000000,0,4,bg,2\n");
    free(text);
    close_session(&p);
    remove_tmpdir(dir);
}

static void test_stall_rows(void **state)
{
    (void)state;
    char dir[64];
    make_tmpdir(dir, sizeof dir);
    const pobs_config obs = obs_cfg();
    plog p;
    open_session(&p, dir, DAY0 + 3 * HOUR, &obs);
    pobs_stall s;
    memset(&s, 0, sizeof s);
    s.t_ns = MONO0 + 2 * S;
    s.gap_ns = 412345678; /* 412.345678 ms */
    s.request = 17;
    s.user = 5;
    s.cause = POBS_CAUSE_PREFILL;
    s.n_culprits = 5; /* three named, two more */
    s.culprit[0] = 9;
    s.culprit_prompt[0] = 8000;
    s.culprit[1] = 12;
    s.culprit_prompt[1] = 4000;
    s.culprit[2] = 3;
    s.culprit_prompt[2] = -1;
    assert_int_equal(plog_stall(&p, &s, s.t_ns + s.gap_ns), 0);
    s.n_culprits = 1;
    s.request = 18;
    assert_int_equal(plog_stall(&p, &s, s.t_ns + s.gap_ns), 0);
    s.n_culprits = 3; /* exactly the named ones: no "+0" */
    s.request = 19;
    assert_int_equal(plog_stall(&p, &s, s.t_ns + s.gap_ns), 0);
    s.n_culprits = 0;
    s.cause = POBS_CAUSE_UNEXPLAINED;
    s.request = 20;
    s.gap_ns = 1;
    assert_int_equal(plog_stall(&p, &s, s.t_ns + s.gap_ns), 0);
    close_session(&p);
    char part[4200];
    snprintf(part, sizeof part, "%s/2024-03-10T03", p.session);
    char *text = read_text(part, "stalls.csv");
    assert_string_equal(text, PLOG_STALLS_HEADER "\n"
                              "2000000000,5,17,412.345678,prefill,9:8000;12:4000;3:-1;+2\n"
                              "2000000000,5,18,412.345678,prefill,9:8000\n"
                              "2000000000,5,19,412.345678,prefill,9:8000;12:4000;3:-1\n"
                              "2000000000,5,20,0.000001,unexplained,\n");
    free(text);
    remove_tmpdir(dir);
}

/* ---- window ----------------------------------------------------------------------------- */

/* A request of a session: sent at send (ns from the session's t = 0), a token every gap
 * from first on, n of them, ended at the last token + 1 ms. Written as the proxy would:
 * each token at its time, the row at its end. */
static void stream(plog *p, int64_t id, int32_t user, int64_t send, int64_t first, int64_t gap,
                   int n, int32_t prompt)
{
    for (int k = 0; k < n; k++) {
        const tokenlog_event ev = {MONO0 + first + k * gap, id, user, 1, TOKENLOG_BG};
        assert_int_equal(plog_event(p, &ev, ev.t_ns), 0);
    }
    tokenlog_request r;
    memset(&r, 0, sizeof r);
    r.request = id;
    r.user = user;
    r.kind = TOKENLOG_BG;
    r.t_plan_ns = MONO0 + send - 100;
    r.t_send_ns = MONO0 + send;
    r.t_first_ns = MONO0 + first;
    r.t_end_ns = MONO0 + first + (n - 1) * gap + MS;
    r.prompt_tokens_requested = r.prompt_tokens = prompt;
    r.completion_tokens = n;
    snprintf(r.finish_reason, sizeof r.finish_reason, "length");
    assert_int_equal(plog_request(p, &r, r.t_end_ns), 0);
}

static const tokenlog_request *by_prompt(const tokenlog *log, int32_t prompt)
{
    for (int64_t i = 0; i < log->n_requests; i++)
        if (log->requests[i].prompt_tokens == prompt)
            return &log->requests[i];
    fail_msg("no request with prompt %d in the window", prompt);
    return NULL;
}

static int64_t events_of(const tokenlog *log, int64_t request)
{
    int64_t n = 0;
    for (int64_t i = 0; i < log->n_events; i++)
        n += log->events[i].request == request;
    return n;
}

static void test_window_two_sessions(void **state)
{
    (void)state;
    char dir[64], out[128];
    make_tmpdir(dir, sizeof dir);
    snprintf(out, sizeof out, "%s/window", dir);
    const pobs_config obs = obs_cfg();
    /* The window [03:30, 04:30). Each request's prompt names it. */
    const int64_t from = DAY0 + 3 * HOUR + 30 * MINUTE, to = DAY0 + 4 * HOUR + 30 * MINUTE;
    plog a, b, c;
    /* Session a: t = 0 at 03:15. */
    open_session(&a, dir, DAY0 + 3 * HOUR + 15 * MINUTE, &obs);
    const int64_t a_at = 3 * HOUR + 15 * MINUTE; /* ns of the day at a's t = 0 */
    /* 101: sent 03:20, before the window; 10 tokens 03:29:55 .. 03:30:04 (5 in it: carried
     * over, its send -1 as a run's request from before its t = 0) */
    stream(&a, 0, 0, 3 * HOUR + 20 * MINUTE - a_at, 3 * HOUR + 29 * MINUTE + 55 * S - a_at, S, 10,
           101);
    /* 102: sent 03:50, 3 tokens */
    stream(&a, 1, 1, 3 * HOUR + 50 * MINUTE - a_at, 3 * HOUR + 50 * MINUTE + S - a_at, S, 3, 102);
    /* 103: sent 03:59:59, its tokens and row in the hour 04 */
    stream(&a, 2, 1, 3 * HOUR + 59 * MINUTE + 59 * S - a_at, 4 * HOUR + 500 * MS - a_at, 100 * MS,
           4, 103);
    /* 104: sent 04:29:59, tokens 04:29:59.5 and 04:30:00.5 (after the window: dropped) */
    stream(&a, 3, 2, 4 * HOUR + 29 * MINUTE + 59 * S - a_at,
           4 * HOUR + 29 * MINUTE + 59 * S + 500 * MS - a_at, S, 2, 104);
    /* 105: sent 04:30:00, the window's end: left out, its token too (not an orphan) */
    stream(&a, 4, 2, 4 * HOUR + 30 * MINUTE - a_at, 4 * HOUR + 30 * MINUTE + S - a_at, S, 1, 105);
    close_session(&a);
    /* Session b, a second proxy: t = 0 at 03:40, ids from 0 again. */
    open_session(&b, dir, DAY0 + 3 * HOUR + 40 * MINUTE, &obs);
    const int64_t b_at = 3 * HOUR + 40 * MINUTE;
    /* 201: sent 03:45 */
    stream(&b, 0, 0, 3 * HOUR + 45 * MINUTE - b_at, 3 * HOUR + 45 * MINUTE + S - b_at, 20 * MS, 5,
           201);
    /* 202: sent 04:10 */
    stream(&b, 1, 0, 4 * HOUR + 10 * MINUTE - b_at, 4 * HOUR + 10 * MINUTE + S - b_at, 20 * MS, 2,
           202);
    close_session(&b);
    /* Session c: 01:00 to 01:10, wholly before the window. */
    open_session(&c, dir, DAY0 + HOUR, &obs);
    stream(&c, 0, 0, MINUTE, MINUTE + S, S, 3, 301);
    close_session(&c);

    pwin_result res;
    char err[ERR_LEN] = "";
    if (pwin_build(dir, from, to, out, &res, err) != 0)
        fail_msg("pwin_build: %s", err);
    assert_int_equal(res.sessions, 2); /* c does not overlap the window */
    assert_int_equal(res.requests, 6);
    assert_int_equal(res.orphans, 0);
    assert_int_equal(res.cut_rows, 0);
    assert_true(res.from_unix_ns == from && res.to_unix_ns == to);
    assert_int_equal(res.events, 5 + 3 + 4 + 1 + 5 + 2);

    tokenlog log;
    tokenlog_init(&log);
    int64_t cut = 0;
    if (tokenlog_read_dir(&log, out, &cut, err) != 0)
        fail_msg("reading the window: %s", err);
    assert_int_equal(log.n_requests, 6);
    assert_int_equal(log.n_events, res.events);
    /* renumbered by send time across the sessions: the carried-over 101 first (send -1), then
     * 201 (03:45), 102 (03:50), 103 (03:59:59), 202 (04:10), 104 (04:29:59); rows in that
     * order */
    const int32_t order[] = {101, 201, 102, 103, 202, 104};
    for (int i = 0; i < 6; i++) {
        if (log.requests[i].request != i || log.requests[i].prompt_tokens != order[i])
            fail_msg("row %d: request %lld prompt %d, expected request %d prompt %d", i,
                     (long long)log.requests[i].request, log.requests[i].prompt_tokens, i,
                     order[i]);
    }
    /* 101 carried over: sent and first token before the window (-1), its 5 tokens in it */
    const tokenlog_request *r101 = by_prompt(&log, 101);
    assert_true(r101->t_send_ns == -1 && r101->t_plan_ns == -1 && r101->t_first_ns == -1);
    assert_true(r101->t_end_ns == 4 * S + MS);
    assert_int_equal(events_of(&log, r101->request), 5);
    /* rebased to the window's start */
    const tokenlog_request *r201 = by_prompt(&log, 201);
    assert_true(r201->t_send_ns == 15 * MINUTE);
    assert_true(r201->t_plan_ns == 15 * MINUTE - 100);
    assert_true(r201->t_first_ns == 15 * MINUTE + S);
    assert_true(r201->t_end_ns == 15 * MINUTE + S + 4 * 20 * MS + MS);
    assert_int_equal(events_of(&log, r201->request), 5);
    const tokenlog_request *r103 = by_prompt(&log, 103);
    assert_true(r103->t_send_ns == 29 * MINUTE + 59 * S);
    assert_true(r103->t_first_ns == 30 * MINUTE + 500 * MS);
    assert_int_equal(events_of(&log, r103->request), 4);
    /* 104: one token in the window, its end after it (-1: not seen in the window) */
    const tokenlog_request *r104 = by_prompt(&log, 104);
    assert_int_equal(events_of(&log, r104->request), 1);
    assert_true(r104->t_first_ns == 59 * MINUTE + 59 * S + 500 * MS);
    assert_true(r104->t_end_ns == -1);
    assert_int_equal(events_of(&log, by_prompt(&log, 202)->request), 2);
    /* the events in time order, every one in [0, to - from) */
    for (int64_t i = 0; i < log.n_events; i++) {
        assert_true(log.events[i].t_ns >= 0 && log.events[i].t_ns < to - from);
        if (i)
            assert_true(log.events[i].t_ns >= log.events[i - 1].t_ns);
    }
    /* the first token event is the carried-over 101's, at 03:30:00 (the window's t = 0) */
    assert_true(log.events[0].t_ns == 0);
    assert_int_equal(log.events[0].request, 0);
    tokenlog_free(&log);
    char *w = read_text(out, "window.json");
    assert_non_null(w);
    assert_non_null(strstr(w, "\"orphan_events\": 0"));
    free(w);

    /* the default window: from the first session's start (01:00) to now: everything sent */
    char out2[128];
    snprintf(out2, sizeof out2, "%s/all", dir);
    if (pwin_build(dir, 0, 0, out2, &res, err) != 0)
        fail_msg("pwin_build: %s", err);
    assert_true(res.from_unix_ns == DAY0 + HOUR);
    assert_int_equal(res.sessions, 3);
    assert_int_equal(res.requests, 8);
    assert_int_equal(res.orphans, 0);
    /* one session's directory alone */
    if (pwin_build(b.session, 0, 0, out2, &res, err) != 0)
        fail_msg("pwin_build: %s", err);
    assert_int_equal(res.sessions, 1);
    assert_int_equal(res.requests, 2);
    /* an empty window, a directory without sessions */
    assert_int_equal(pwin_build(dir, to, from, out2, &res, err), -1);
    assert_int_equal(pwin_build(out, 0, 0, out2, &res, err), -1);
    assert_false(pwin_is_proxy_dir(out));
    remove_tmpdir(dir);
}

static void test_parse_time(void **state)
{
    (void)state;
    const int64_t now = DAY0 + 5 * HOUR + 7 * S;
    const struct {
        const char *text;
        int64_t want;
    } good[] = {
        {"2024-03-10T03:00", DAY0 + 3 * HOUR},
        {"2024-03-10T03:00:00Z", DAY0 + 3 * HOUR},
        {"2024-03-10T03:04:05Z", DAY0 + 3 * HOUR + 4 * MINUTE + 5 * S},
        {"2024-03-10 03:04", DAY0 + 3 * HOUR + 4 * MINUTE},
        {"2024-03-10T03", DAY0 + 3 * HOUR},
        {"2024-03-10", DAY0},
        {"2024-03-11T00:00", DAY0 + 24 * HOUR},
        {"90m", now - 90 * MINUTE},
        {"2h", now - 2 * HOUR},
        {"0s", now},
        {"@1710039600", DAY0 + 3 * HOUR},
        {"@1710039600.25", DAY0 + 3 * HOUR + 250 * MS},
        {"@1710039600.000000001", DAY0 + 3 * HOUR + 1},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t got = 0;
        char err[ERR_LEN] = "";
        if (pwin_parse_time(good[i].text, now, &got, err) != 0 || got != good[i].want)
            fail_msg("'%s': %lld (%s), expected %lld", good[i].text, (long long)got, err,
                     (long long)good[i].want);
    }
    static const char *const bad[] = {
        "", "yesterday", "2024-13-01", "2024-03-00", "2024-03-10T24:00", "2024-03-10T03:60",
        "2024-03-10T03:00+01:00", "2024-03-10T03:00:00ZZ", "2024-03-10T-1:00",
        "2024-03-10T03:-5", "-5m", "90 minutes", "@", "@x", "@12.5s", "@-5",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t got = 0;
        char err[ERR_LEN] = "";
        if (pwin_parse_time(bad[i], now, &got, err) == 0)
            fail_msg("'%s' accepted: %lld", bad[i], (long long)got);
        assert_true(err[0] != '\0');
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* plog */
        cmocka_unit_test(test_open_writes_meta),
        cmocka_unit_test(test_same_second),
        cmocka_unit_test(test_hourly_parts),
        cmocka_unit_test(test_tick_flushes),
        cmocka_unit_test(test_stall_rows),
        /* window */
        cmocka_unit_test(test_window_two_sessions),
        cmocka_unit_test(test_parse_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
