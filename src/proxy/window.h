/* window — a proxy's files (plog.h) over a window of wall-clock time, as one run directory
 * `stallscope report` reads: the rows of every session and hour that overlap [from, to),
 * put on one clock whose t = 0 is `from`. A request is in the window when it overlaps it
 * (sent before `to`, not ended before `from`); its tokens in [from, to) are kept. One sent
 * before `from` is carried over as a run's requests from before its t = 0 are: its send
 * (and a first token before `from`) are -1. Requests are renumbered in send order (sessions
 * restart their ids; the carried-over first), and their tokens with them. */
#ifndef STALLSCOPE_PROXY_WINDOW_H
#define STALLSCOPE_PROXY_WINDOW_H
#include <stdbool.h>
#include <stdint.h>

/* Whether dir is a proxy's --out (sessions with proxy.json in them) or one session. */
bool pwin_is_proxy_dir(const char *dir);

typedef struct pwin_result {
    int sessions;        /* sessions with rows in the window's hours (an hourly part read) */
    int parts;           /* hourly parts read */
    int64_t requests;    /* requests in the window (carried over included) */
    int64_t events;      /* token events kept */
    int64_t orphans;     /* token events of requests without a row (a proxy that died with
                            them streaming): left out */
    int64_t cut_rows;    /* rows cut short at a file's end (a crash): dropped */
    int64_t from_unix_ns, to_unix_ns; /* the window as taken (defaults filled in) */
} pwin_result;

/* The window [from, to) (Unix ns; from <= 0: the first session's start, to <= 0: now) of the
 * proxy files under dir into out_dir (created: tokens.csv, requests.csv and window.json).
 * 0, or -1 with err. */
int pwin_build(const char *dir, int64_t from_unix_ns, int64_t to_unix_ns, const char *out_dir,
               pwin_result *res, char *err);

/* "2026-12-02T03:00", "2026-12-02T03:00:00Z", "2026-12-02" (UTC), "@1796181834.5" (seconds
 * since the epoch, to the ns), or a duration before now ("90m", "2h": then). 0, or -1 with
 * err. */
int pwin_parse_time(const char *text, int64_t now_unix_ns, int64_t *out_unix_ns, char *err);

#endif
