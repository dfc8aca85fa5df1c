/* raw_sender — the benches' upstream with nothing in the way: a child process, one epoll
 * loop, that answers every request with an SSE stream and stamps each chunk with its emit
 * time right before its send() (bench_client: the client's own error; bench_proxy: the
 * error with and without the proxy in between).
 *
 * Every step_ns, one chunk to every open stream: an OpenAI-style completions chunk of one
 * token (" w") whose "stallscope" field carries emit_ns (CLOCK_MONOTONIC) and the step; a
 * stream ends after `answer` chunks (the last with finish_reason "length", usage and
 * [DONE]), and the sender closes it: the answer is framed by the close ("Connection:
 * close", no length). A step that finds the loop late starts the next one a whole step
 * later (no catch-up burst).
 *
 * The child counts what it sent in memory it shares with the parent (raw_sender_read): the
 * streams sent whole and those the peer closed first, and the tokens of each, so a bench
 * can check that every token sent arrived. */
#ifndef STALLSCOPE_BENCH_RAW_SENDER_H
#define STALLSCOPE_BENCH_RAW_SENDER_H
#include <stdint.h>
#include <sys/types.h>

typedef struct raw_sender_counts {
    int64_t tokens_sent;     /* chunks sent, every stream's, as they go */
    int64_t streams_started; /* requests answered with a stream head */
    int64_t streams_done;    /* streams sent whole: `answer` chunks, [DONE], closed here */
    int64_t streams_cut;     /* streams the peer closed before their end */
    int64_t tokens_done;     /* chunks of the streams sent whole */
    int64_t tokens_cut;      /* chunks sent on streams the peer closed before their end */
    int64_t short_sends;     /* send() calls that did not take the whole chunk (a stream
                                then carries a broken chunk: nothing should count it) */
} raw_sender_counts;

typedef struct raw_sender_shared raw_sender_shared;

typedef struct raw_sender {
    pid_t pid;               /* the child; 0 when not started */
    char url[64];            /* http://127.0.0.1:PORT */
    raw_sender_shared *shared; /* the child's counters (shared memory) */
} raw_sender;

/* Listen on a free loopback port and fork the sender (killed with the parent, its soft
 * RLIMIT_NOFILE raised to the hard one). 0, or -1 with err. */
int raw_sender_start(raw_sender *s, int64_t step_ns, int answer, char *err);
/* What the child has sent so far. */
void raw_sender_read(const raw_sender *s, raw_sender_counts *out);
/* SIGTERM the child, wait for it, unmap the counters. */
void raw_sender_stop(raw_sender *s);

#endif
