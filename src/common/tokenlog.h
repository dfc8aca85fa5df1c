/* tokenlog — the one token-log format shared by sim, run and report (every column:
 * docs/reference/artifacts.md). In memory: growable arrays of events, requests and steps.
 * On disk:
 *
 *   tokens.csv    t_ns,user,request,kind,n_tokens
 *   requests.csv  request,user,kind,t_plan_ns,t_send_ns,t_first_ns,t_end_ns,
 *                 prompt_tokens_requested,prompt_tokens,completion_tokens,finish_reason,error
 *   steps.csv     step,t_start_ns,t_end_ns,decode_tokens,prefill_tokens,n_requests,modeled_ns,
 *                 late_ns[,prefix_queries,prefix_hits]   (files without late_ns, the older
 *                 format, read as late_ns 0; the prefix columns only where the engine ran
 *                 with prefix caching: tokenlog.prefix_cache)
 *   sched_events.csv  step,t_ns,request,event   what a step did to a request's place in the
 *                 steps (event: preempted, resumed, left_out, rejoined; t_ns the step's start),
 *                 beside steps.csv when any step did something (a run without it: none did,
 *                 or the engine did not say)
 *
 * Times are integer ns from the run's t = 0; -1 means "never happened" (no first token).
 * kind is "bg" or "inject"; the injector's user is -1. steps.csv and sched_events.csv exist
 * only where the engine is ours (sim, embedded server).
 *
 * One module, a file per job: tokenlog.c holds the log in memory and writes the format
 * (rows, whole files, the incremental writer); tokenlog_read.c reads it back (whole files,
 * row by row, a live server's step log); tokenlog_merge.c puts logs kept apart (one per
 * client thread) together in time order, and names a live server's sched log as they are. */
#ifndef STALLSCOPE_TOKENLOG_H
#define STALLSCOPE_TOKENLOG_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "common/buf.h"

typedef enum { TOKENLOG_BG = 0, TOKENLOG_INJECT = 1 } tokenlog_kind;

/* The files, and the header line each opens with. */
typedef enum {
    TOKENLOG_TOKENS_CSV = 0,
    TOKENLOG_REQUESTS_CSV = 1,
    TOKENLOG_STEPS_CSV = 2,
    TOKENLOG_SCHED_EVENTS_CSV = 3
} tokenlog_file;
#define TOKENLOG_TOKENS_HEADER "t_ns,user,request,kind,n_tokens"
#define TOKENLOG_REQUESTS_HEADER                                                          \
    "request,user,kind,t_plan_ns,t_send_ns,t_first_ns,t_end_ns,prompt_tokens_requested," \
    "prompt_tokens,completion_tokens,finish_reason,error"
#define TOKENLOG_STEPS_HEADER_V1                                                          \
    "step,t_start_ns,t_end_ns,decode_tokens,prefill_tokens,n_requests,modeled_ns"
#define TOKENLOG_STEPS_HEADER TOKENLOG_STEPS_HEADER_V1 ",late_ns"
#define TOKENLOG_STEPS_HEADER_PREFIX TOKENLOG_STEPS_HEADER ",prefix_queries,prefix_hits"
#define TOKENLOG_SCHED_EVENTS_HEADER "step,t_ns,request,event"

typedef struct tokenlog_event {
    int64_t t_ns;
    int64_t request;
    int32_t user;
    int32_t n_tokens;
    int32_t kind; /* tokenlog_kind */
} tokenlog_event;

typedef struct tokenlog_request {
    int64_t request;
    int32_t user;
    int32_t kind;
    int64_t t_plan_ns;
    int64_t t_send_ns;
    int64_t t_first_ns;
    int64_t t_end_ns;
    int32_t prompt_tokens_requested;
    int32_t prompt_tokens;     /* as the server reported (usage), else as sent */
    int32_t completion_tokens; /* as the server reported (usage), else as counted */
    char finish_reason[16];    /* "length", "stop", "abort", "" */
    char error[128];           /* "" when fine */
    int64_t sent_id;           /* in memory only, no column: the id a live client's request
                                  gave the server (the incremental files' id; the merge
                                  renumbers `request`, not this), by which the embedded
                                  server's sched log names it */
} tokenlog_request;

