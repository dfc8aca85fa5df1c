/* plog — the proxy's files (--out DIR): the rows of the streams it observed, in run's format,
 * so `stallscope report` reads them as it reads a run.
 *
 *   DIR/<session>/proxy.json        one per proxy process (session: its UTC start,
 *                                   20261202T031500Z): t = 0 on the wall clock, upstream, threshold
 *   DIR/<session>/<hour>/tokens.csv   the rows of that UTC hour (2026-12-02T03), whole rows:
 *                       requests.csv  written every PLOG_FLUSH_NS and at each hour's end, so a
 *                       stalls.csv    crash loses at most that much; a request's row goes in
 *                                     the hour it ended in (a request that was still streaming
 *                                     when the proxy died has its tokens and no row)
 * Times are ns from the session's t = 0, as in a run; user is the client's connection (one
 * number per connection the proxy accepted); every request is kind bg. No text of a prompt
 * or an answer, no header, no URL is written: lengths and times only. */
#ifndef STALLSCOPE_PROXY_PLOG_H
#define STALLSCOPE_PROXY_PLOG_H
#include <stdbool.h>
#include <stdint.h>

#include "common/tokenlog.h"
#include "proxy/observe.h"

#define PLOG_FLUSH_NS 250000000LL /* 250 ms: what a crash may lose */
#define PLOG_STALLS_HEADER "t_ns,user,request,gap_ms,cause,culprits"

typedef struct plog_meta {
    int64_t t0_mono_ns;  /* the session's t = 0, CLOCK_MONOTONIC */
    int64_t t0_wall_ns;  /* the same instant, Unix ns */
    const char *upstream;/* the label (host:port, no credentials) */
    double sample;       /* the fraction of streams logged */
    const pobs_config *obs;
} plog_meta;

typedef struct plog {
    char session[4096];  /* DIR/<session> */
    char hour[32];       /* the open part's name, "" none */
    int64_t t0_mono_ns, t0_wall_ns;
    tokenlog_writer tokens, requests, stalls;
    int64_t next_flush_ns;
    int64_t rows;
    char error[256];     /* the first failure: the proxy goes on forwarding, and says so */
} plog;

/* Make DIR/<session>/ and its proxy.json. 0, or -1 with err. */
int plog_open(plog *p, const char *dir, const plog_meta *meta, char *err);
/* Rows (times CLOCK_MONOTONIC ns, rebased here). now_mono_ns picks the hour. 0, or -1 once
 * a write failed (p->error says why; later rows are dropped). */
int plog_event(plog *p, const tokenlog_event *ev, int64_t now_mono_ns);
int plog_request(plog *p, const tokenlog_request *r, int64_t now_mono_ns);
int plog_stall(plog *p, const pobs_stall *s, int64_t now_mono_ns);
/* Flush when PLOG_FLUSH_NS passed since the last one. */
int plog_tick(plog *p, int64_t now_mono_ns);
int plog_close(plog *p, char *err);

#endif
