/* observe — the proxy's live analysis: every observed stream's token times in, its gaps, its
 * stalls and their causes out, as they happen. Pure: no I/O and no clock (the caller gives
 * every time, CLOCK_MONOTONIC ns), so the unit tests drive it with made-up streams.
 *
 * The rule is run's without a step log (analysis.h, "causes"; attribution.c), applied live:
 *   gap      the time between two token events of one stream (from its first token on);
 *   stall    a gap longer than the threshold: --stall-threshold's absolute duration, or
 *            stall_factor (5) x the median of the last window_gaps gaps of every stream
 *            (the rolling p50; it applies once min_gaps gaps were seen, no stall before);
 *            the threshold in force when the gap ends is the one it is held to;
 *   window   a request's wait for its first token, [send, first token] (to its end when it
 *            ended without one; open while it waits);
 *   cause    PREFILL when some other request's window overlapped the gap (sent before the
 *            gap's end, first token after its start) and lasted at least the threshold;
 *            else UNEXPLAINED. Its culprits: those requests whose prompt is at least a
 *            quarter of the longest such prompt, the longest first.
 * A stall is decided once every window that may overlap it is known: each request sent
 * before the gap's end with no first token before its start has either had its first token
 * (or ended), or waited at least the threshold. So a stall is reported at most one threshold
 * after its gap ended (pobs_advance), and the decision is the one run's analysis makes on the
 * same rows afterwards.
 *
 * Bounded memory: requests live in a table until they end; an ended request's window is
 * kept only while it lasted at least the threshold and may still overlap a gap (its end is
 * after the oldest last-token time of the streams still open), at most max_windows of them
 * (the oldest dropped first, counted). */
#ifndef STALLSCOPE_PROXY_OBSERVE_H
#define STALLSCOPE_PROXY_OBSERVE_H
#include <stdbool.h>
#include <stdint.h>

#define POBS_MAX_CULPRITS 3 /* as analysis.h's ANALYSIS_MAX_CULPRITS */

typedef struct pobs_config {
    double stall_factor;   /* the threshold is this x the rolling p50 (default 5) */
    int64_t stall_abs_ns;  /* > 0: this absolute threshold instead */
    int window_gaps;       /* gaps the rolling p50 is taken over (default 65536: a burst of
                              stalls across every stream, seconds long, must not carry the
                              median up with it) */
    int min_gaps;          /* gaps seen before a rolling threshold applies (default 32) */
    int64_t max_windows;   /* ended long windows kept for attribution (default 65536) */
} pobs_config;

/* The defaults above. */
void pobs_config_default(pobs_config *cfg);

typedef enum { POBS_CAUSE_PREFILL = 0, POBS_CAUSE_UNEXPLAINED = 1, POBS_N_CAUSES = 2 } pobs_cause;
/* "prefill", "unexplained": run's cause names (analysis_cause_name). */
const char *pobs_cause_name(int cause);

typedef struct pobs_stall {
    int64_t t_ns;         /* the gap's start: the stream's token before it */
    int64_t gap_ns;
    int64_t request;      /* the stalled stream */
    int32_t user;
    int64_t threshold_ns; /* the threshold it was held to */
    int cause;            /* pobs_cause */
    int32_t n_culprits;   /* all of them; the first POBS_MAX_CULPRITS named */
    int64_t culprit[POBS_MAX_CULPRITS];        /* request ids, the longest prompt first */
    int32_t culprit_prompt[POBS_MAX_CULPRITS]; /* their prompt tokens (as known then) */
} pobs_stall;

/* Where the results go (any callback may be NULL). Called from inside pobs_tokens and
 * pobs_advance, never re-entered. */
typedef struct pobs_sink {
    void *ctx;
    /* every gap of every stream, as it ends (the ITL histogram) */
    void (*gap)(void *ctx, int64_t request, int64_t gap_ns);
    /* a stall, once decided */
    void (*stall)(void *ctx, const pobs_stall *s);
    /* request was named a culprit for the first time (the culprit-prompt histogram counts
     * each culprit once); prompt_tokens as known then */
    void (*culprit)(void *ctx, int64_t request, int32_t prompt_tokens);
} pobs_sink;

typedef struct pobs_stats {
    int64_t open;            /* requests started and not ended */
    int64_t windows_kept;    /* ended long windows held for attribution */
    int64_t windows_dropped; /* dropped at max_windows before they could not matter */
    int64_t pending;         /* stalls waiting for their windows */
    int64_t gaps, stalls;    /* all so far */
} pobs_stats;

typedef struct pobs pobs;

/* NULL when out of memory. cfg NULL: the defaults. */
pobs *pobs_new(const pobs_config *cfg, const pobs_sink *sink);
void pobs_free(pobs *o);

/* A request was sent upstream at t_send_ns (request ids unique, ascending is not required).
 * prompt_tokens: as known now (an estimate from the body), -1 unknown. 0, or -1 when out of
 * memory or the id is open already. */
int pobs_request_start(pobs *o, int64_t request, int32_t user, int64_t t_send_ns,
                       int32_t prompt_tokens);
/* The server said the prompt's length (usage.prompt_tokens): it replaces the estimate. */
void pobs_request_prompt(pobs *o, int64_t request, int32_t prompt_tokens);
/* A token event of request at t_ns (n_tokens >= 1: one event, whatever it carried). The
 * first is its first token. Unknown requests are ignored. */
void pobs_tokens(pobs *o, int64_t request, int64_t t_ns, int32_t n_tokens);
/* The request's stream ended at t_end_ns (done, failed or cut). */
void pobs_request_end(pobs *o, int64_t request, int64_t t_end_ns);
/* Time is now_ns: decide the stalls whose windows are all known, drop what can no longer
 * matter. Call it after each batch of events and on a timer (every 100 ms is plenty). */
void pobs_advance(pobs *o, int64_t now_ns);
/* Decide every pending stall with what is known (at shutdown). */
void pobs_flush(pobs *o, int64_t now_ns);

/* The threshold in force now, ns; 0 while the rolling one has too few gaps. */
int64_t pobs_threshold_ns(const pobs *o);
void pobs_get_stats(const pobs *o, pobs_stats *out);

#endif