typedef struct tokenlog_step {
    int64_t step;
    int64_t t_start_ns;
    int64_t t_end_ns;
    int32_t decode_tokens;
    int32_t prefill_tokens;
    int32_t n_requests;
    int64_t modeled_ns; /* the cost model's duration for this batch (0 if unknown) */
    int64_t late_ns;    /* how late the engine woke past the step's deadline (emulated
                           steps; 0 otherwise): the machine's delay, as the engine saw it */
    int32_t prefix_queries; /* prompt tokens of the requests first admitted in this step */
    int32_t prefix_hits;    /* of them, found in the prefix cache (prefill skipped) */
} tokenlog_step;

/* What a step did to a request's place in the steps (the scheduler's changes, sched.h). */
typedef enum {
    TOKENLOG_PREEMPTED = 0, /* lost its KV: out of the steps until resumed */
    TOKENLOG_RESUMED = 1,   /* re-admitted after a preemption: recomputes its KV from here */
    TOKENLOG_LEFT_OUT = 2,  /* has a token, live, not preempted, yet not in this step (nor
                               the next ones until rejoined) */
    TOKENLOG_REJOINED = 3,  /* in this step again after being left out */
    TOKENLOG_N_SCHED_EVENTS = 4
} tokenlog_sched_kind;

typedef struct tokenlog_sched_event {
    int64_t step;    /* steps.csv's step */
    int64_t t_ns;    /* that step's start */
    int64_t request;
    int32_t event;   /* tokenlog_sched_kind */
} tokenlog_sched_event;

typedef struct tokenlog {
    tokenlog_event *events;
    int64_t n_events, cap_events;
    tokenlog_request *requests;
    int64_t n_requests, cap_requests;
    tokenlog_step *steps;
    int64_t n_steps, cap_steps;
    bool prefix_cache; /* the steps carry prefix_queries/prefix_hits (steps.csv's columns) */
    tokenlog_sched_event *sched_events; /* in step order */
    int64_t n_sched_events, cap_sched_events;
} tokenlog;

void tokenlog_init(tokenlog *log);
void tokenlog_free(tokenlog *log);
/* Appends; -1 only on out-of-memory. add_request returns the new row's index via *index. */
int tokenlog_add_event(tokenlog *log, const tokenlog_event *ev);
int tokenlog_add_request(tokenlog *log, const tokenlog_request *req, int64_t *index);
int tokenlog_add_step(tokenlog *log, const tokenlog_step *st);
int tokenlog_add_sched_event(tokenlog *log, const tokenlog_sched_event *ev);

const char *tokenlog_kind_name(int kind);
/* "preempted", "resumed", "left_out", "rejoined"; "?" otherwise. */
const char *tokenlog_sched_event_name(int event);

/* Where a producer hands its rows as they come, instead of into a tokenlog (a run too long to
 * hold: the analysis streams them). request() is called when a request is sent and again
 * whenever its row changes (first token, end), always with the whole row; each returns 0, or
 * -1 with err to stop the producer. events(), when not NULL, takes several events at once
 * (evs[0..n), in order: the same as event() on each; the simulator hands a step's events,
 * all at one instant, in one call), else the producer calls event() on each. sched_event(),
 * when not NULL, takes what a step did to requests' places, after that step; NULL: they are
 * not wanted. */
typedef struct tokenlog_sink {
    int (*event)(void *ctx, const tokenlog_event *ev, char *err);
    int (*request)(void *ctx, const tokenlog_request *r, char *err);
    int (*step)(void *ctx, const tokenlog_step *st, char *err);
    void *ctx;
    int (*events)(void *ctx, const tokenlog_event *evs, int64_t n, char *err);
    int (*sched_event)(void *ctx, const tokenlog_sched_event *ev, char *err);
} tokenlog_sink;

/* The decimal digits of v at out, as printf's "%lld" (at most 20 bytes, no terminator);
 * returns the end. For writers of long CSVs: printf's format parsing costs more than the
 * digits. */
