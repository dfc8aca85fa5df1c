/* stream — internal to analysis: the state of the streaming analysis (analysis.h, "the
 * same analysis as a stream"), which three files share, one job each: stream.c feeds it
 * (requests, steps, events: the gaps, the long ones, the injections' waits), stream_summary.c
 * reads the summary off it at the end, and summarize.c drives it over an in-memory log or a
 * run's files. */
#ifndef STALLSCOPE_ANALYSIS_STREAM_H
#define STALLSCOPE_ANALYSIS_STREAM_H
#include <stdbool.h>
#include <stdint.h>

#include "analysis/analysis.h"
#include "analysis/sketch.h"
#include "analysis/timeline.h"
#include "common/tokenlog.h"

/* The digest's rows: the histogram's buckets by 16, 8 per doubling of the gap. */
#define ANALYSIS_DIGEST_SHIFT 4
#define ANALYSIS_DIGEST_ROWS ((SKETCH_BUCKETS >> ANALYSIS_DIGEST_SHIFT) + 1)

/* One background request's running state. */
typedef struct stream_req_state {
    int64_t request;
    int64_t last_t;  /* its latest event */
    int64_t longest; /* its longest gap, ns */
    int32_t user;    /* of its first event */
} stream_req_state;

/* A gap that may be a stall: (t_ns, t_ns + gap_ns) in request's stream. */
typedef struct stream_candidate {
    int64_t t_ns, gap_ns, request;
    int32_t user;
} stream_candidate;

/* An injection's wait [send, end] (end: first token, else its end, else open). */
typedef struct stream_window {
    int64_t send, end;
    int64_t row;  /* in log.requests */
    sketch gaps;  /* the background gaps overlapping it */
} stream_window;

/* Whose gap: a candidate's request and user (of the request's first event). */
typedef struct stream_gap_owner {
    int64_t request;
    int32_t user;
} stream_gap_owner;

struct analysis_stream {
    double duration_s;
    int64_t half_ns;
    double threshold_ms; /* when threshold_known */
    bool threshold_known; /* else 5 x the run's own p50, known at the end */
    double reference_p50_ms;
    int64_t exact_gaps_max, candidates_max;

    tokenlog log;              /* requests, steps, sched events; no token events */
    analysis_idmap row_of;     /* request id -> newest row (ids outside row_dense[]) */
    int64_t *row_dense;        /* (cap_row_dense) request id -> row, -1: the usual ids */
    int64_t cap_row_dense;
    int64_t *window_of;        /* (log.cap_requests) row -> window, -1 */
    int64_t cap_window_of;

    analysis_idmap state_of;   /* request id -> stream_req_state (ids outside dense[]) */
    int64_t *dense;            /* (cap_dense) request id -> stream_req_state, -1: ids are usually
                                * 0, 1, 2 ... (the simulator, a run's requests.csv) */
    int64_t cap_dense;
    stream_req_state *states;
    int64_t n_states, cap_states;

    sketch half[2];            /* gaps that began before / after half_ns */
    standard_acc *std;         /* TTFT, TPOT, ITL, E2E ... of every request (standard.h) */
    int64_t tokens;

    stream_candidate *cand;
    int64_t n_cand, cap_cand;
    double floor_ms;           /* every gap longer than this is a stream_candidate */
    int64_t floor_ns;          /* the same test on integer ns: gap_ms > floor_ms exactly when
                                * gap_ns > floor_ns (ns -> ms is monotone) */

    /* The per-gap charts' digest (opt.gap_digest): occupied cells, and the longest gap. */
    unsigned char *cells;      /* (ANALYSIS_DIGEST_COLUMNS x ANALYSIS_DIGEST_ROWS) */
    double column_per_ns;
    int64_t max_gap_ns, max_gap_t;

    stream_window *win;               /* by send */
    int64_t n_win, cap_win;
    int64_t *max_end;          /* running maximum of win[].end */
    int64_t cap_max_end;
    int64_t max_end_dirty;     /* max_end[j] is stale for j >= this */
    int64_t lower_hint;        /* the last window looked up: events come in time order */

    struct stream_gap_owner *who;     /* (cap_who) a batch's run of equal gaps: whose each one is */
    int64_t cap_who;
};

/* The first window sent at or after t. */
int64_t analysis_stream_windows_lower_bound(const analysis_stream *s, int64_t t);
/* max_end[] brought up to date after windows were added or moved. */
void analysis_stream_refresh_max_end(analysis_stream *s);
/* A whole in-memory log into s (analysis_summarize): its request rows as they are
 * (duplicated ids too: the log is the whole truth already), its steps, every event's tokens
 * and the standard figures, and the background events request by request from tl (the
 * log's timeline, time-ordered). 0, or -1 with err (s is the caller's to free). */
int analysis_stream_add_log(analysis_stream *s, const tokenlog *log,
                            const analysis_timeline *tl, char *err);

#endif