char *tokenlog_put_i64(char *out, int64_t v);

/* CSV rows (with header helpers) so a live client can write incrementally. */
void tokenlog_write_events_header(FILE *f);
void tokenlog_write_event(FILE *f, const tokenlog_event *ev);
void tokenlog_write_requests_header(FILE *f);
void tokenlog_write_request(FILE *f, const tokenlog_request *r);
/* prefix: with the prefix-cache columns (the engine ran with prefix caching). */
void tokenlog_write_steps_header(FILE *f, bool prefix);
void tokenlog_write_step(FILE *f, const tokenlog_step *st, bool prefix);
void tokenlog_write_sched_events_header(FILE *f);
void tokenlog_write_sched_event(FILE *f, const tokenlog_sched_event *ev);

/* ---- incremental files: whole rows only ----------------------------------------------
 *
 * A live run's tokens.csv and requests.csv grow as it goes, so that a run killed (kill -9)
 * or stopped by a full disk still leaves its rows. A writer collects whole rows in memory
 * and writes them with one pwrite(2) at tokenlog_writer_flush (the driver flushes every
 * 250 ms), when more than TOKENLOG_WRITER_MAX_PENDING bytes wait, and at close: the file
 * never ends inside a row, whenever it is read or the process dies (no stdio buffer spilling
 * half a row). A write that fails (ENOSPC, EFBIG past `ulimit -f`, EIO ...) or falls short
 * leaves, or cuts the file back to, its last whole row; the writer then refuses every later
 * row ("cannot write tokens.csv: No space left on device") and the caller stops. One limit
 * of the kernel, not of the writer: Linux may stop a write(2) of several pages between two
 * pages when SIGKILL arrives during it (a flush of tens of kB takes microseconds). */
#define TOKENLOG_WRITER_MAX_PENDING (1 << 20)

typedef struct tokenlog_writer {
    bool open;
    int fd;
    int kind;          /* tokenlog_file */
    char name[64];     /* the file's base name, for messages */
    int64_t size;      /* bytes in the file: always the end of a row */
    buf pending;       /* whole rows not written yet */
    char error[160];   /* the first failure ("" none): every later call fails with it */
    /* The write call, pwrite(2) after open: a test swaps in a disk that fills up. */
    ssize_t (*write_at)(int fd, const void *data, size_t len, off_t offset);
} tokenlog_writer;

/* Create (truncate) path and write the header of kind (tokens.csv or requests.csv). -1 with
 * err naming the file. */
int tokenlog_writer_open(tokenlog_writer *w, const char *path, tokenlog_file kind, char *err);
/* The same for another CSV in the same manner (the proxy's stalls.csv): header is its first
 * line, without the newline; kind is -1. */
int tokenlog_writer_open_header(tokenlog_writer *w, const char *path, const char *header,
                                char *err);
/* One whole row of such a file, newline included (-1 with err without it). */
int tokenlog_writer_row(tokenlog_writer *w, const char *row, size_t len, char *err);
/* Append one row (tokens.csv: an event; requests.csv: a request). -1 with err once the
 * writer has failed (this row or an earlier flush): the caller should stop. */
int tokenlog_writer_event(tokenlog_writer *w, const tokenlog_event *ev, char *err);
int tokenlog_writer_request(tokenlog_writer *w, const tokenlog_request *r, char *err);
/* Write the rows held. -1 with err ("cannot write NAME: REASON"); the file keeps every
 * whole row written before. */
int tokenlog_writer_flush(tokenlog_writer *w, char *err);
/* Flush and close (a zeroed or closed writer: nothing). -1 with err as flush. */
int tokenlog_writer_close(tokenlog_writer *w, char *err);

/* Write tokens.csv, requests.csv and (when n_steps > 0) steps.csv into dir (created), and
 * sched_events.csv when n_sched_events > 0 (so do the two below). */
int tokenlog_write_dir(const tokenlog *log, const char *dir, char *err);
/* The same without tokens.csv (a producer that wrote its events as they came). */
int tokenlog_write_dir_rows(const tokenlog *log, const char *dir, char *err);
/* steps.csv alone (when n_steps > 0): a live run whose tokens.csv and requests.csv, written
 * as it went, are its record. */
int tokenlog_write_steps(const tokenlog *log, const char *dir, char *err);
/* Read them back (steps.csv and sched_events.csv optional). A file's last row cut short (no
 * newline: a writer killed mid-row) is dropped and counted in *cut_rows (may be NULL); any
 * other malformed row is -1 with "file:line: why". */
int tokenlog_read_dir(tokenlog *log, const char *dir, int64_t *cut_rows, char *err);
/* The same without tokens.csv: requests.csv, steps.csv and sched_events.csv (optional), for
 * a run whose events were not kept (a long simulation past --tokens-csv-max). */
int tokenlog_read_dir_rows(tokenlog *log, const char *dir, int64_t *cut_rows, char *err);
/* Row by row, for a file too large to hold (a merge of shards reads several at once): the
 * header is checked at open, each call hands out the next row (1), 0 at the end, -1 with
 * "file:line: why". A last row cut short (no newline) is dropped and counted; close returns
 * that count. Open returns NULL with err; the reader keeps its own copy of path (the
 * caller's buffer need not outlive the open). */
typedef struct tokenlog_reader tokenlog_reader;
tokenlog_reader *tokenlog_reader_open(const char *path, tokenlog_file kind, char *err);
/* kind: TOKENLOG_TOKENS_CSV, else requests.csv. */
int tokenlog_reader_event(tokenlog_reader *r, tokenlog_event *ev, char *err);
int tokenlog_reader_request(tokenlog_reader *r, tokenlog_request *req, char *err);
int64_t tokenlog_reader_close(tokenlog_reader *r);
/* Append the steps of a live server's step log (steps.csv's format, CLOCK_MONOTONIC ns) that
 * started within [t0_ns, t_end_ns], rebased so t0_ns is t = 0. A missing file adds nothing;
 * a last row cut by a killed server is dropped and counted in *cut_rows (may be NULL); any
 * other malformed row is an error (-1, "file:line: why"). */
int tokenlog_read_steps(tokenlog *log, const char *path, int64_t t0_ns, int64_t t_end_ns,
                        int64_t *cut_rows, char *err);
/* The same for a live server's sched_events.csv (its rows whose t_ns lies in the window). */
int tokenlog_read_sched_events(tokenlog *log, const char *path, int64_t t0_ns, int64_t t_end_ns,
                               int64_t *cut_rows, char *err);

/* ---- logs kept apart, put together (tokenlog_merge.c) ----------------------------------
 *
 * A load generator with one log per client thread (client/driver.c) puts each in order in
 * its own thread, then merges them into the run's one log. The order: requests by when
 * they were sent (-1, carried over from before t = 0, first), then by user; events by
 * time, then user, then their request's place in that order, one request's events in the
 * order they came. Users never share a part, so over all the parts the order is total. */

/* Put part in that order: its requests sorted, its events sorted and naming their request
 * by its new row. Both sorts are stable and cheap on rows nearly in order already. -1 with
 * err when out of memory (part is then in no particular order). */
int tokenlog_merge_order(tokenlog *part, char *err);
/* Append parts[0, n_parts) (each in order) to out in that order, k-way: their requests,
 * each renumbered as its row in out (request = the row), and when `events`, their events,
 * naming those rows; of two rows in the same place, the earlier part's first. -1 with err
 * when out of memory. */
int tokenlog_merge(tokenlog *const *parts, int n_parts, bool events, tokenlog *out, char *err);
/* A live server's sched events (read into log, naming each request by the id the client sent
 * it: its row's sent_id) named as the run's files name the requests: by the row's `request`
 * (the merged log's), or by sent_id itself when `sent` (a run whose incremental files, which
 * keep those ids, are its record). The events of a request without a row (a probe, a warm-up
 * request that ended before t = 0) are dropped. -1 with err when out of memory. */
int tokenlog_name_sched_events(tokenlog *log, bool sent, char *err);

#endif
