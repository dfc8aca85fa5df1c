/* tokenlog: growth, the CSV writers and readers, and the readers' errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/tokenlog.h"

static void make_tmpdir(char *dir, size_t size)
{
    snprintf(dir, size, "/tmp/test_tokenlog_XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void remove_tree(const char *dir)
{
    const char *names[] = {"tokens.csv", "requests.csv", "steps.csv", "sched_events.csv"};
    char path[512];
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

#define TOKENS_HDR "t_ns,user,request,kind,n_tokens\n"
#define REQUESTS_HDR                                                                      \
    "request,user,kind,t_plan_ns,t_send_ns,t_first_ns,t_end_ns,prompt_tokens_requested," \
    "prompt_tokens,completion_tokens,finish_reason,error\n"
#define GOOD_REQUEST "7,3,bg,0,100,200,900,20,20,5,length,\n"

static void test_event_fits_32_bytes(void **state)
{
    (void)state;
    assert_true(sizeof(tokenlog_event) <= 32);
}

static void test_growth_keeps_every_row(void **state)
{
    (void)state;
    tokenlog log;
    tokenlog_init(&log);
    for (int64_t i = 0; i < 100000; i++) {
        tokenlog_event ev = {.t_ns = i * 7, .request = i / 100, .user = (int32_t)(i % 32),
                             .n_tokens = 1, .kind = TOKENLOG_BG};
        assert_int_equal(tokenlog_add_event(&log, &ev), 0);
    }
    assert_int_equal(log.n_events, 100000);
    assert_true(log.cap_events >= log.n_events);
    /* Geometric: capacity at most twice what is needed. */
    assert_true(log.cap_events < 2 * log.n_events);
    for (int64_t i = 0; i < 100000; i += 9973) {
        assert_int_equal(log.events[i].t_ns, i * 7);
        assert_int_equal(log.events[i].user, i % 32);
    }
    tokenlog_request r;
    memset(&r, 0, sizeof r);
    int64_t index = -1;
    r.request = 5;
    assert_int_equal(tokenlog_add_request(&log, &r, &index), 0);
    assert_int_equal(index, 0);
    r.request = 6;
    assert_int_equal(tokenlog_add_request(&log, &r, &index), 0);
    assert_int_equal(index, 1);
    assert_int_equal(log.requests[1].request, 6);
    tokenlog_free(&log);
    assert_null(log.events);
    assert_int_equal(log.n_events, 0);
}

static void test_writers_exact_format(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    tokenlog_event ev = {.t_ns = 123456789, .request = 42, .user = 3, .n_tokens = 2,
                         .kind = TOKENLOG_INJECT};
    tokenlog_write_events_header(f);
    tokenlog_write_event(f, &ev);
    tokenlog_request r;
    memset(&r, 0, sizeof r);
    r.request = 1;
    r.user = -1;
    r.kind = TOKENLOG_INJECT;
    r.t_plan_ns = 5;
    r.t_send_ns = 6;
    r.t_first_ns = -1;
    r.t_end_ns = 9;
    r.prompt_tokens_requested = 8000;
    r.prompt_tokens = 8001;
    r.completion_tokens = 0;
    strcpy(r.finish_reason, "abort");
    strcpy(r.error, "HTTP 500, \"boom\"");
    tokenlog_write_request(f, &r);
    fclose(f);
    assert_string_equal(text, TOKENS_HDR "123456789,3,42,inject,2\n"
                                         "1,-1,inject,5,6,-1,9,8000,8001,0,abort,"
                                         "\"HTTP 500, \"\"boom\"\"\"\n");
    free(text);
}

static void test_round_trip(void **state)
{
    (void)state;
    char dir[64], sub[128];
    make_tmpdir(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/run", dir); /* write_dir creates it */

    tokenlog log;
    tokenlog_init(&log);
    tokenlog_event evs[] = {
        {.t_ns = 1000, .request = 0, .user = 0, .n_tokens = 1, .kind = TOKENLOG_BG},
        {.t_ns = 2000, .request = 1, .user = 1, .n_tokens = 3, .kind = TOKENLOG_BG},
        {.t_ns = 5000000000LL, .request = 9, .user = -1, .n_tokens = 1, .kind = TOKENLOG_INJECT},
    };
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(tokenlog_add_event(&log, &evs[i]), 0);
    tokenlog_request reqs[2];
    memset(reqs, 0, sizeof reqs);
    reqs[0] = (tokenlog_request){.request = 0, .user = 0, .kind = TOKENLOG_BG, .t_plan_ns = 0,
                                 .t_send_ns = 10, .t_first_ns = 1000, .t_end_ns = 9000,
                                 .prompt_tokens_requested = 32, .prompt_tokens = 33,
                                 .completion_tokens = 100};
    strcpy(reqs[0].finish_reason, "length");
    reqs[1] = (tokenlog_request){.request = 9, .user = -1, .kind = TOKENLOG_INJECT,
                                 .t_plan_ns = 5000000000LL, .t_send_ns = 5000000100LL,
                                 .t_first_ns = -1, .t_end_ns = -1,
                                 .prompt_tokens_requested = 8000, .prompt_tokens = 8000};
    strcpy(reqs[1].error, "server said \"no\", twice\nthen hung up");
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(tokenlog_add_request(&log, &reqs[i], NULL), 0);
    tokenlog_step st = {.step = 0, .t_start_ns = 100, .t_end_ns = 146000100, .decode_tokens = 32,
                        .prefill_tokens = 8000, .n_requests = 33, .modeled_ns = 146000000,
                        .late_ns = 812345};
    assert_int_equal(tokenlog_add_step(&log, &st), 0);

    char err[ERR_LEN] = "";
    assert_int_equal(tokenlog_write_dir(&log, sub, err), 0);
    tokenlog back;
    assert_int_equal(tokenlog_read_dir(&back, sub, NULL, err), 0);
    assert_int_equal(back.n_events, 3);
    assert_int_equal(back.n_requests, 2);
    assert_int_equal(back.n_steps, 1);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(back.events[i].t_ns, evs[i].t_ns);
        assert_int_equal(back.events[i].request, evs[i].request);
        assert_int_equal(back.events[i].user, evs[i].user);
        assert_int_equal(back.events[i].n_tokens, evs[i].n_tokens);
        assert_int_equal(back.events[i].kind, evs[i].kind);
    }
    for (size_t i = 0; i < 2; i++) {
        const tokenlog_request *a = &reqs[i], *b = &back.requests[i];
        assert_int_equal(b->request, a->request);
        assert_int_equal(b->user, a->user);
        assert_int_equal(b->kind, a->kind);
        assert_int_equal(b->t_plan_ns, a->t_plan_ns);
        assert_int_equal(b->t_send_ns, a->t_send_ns);
        assert_int_equal(b->t_first_ns, a->t_first_ns);
        assert_int_equal(b->t_end_ns, a->t_end_ns);
        assert_int_equal(b->prompt_tokens_requested, a->prompt_tokens_requested);
        assert_int_equal(b->prompt_tokens, a->prompt_tokens);
        assert_int_equal(b->completion_tokens, a->completion_tokens);
        assert_string_equal(b->finish_reason, a->finish_reason);
        assert_string_equal(b->error, a->error);
    }
    assert_int_equal(back.steps[0].t_end_ns, 146000100);
    assert_int_equal(back.steps[0].prefill_tokens, 8000);
    assert_int_equal(back.steps[0].modeled_ns, 146000000);
    assert_int_equal(back.steps[0].late_ns, 812345);
    tokenlog_free(&back);

    /* Without steps, no steps.csv, and reading does not need one. */
    log.n_steps = 0;
    char path[256];
    snprintf(path, sizeof path, "%s/steps.csv", sub);
    unlink(path);
    assert_int_equal(tokenlog_write_dir(&log, sub, err), 0);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(tokenlog_read_dir(&back, sub, NULL, err), 0);
    assert_int_equal(back.n_steps, 0);
    assert_int_equal(back.n_events, 3);
    tokenlog_free(&back);
    tokenlog_free(&log);
    remove_tree(sub);
    rmdir(dir);
}

static void test_reader_tolerates_crlf_and_blank_lines(void **state)
{
    (void)state;
    char dir[64];
    make_tmpdir(dir, sizeof dir);
    write_text(dir, "tokens.csv", "t_ns,user,request,kind,n_tokens\r\n5,0,1,bg,1\r\n\r\n6,0,1,bg,1\n\n");
    write_text(dir, "requests.csv", REQUESTS_HDR "1,0,bg,0,1,5,6,3,3,2,\"stop\",\"\"\n");
    tokenlog log;
    char err[ERR_LEN] = "";
    assert_int_equal(tokenlog_read_dir(&log, dir, NULL, err), 0);
    assert_int_equal(log.n_events, 2);
    assert_int_equal(log.events[1].t_ns, 6);
    assert_string_equal(log.requests[0].finish_reason, "stop");
    assert_string_equal(log.requests[0].error, "");
    tokenlog_free(&log);
    remove_tree(dir);
}

/* steps.csv written before the late_ns column still reads (late_ns 0). */
static void test_reads_steps_without_late_ns(void **state)
{
    (void)state;
    char dir[64];
    make_tmpdir(dir, sizeof dir);
    write_text(dir, "tokens.csv", TOKENS_HDR);
    write_text(dir, "requests.csv", REQUESTS_HDR);
    write_text(dir, "steps.csv", "step,t_start_ns,t_end_ns,decode_tokens,prefill_tokens,"
                                 "n_requests,modeled_ns\n0,10,20,1,0,1,9\n");
    tokenlog log;
    char err[ERR_LEN] = "";
    assert_int_equal(tokenlog_read_dir(&log, dir, NULL, err), 0);
    assert_int_equal(log.n_steps, 1);
    assert_int_equal(log.steps[0].modeled_ns, 9);
    assert_int_equal(log.steps[0].late_ns, 0);
    tokenlog_free(&log);
    remove_tree(dir);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* sched_events.csv: written beside steps.csv when there are events (not otherwise), read back
 * with the run's files, and a live server's copy read inside a window and rebased. */
static void test_sched_events(void **state)
{
    (void)state;
    char dir[64], path[256], err[ERR_LEN] = "";
    make_tmpdir(dir, sizeof dir);
    tokenlog log;
    tokenlog_init(&log);
    const tokenlog_sched_event evs[] = {
        {.step = 7, .t_ns = 700, .request = 3, .event = TOKENLOG_PREEMPTED},
        {.step = 9, .t_ns = 900, .request = 4, .event = TOKENLOG_LEFT_OUT},
        {.step = 12, .t_ns = 1200, .request = 4, .event = TOKENLOG_REJOINED},
        {.step = 15, .t_ns = 1500, .request = 3, .event = TOKENLOG_RESUMED},
    };
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(tokenlog_add_sched_event(&log, &evs[i]), 0);
    tokenlog_request req = {.request = 3, .t_first_ns = -1, .t_end_ns = -1};
    assert_int_equal(tokenlog_add_request(&log, &req, NULL), 0);
    assert_int_equal(tokenlog_write_dir(&log, dir, err), 0);
    snprintf(path, sizeof path, "%s/sched_events.csv", dir);
    assert_string_equal(read_text(path), "step,t_ns,request,event\n7,700,3,preempted\n"
                                         "9,900,4,left_out\n12,1200,4,rejoined\n"
                                         "15,1500,3,resumed\n");
    tokenlog back;
    assert_int_equal(tokenlog_read_dir_rows(&back, dir, NULL, err), 0);
    assert_int_equal(back.n_sched_events, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(back.sched_events[i].step, evs[i].step);
        assert_int_equal(back.sched_events[i].t_ns, evs[i].t_ns);
        assert_int_equal(back.sched_events[i].request, evs[i].request);
        assert_int_equal(back.sched_events[i].event, evs[i].event);
    }
    tokenlog_free(&back);

    /* A live server's: the rows in [800, 1300], rebased to 800. */
    assert_int_equal(tokenlog_read_sched_events(&back, path, 800, 1300, NULL, err), 0);
    assert_int_equal(back.n_sched_events, 2);
    assert_int_equal(back.sched_events[0].t_ns, 100);
    assert_int_equal(back.sched_events[1].t_ns, 400);
    assert_int_equal(back.sched_events[1].event, TOKENLOG_REJOINED);
    tokenlog_free(&back);

    /* A bad event is an error naming the file and line. */
    write_text(dir, "sched_events.csv", "step,t_ns,request,event\n1,2,3,evicted\n");
    assert_int_equal(tokenlog_read_dir(&back, dir, NULL, err), -1);
    assert_non_null(strstr(err, "sched_events.csv:2: event is 'evicted'"));

    /* Without events, no file. */
    unlink(path);
    log.n_sched_events = 0;
    assert_int_equal(tokenlog_write_dir(&log, dir, err), 0);
    assert_int_equal(access(path, F_OK), -1);
    tokenlog_free(&log);
    remove_tree(dir);
}

/* A live server's sched log names requests by the ids their bodies gave (sent_id): named as
 * the merged log's rows are (request), or kept (the incremental files' ids); the events of a
 * request without a row (a probe) dropped. */
static void test_name_sched_events(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    for (int sent = 0; sent < 2; sent++) {
        tokenlog log;
        tokenlog_init(&log);
        const int64_t sent_ids[] = {17, 5, 9};
        for (int i = 0; i < 3; i++) {
            tokenlog_request r = {.request = i, .sent_id = sent_ids[i]};
            assert_int_equal(tokenlog_add_request(&log, &r, NULL), 0);
        }
        const int64_t logged[] = {9, 3, 17, 5};
        for (int i = 0; i < 4; i++) {
            tokenlog_sched_event e = {.step = i, .t_ns = i, .request = logged[i],
                                      .event = TOKENLOG_PREEMPTED};
            assert_int_equal(tokenlog_add_sched_event(&log, &e), 0);
        }
        assert_int_equal(tokenlog_name_sched_events(&log, sent, err), 0);
        assert_int_equal(log.n_sched_events, 3);
        const int64_t want[2][3] = {{2, 0, 1}, {9, 17, 5}};
        for (int i = 0; i < 3; i++)
            assert_int_equal(log.sched_events[i].request, want[sent][i]);
        assert_int_equal(log.sched_events[1].step, 2); /* 3's row, step 1, dropped */
        tokenlog_free(&log);
    }
}

/* Write the two files, read, and expect failure with `want` in the message. */
static void expect_read_error(const char *tokens, const char *requests, const char *want)
{
    char dir[64];
    make_tmpdir(dir, sizeof dir);
    if (tokens)
        write_text(dir, "tokens.csv", tokens);
    if (requests)
        write_text(dir, "requests.csv", requests);
    tokenlog log;
    char err[ERR_LEN] = "";
    assert_int_equal(tokenlog_read_dir(&log, dir, NULL, err), -1);
    if (!strstr(err, want))
        fail_msg("error '%s' lacks '%s'", err, want);
    /* Left empty on failure, so freeing is safe. */
    assert_int_equal(log.n_events, 0);
    tokenlog_free(&log);
    remove_tree(dir);
}

static void test_read_errors_name_file_and_line(void **state)
{
    (void)state;
    expect_read_error(TOKENS_HDR "1,0,1,bg,1\n2,0,1,bg,1\nabc,0,1,bg,1\n", REQUESTS_HDR,
                      "tokens.csv:4: t_ns is 'abc', not an integer");
    expect_read_error(TOKENS_HDR "1,0,1,bg\n", REQUESTS_HDR, "tokens.csv:2: 4 fields, expected 5");
    expect_read_error(TOKENS_HDR "1,0,1,decode,1\n", REQUESTS_HDR,
                      "tokens.csv:2: kind is 'decode'");
    expect_read_error(TOKENS_HDR "1,99999999999,1,bg,1\n", REQUESTS_HDR,
                      "tokens.csv:2: user 99999999999 is out of range");
    expect_read_error("time,user\n1,2\n", REQUESTS_HDR, "tokens.csv:1: header is 'time,user'");
    expect_read_error("", REQUESTS_HDR, "tokens.csv: empty file");
    expect_read_error(TOKENS_HDR, NULL, "requests.csv: No such file");
    expect_read_error(NULL, REQUESTS_HDR, "tokens.csv: No such file");
    /* A quoted newline makes one record of two physical lines: the bad row after it is
     * on line 4 of the file. */
    expect_read_error(TOKENS_HDR,
                      REQUESTS_HDR "1,0,bg,0,1,5,6,3,3,2,stop,\"two\nlines\"\n"
                                   "2,0,bg,0,1,5,6,3,x,2,stop,\n",
                      "requests.csv:4: prompt_tokens is 'x'");
    expect_read_error(TOKENS_HDR, REQUESTS_HDR "1,0,bg,0,1,5,6,3,3,2,stop,\"never closed\n",
                      "requests.csv:2: unterminated quoted field");
    expect_read_error(TOKENS_HDR, REQUESTS_HDR "1,0,bg,0,1,5,6,3,3,2,st\"o\"p,\n",
                      "requests.csv:2: stray quote");
}

/* A writer killed mid-row leaves a last row without its newline: dropped and counted, the
 * rows before it kept (issue 15: `report` refused the whole run for it). A short row that
 * is not the last, or that ends with its newline, is still an error. */
static void test_cut_last_row_dropped(void **state)
{
    (void)state;
    char dir[64], err[ERR_LEN] = "";
    make_tmpdir(dir, sizeof dir);
    write_text(dir, "tokens.csv", TOKENS_HDR "1,0,1,bg,1\n2,0,1,bg,1\n53,0");
    write_text(dir, "requests.csv", REQUESTS_HDR "1,0,bg,0,1,5,6,3,3,2,stop,\n2,0,bg,0,1,5,6,3,3,2,st");
    tokenlog log;
    int64_t cut = -1;
    assert_int_equal(tokenlog_read_dir(&log, dir, &cut, err), 0);
    assert_int_equal(cut, 2);
    assert_int_equal(log.n_events, 2);
    assert_int_equal(log.n_requests, 1);
    tokenlog_free(&log);
    /* A whole file: nothing cut. */
    write_text(dir, "tokens.csv", TOKENS_HDR "1,0,1,bg,1\n");
    write_text(dir, "requests.csv", REQUESTS_HDR);
    assert_int_equal(tokenlog_read_dir(&log, dir, &cut, err), 0);
    assert_int_equal(cut, 0);
    tokenlog_free(&log);
    remove_tree(dir);
    /* Cut in the middle, or short but whole: errors as before. */
    expect_read_error(TOKENS_HDR "1,0\n2,0,1,bg,1\n", REQUESTS_HDR, "tokens.csv:2: 2 fields");
    expect_read_error(TOKENS_HDR "1,0,1,bg,1\n53,0\n", REQUESTS_HDR, "tokens.csv:3: 2 fields");
}

/* The row reader hands out exactly the rows tokenlog_read_dir reads, one at a time, drops
 * a cut last row and counts it, and names the file and line of a bad one. */
static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static int64_t random_i64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    static const int64_t edges[] = {0, -1, 1, 9, 10, -10, 99, 100, INT64_MAX, INT64_MIN,
                                    999999999999999999LL, 1000000000000000000LL,
                                    -999999999999999999LL, INT32_MAX, INT32_MIN};
    switch (rng % 4) {
    case 0:
        return edges[(rng >> 8) % (sizeof edges / sizeof edges[0])];
    case 1:
        return (int64_t)(rng >> 1) >> (rng % 63); /* every length of digits */
    default:
        return (int64_t)(rng >> 40) - (int64_t)(1 << 23);
    }
}

/* The rows written by hand are printf's bytes (the format the files always had), at every
 * length of digits, negative numbers and the extremes included; and the integer fields read
 * back are strtoll's values. */
static void test_writers_match_printf(void **state)
{
    (void)state;
    char dir[64], err[ERR_LEN] = "";
    make_tmpdir(dir, sizeof dir);
    tokenlog log;
    tokenlog_init(&log);
    char *text = NULL, *want = NULL;
    size_t len = 0, want_len = 0;
    FILE *f = open_memstream(&text, &len), *w = open_memstream(&want, &want_len);
    for (int i = 0; i < 2000; i++) {
        tokenlog_request r;
        memset(&r, 0, sizeof r);
        r.request = random_i64();
        r.user = (int32_t)random_i64();
        r.kind = i % 3 == 0 ? TOKENLOG_INJECT : TOKENLOG_BG;
        r.t_plan_ns = random_i64();
        r.t_send_ns = random_i64();
        r.t_first_ns = random_i64();
        r.t_end_ns = random_i64();
        r.prompt_tokens_requested = (int32_t)random_i64();
        r.prompt_tokens = (int32_t)random_i64();
        r.completion_tokens = (int32_t)random_i64();
        strcpy(r.finish_reason, i % 2 ? "length" : "");
        tokenlog_write_request(f, &r);
        fprintf(w, "%lld,%d,%s,%lld,%lld,%lld,%lld,%d,%d,%d,%s,\n", (long long)r.request, r.user,
                r.kind == TOKENLOG_INJECT ? "inject" : "bg", (long long)r.t_plan_ns,
                (long long)r.t_send_ns, (long long)r.t_first_ns, (long long)r.t_end_ns,
                r.prompt_tokens_requested, r.prompt_tokens, r.completion_tokens, r.finish_reason);
        assert_int_equal(tokenlog_add_request(&log, &r, NULL), 0);
        tokenlog_step st = {.step = random_i64(), .t_start_ns = random_i64(),
                            .t_end_ns = random_i64(), .decode_tokens = (int32_t)random_i64(),
                            .prefill_tokens = (int32_t)random_i64(),
                            .n_requests = (int32_t)random_i64(), .modeled_ns = random_i64(),
                            .late_ns = random_i64()};
        tokenlog_write_step(f, &st, false);
        fprintf(w, "%lld,%lld,%lld,%d,%d,%d,%lld,%lld\n", (long long)st.step,
                (long long)st.t_start_ns, (long long)st.t_end_ns, st.decode_tokens,
                st.prefill_tokens, st.n_requests, (long long)st.modeled_ns, (long long)st.late_ns);
        assert_int_equal(tokenlog_add_step(&log, &st), 0);
    }
    fclose(f);
    fclose(w);
    assert_string_equal(text, want);
    free(text);
    free(want);
    /* Read back: the same rows (strtoll's values, by hand or not). */
    assert_int_equal(tokenlog_write_dir_rows(&log, dir, err), 0);
    tokenlog back;
    assert_int_equal(tokenlog_read_dir_rows(&back, dir, NULL, err), 0);
    assert_int_equal(back.n_requests, log.n_requests);
    assert_int_equal(back.n_steps, log.n_steps);
    assert_memory_equal(back.requests, log.requests, (size_t)log.n_requests * sizeof *log.requests);
    for (int64_t i = 0; i < log.n_steps; i++) { /* field by field: the padding is not */
        const tokenlog_step *a = &back.steps[i], *b = &log.steps[i];
        assert_true(a->step == b->step && a->t_start_ns == b->t_start_ns &&
                    a->t_end_ns == b->t_end_ns && a->decode_tokens == b->decode_tokens &&
                    a->prefill_tokens == b->prefill_tokens && a->n_requests == b->n_requests &&
                    a->modeled_ns == b->modeled_ns && a->late_ns == b->late_ns);
    }
    tokenlog_free(&back);
    tokenlog_free(&log);
    remove_tree(dir);
    /* What strtoll took or refused, still: a '+', a value past int64, a sign alone. */
    make_tmpdir(dir, sizeof dir);
    write_text(dir, "tokens.csv", TOKENS_HDR "1,0,1,bg,+7\n");
    write_text(dir, "requests.csv", REQUESTS_HDR);
    assert_int_equal(tokenlog_read_dir(&back, dir, NULL, err), 0);
    assert_int_equal(back.n_events, 1);
    assert_int_equal(back.events[0].n_tokens, 7);
    tokenlog_free(&back);
    remove_tree(dir);
    expect_read_error(TOKENS_HDR "9223372036854775808,0,1,bg,1\n", REQUESTS_HDR,
                      "tokens.csv:2: t_ns is '9223372036854775808', not an integer");
    expect_read_error(TOKENS_HDR "-,0,1,bg,1\n", REQUESTS_HDR, "tokens.csv:2: t_ns is '-'");
    expect_read_error(TOKENS_HDR "--5,0,1,bg,1\n", REQUESTS_HDR, "tokens.csv:2: t_ns is '--5'");
    expect_read_error(TOKENS_HDR "5 ,0,1,bg,1\n", REQUESTS_HDR, "tokens.csv:2: t_ns is '5 '");
}

static void test_row_reader(void **state)
{
    (void)state;
    char dir[64], path[128], err[ERR_LEN] = "";
    make_tmpdir(dir, sizeof dir);
    write_text(dir, "tokens.csv", TOKENS_HDR "10,0,1,bg,1\n20,3,2,inject,2\n30,1,1,bg,1\n4");
    write_text(dir, "requests.csv", REQUESTS_HDR GOOD_REQUEST "8,-1,inject,5,6,-1,-1,9,9,0,abort,\"x, y\"\n");
    tokenlog log;
    int64_t cut = -1;
    assert_int_equal(tokenlog_read_dir(&log, dir, &cut, err), 0);
    snprintf(path, sizeof path, "%s/tokens.csv", dir);
    tokenlog_reader *r = tokenlog_reader_open(path, TOKENLOG_TOKENS_CSV, err);
    assert_non_null(r);
    tokenlog_event ev;
    int64_t n = 0;
    int got;
    while ((got = tokenlog_reader_event(r, &ev, err)) == 1) {
        assert_true(n < log.n_events);
        assert_memory_equal(&ev, &log.events[n], sizeof ev);
        n++;
    }
    assert_int_equal(got, 0);
    assert_int_equal(n, 3);
    tokenlog_request q;
    assert_int_equal(tokenlog_reader_request(r, &q, err), -1); /* the wrong kind of row */
    assert_int_equal(tokenlog_reader_close(r), 1);              /* "4": cut */
    snprintf(path, sizeof path, "%s/requests.csv", dir);
    assert_non_null(r = tokenlog_reader_open(path, TOKENLOG_REQUESTS_CSV, err));
    for (n = 0; (got = tokenlog_reader_request(r, &q, err)) == 1; n++)
        assert_memory_equal(&q, &log.requests[n], sizeof q);
    assert_int_equal(got, 0);
    assert_int_equal(n, 2);
    assert_string_equal(q.error, "x, y");
    assert_int_equal(tokenlog_reader_close(r), 0);
    tokenlog_free(&log);

    write_text(dir, "tokens.csv", TOKENS_HDR "10,0,1,bg,1\n11,0,1,xx,1\n12,0,1,bg,1\n");
    snprintf(path, sizeof path, "%s/tokens.csv", dir);
    assert_non_null(r = tokenlog_reader_open(path, TOKENLOG_TOKENS_CSV, err));
    assert_int_equal(tokenlog_reader_event(r, &ev, err), 1);
    assert_int_equal(tokenlog_reader_event(r, &ev, err), -1);
    assert_non_null(strstr(err, "tokens.csv:3: kind is 'xx'"));
    tokenlog_reader_close(r);
    write_text(dir, "tokens.csv", "t,user\n");
    assert_null(tokenlog_reader_open(path, TOKENLOG_TOKENS_CSV, err));
    assert_non_null(strstr(err, "header is 't,user'"));
    remove_tree(dir);
    assert_null(tokenlog_reader_open(path, TOKENLOG_TOKENS_CSV, err));
    assert_non_null(strstr(err, "No such file"));
}

/* The reader names its file in every error, whatever became of the caller's path buffer
 * since open (a merge opens one reader per shard in a loop, then reads them all). */
static void test_reader_keeps_its_path(void **state)
{
    (void)state;
    char dir[64], path[128], err[ERR_LEN] = "";
    make_tmpdir(dir, sizeof dir);
    write_text(dir, "tokens.csv", TOKENS_HDR "10,0,1,bg,1\n11,0,1,bg,one\n");
    snprintf(path, sizeof path, "%s/tokens.csv", dir);
    tokenlog_reader *r = tokenlog_reader_open(path, TOKENLOG_TOKENS_CSV, err);
    assert_non_null(r);
    char want[160];
    snprintf(want, sizeof want, "%s:3: n_tokens is 'one'", path);
    memset(path, 'X', sizeof path - 1); /* the caller's buffer, reused */
    tokenlog_event ev;
    assert_int_equal(tokenlog_reader_event(r, &ev, err), 1);
    assert_int_equal(tokenlog_reader_event(r, &ev, err), -1);
    if (!strstr(err, want))
        fail_msg("error '%s' lacks '%s'", err, want);
    tokenlog_reader_close(r);
    remove_tree(dir);
}

/* ---- the incremental writer -------------------------------------------------------- */

static int64_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (int64_t)st.st_size;
}

/* The file read now (as a kill -9 would leave it) ends with a whole row. */
static void assert_whole_rows(const char *path)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    int64_t size = file_size(path);
    char last = 0;
    assert_true(size > 0);
    assert_int_equal(pread(fd, &last, 1, size - 1), 1);
    close(fd);
    if (last != '\n')
        fail_msg("%s ends inside a row (%lld bytes)", path, (long long)size);
}

static tokenlog_event event_n(int64_t i)
{
    return (tokenlog_event){.t_ns = 1000000000LL + i * 7919, .request = i / 37,
                            .user = (int32_t)(i % 256), .n_tokens = 1 + (int32_t)(i % 3),
                            .kind = i % 50 ? TOKENLOG_BG : TOKENLOG_INJECT};
}

/* Whole rows at every moment: 60,000 rows (~1.7 MB, past the writer's 1 MiB of pending
 * rows and any stdio buffer), flushed every 5,000, the file checked every 997 rows. */
static void test_writer_whole_rows_always(void **state)
{
    (void)state;
    char dir[64], path[128];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokens.csv", dir);
    tokenlog_writer w;
    char err[ERR_LEN] = "";
    assert_int_equal(tokenlog_writer_open(&w, path, TOKENLOG_TOKENS_CSV, err), 0);
    assert_int_equal(file_size(path), (int64_t)strlen(TOKENS_HDR)); /* the header at once */
    for (int64_t i = 0; i < 60000; i++) {
        tokenlog_event ev = event_n(i);
        assert_int_equal(tokenlog_writer_event(&w, &ev, err), 0);
        if (i % 5000 == 4999)
            assert_int_equal(tokenlog_writer_flush(&w, err), 0);
        if (i % 997 == 0)
            assert_whole_rows(path);
    }
    assert_int_equal(tokenlog_writer_close(&w, err), 0);
    assert_int_equal(tokenlog_writer_close(&w, err), 0); /* closing twice is harmless */
    /* The rows are the ones tokenlog_write_dir writes, byte for byte. */
    tokenlog log;
    tokenlog_init(&log);
    for (int64_t i = 0; i < 60000; i++) {
        tokenlog_event ev = event_n(i);
        assert_int_equal(tokenlog_add_event(&log, &ev), 0);
    }
    tokenlog_request r = {.request = 3, .user = -1, .kind = TOKENLOG_INJECT, .t_plan_ns = 1,
                          .t_send_ns = 2, .t_first_ns = -1, .t_end_ns = 4,
                          .prompt_tokens_requested = 8000, .prompt_tokens = 8000};
    strcpy(r.error, "HTTP 500: \"x\", y");
    assert_int_equal(tokenlog_add_request(&log, &r, NULL), 0);
    char whole[128], rpath[128];
    snprintf(whole, sizeof whole, "%s/whole", dir);
    snprintf(rpath, sizeof rpath, "%s/requests.csv", dir);
    assert_int_equal(tokenlog_writer_open(&w, rpath, TOKENLOG_REQUESTS_CSV, err), 0);
    assert_int_equal(tokenlog_writer_request(&w, &r, err), 0);
    assert_int_equal(tokenlog_writer_close(&w, err), 0);
    assert_int_equal(tokenlog_write_dir(&log, whole, err), 0);
    const char *names[] = {"tokens.csv", "requests.csv"};
    for (int k = 0; k < 2; k++) {
        char a[160], b[160], cmd[400];
        snprintf(a, sizeof a, "%s/%s", dir, names[k]);
        snprintf(b, sizeof b, "%s/%s", whole, names[k]);
        snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
        if (system(cmd) != 0)
            fail_msg("%s differs from %s", a, b);
    }
    tokenlog_free(&log);
    remove_tree(whole);
    remove_tree(dir);
}

/* A disk with room_left bytes free: writes go to the real file until it is full, then
 * fall short, then fail with ENOSPC (what a full file system does). */
static int64_t room_left;

static ssize_t small_disk(int fd, const void *data, size_t len, off_t offset)
{
    if (room_left <= 0) {
        errno = ENOSPC;
        return -1;
    }
    ssize_t n = pwrite(fd, data, len < (size_t)room_left ? len : (size_t)room_left, offset);
    if (n > 0)
        room_left -= n;
    return n;
}

/* Fill the disk while writing rows, flushing every 10: the first flush that does not fit
 * fails with "No space left on device"; the file keeps every whole row before it (a short
 * write is cut back), and every later call fails the same way. */
static void fill_disk(int64_t room, int64_t *rows_kept, char *err)
{
    char dir[64], path[128];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokens.csv", dir);
    tokenlog_writer w;
    assert_int_equal(tokenlog_writer_open(&w, path, TOKENLOG_TOKENS_CSV, err), 0);
    w.write_at = small_disk;
    room_left = room;
    int rc = 0;
    int64_t i;
    for (i = 0; rc == 0 && i < 10000; i++) {
        tokenlog_event ev = event_n(i);
        rc = tokenlog_writer_event(&w, &ev, err);
        if (rc == 0 && i % 10 == 9)
            rc = tokenlog_writer_flush(&w, err);
    }
    assert_int_equal(rc, -1);
    char later[ERR_LEN] = "";
    tokenlog_event ev = event_n(0);
    assert_int_equal(tokenlog_writer_event(&w, &ev, later), -1);
    assert_string_equal(later, err);
    assert_int_equal(tokenlog_writer_close(&w, later), -1);
    assert_whole_rows(path);
    write_text(dir, "requests.csv", REQUESTS_HDR);
    tokenlog back;
    char why[ERR_LEN];
    assert_int_equal(tokenlog_read_dir(&back, dir, NULL, why), 0);
    for (int64_t k = 0; k < back.n_events; k++)
        assert_int_equal(back.events[k].t_ns, event_n(k).t_ns);
    assert_true(back.n_events % 10 == 0 || back.n_events < i); /* whole flushes, or cut back */
    *rows_kept = back.n_events;
    tokenlog_free(&back);
    remove_tree(dir);
}

static void test_writer_full_disk(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    int64_t kept = 0;
    /* Full in the middle of a flush's rows: the short write is cut back to a whole row. */
    fill_disk(5000, &kept, err);
    assert_string_equal(err, "cannot write tokens.csv: No space left on device");
    assert_true(kept > 100 && kept < 5000 / 20);
    /* Full exactly at a flush's end: the next write fails outright (ENOSPC). */
    char header_and_20_rows[4096];
    size_t at = 0;
    for (int64_t k = 0; k < 20; k++) {
        tokenlog_event ev = event_n(k);
        at += (size_t)snprintf(header_and_20_rows + at, sizeof header_and_20_rows - at,
                               "%lld,%d,%lld,%s,%d\n", (long long)ev.t_ns, ev.user,
                               (long long)ev.request, tokenlog_kind_name(ev.kind), ev.n_tokens);
    }
    fill_disk((int64_t)at, &kept, err);
    assert_string_equal(err, "cannot write tokens.csv: No space left on device");
    assert_int_equal(kept, 20);
}

/* Past `ulimit -f` a write falls short, then fails with EFBIG (SIGXFSZ ignored, as the
 * integration test does). The file keeps every whole row written before and never a cut
 * one; every later call fails with the first error. */
static void test_writer_file_too_large(void **state)
{
    (void)state;
    char dir[64], path[128];
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokens.csv", dir);
    struct rlimit before, small;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &before), 0);
    small = before;
    small.rlim_cur = 10000;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    tokenlog_writer w;
    char err[ERR_LEN] = "";
    int rc = tokenlog_writer_open(&w, path, TOKENLOG_TOKENS_CSV, err);
    int failed_at = -1;
    for (int64_t i = 0; rc == 0 && i < 2000; i++) {
        tokenlog_event ev = event_n(i);
        rc = tokenlog_writer_event(&w, &ev, err);
        if (rc == 0 && i % 100 == 99)
            rc = tokenlog_writer_flush(&w, err);
        if (rc != 0)
            failed_at = (int)i;
    }
    char later[ERR_LEN] = "";
    tokenlog_event ev = event_n(0);
    int later_rc = tokenlog_writer_event(&w, &ev, later);
    int close_rc = tokenlog_writer_close(&w, later);
    setrlimit(RLIMIT_FSIZE, &before);
    signal(SIGXFSZ, old_handler);

    assert_int_equal(rc, -1);
    assert_true(failed_at > 100 && failed_at < 1000); /* 10,000 bytes: ~360 rows */
    assert_string_equal(err, "cannot write tokens.csv: File too large");
    assert_int_equal(later_rc, -1);
    assert_int_equal(close_rc, -1);
    assert_string_equal(later, err);
    int64_t size = file_size(path);
    assert_true(size > 5000 && size <= 10000);
    assert_whole_rows(path);
    /* Every row whole and in order: the reader takes the file as it is. */
    tokenlog back;
    write_text(dir, "requests.csv", REQUESTS_HDR);
    assert_int_equal(tokenlog_read_dir(&back, dir, NULL, err), 0);
    assert_true(back.n_events >= 100);
    for (int64_t i = 0; i < back.n_events; i++)
        assert_int_equal(back.events[i].t_ns, event_n(i).t_ns);
    tokenlog_free(&back);
    remove_tree(dir);
}

/* Two parts written apart (users 1 and 2 on one, user 0 on the other), each out of order
 * as a client thread's rows may be, put in order and merged: requests by (t_send, user),
 * warm-up carry-overs (-1) first, renumbered as their rows; events by (t, user, request),
 * naming the merged rows, one request's events in the order they came. */
static void add_request(tokenlog *log, int64_t id, int32_t user, int64_t t_send_ns)
{
    tokenlog_request r = {0};
    r.request = id;
    r.user = user;
    r.t_send_ns = t_send_ns;
    r.t_plan_ns = t_send_ns;
    assert_int_equal(tokenlog_add_request(log, &r, NULL), 0);
}

static void add_event(tokenlog *log, int64_t t_ns, int64_t row, int32_t user, int32_t n_tokens)
{
    tokenlog_event ev = {t_ns, row, user, n_tokens, TOKENLOG_BG};
    assert_int_equal(tokenlog_add_event(log, &ev), 0);
}

static void test_merge_parts(void **state)
{
    (void)state;
    char err[ERR_LEN];
    tokenlog a, b, out;
    tokenlog_init(&a);
    tokenlog_init(&b);
    tokenlog_init(&out);
    add_request(&a, 100, 2, 50);  /* row 0 */
    add_request(&a, 101, 1, 50);  /* row 1: same send time, lower user: first */
    add_request(&a, 102, 1, -1);  /* row 2: carried over from the warm-up */
    add_event(&a, 70, 0, 2, 1);
    add_event(&a, 60, 1, 1, 1);   /* out of order */
    add_event(&a, 60, 1, 1, 2);   /* the same request's next event, same stamp */
    add_event(&a, 10, 2, 1, 1);
    add_request(&b, 200, 0, 50);  /* b's row 0 */
    add_request(&b, 201, 0, 20);  /* b's row 1 */
    add_event(&b, 60, 0, 0, 3);
    add_event(&b, 30, 1, 0, 1);
    assert_int_equal(tokenlog_merge_order(&a, err), 0);
    assert_int_equal(tokenlog_merge_order(&b, err), 0);
    assert_int_equal(a.requests[0].request, 102); /* in a: -1, then (50, user 1), (50, 2) */
    assert_int_equal(a.requests[1].request, 101);
    assert_int_equal(a.events[0].request, 0);     /* t = 10: the carried-over one, now row 0 */
    tokenlog *parts[] = {&a, &b};
    add_request(&out, 9, 5, -1); /* a row already there: the merged rows follow it */
    assert_int_equal(tokenlog_merge(parts, 2, true, &out, err), 0);
    const int64_t want_id[] = {102, 201, 200, 101, 100}; /* -1; 20; 50 users 0, 1, 2 */
    assert_int_equal(out.n_requests, 6);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(out.requests[i + 1].request, i + 1); /* renumbered: its row */
        assert_int_equal(out.requests[i + 1].t_plan_ns,
                         want_id[i] == 102 ? -1 : want_id[i] == 201 ? 20 : 50);
    }
    assert_int_equal(out.requests[3].user, 0); /* the three sent at 50, by user */
    assert_int_equal(out.requests[4].user, 1);
    assert_int_equal(out.requests[5].user, 2);
    /* Events: (10, u1, row 1), (30, u0, row 2), (60, u0, row 3), (60, u1, row 4) x2 in the
     * order they came (1 then 2 tokens), (70, u2, row 5). */
    const int64_t want_t[] = {10, 30, 60, 60, 60, 70}, want_row[] = {1, 2, 3, 4, 4, 5};
    const int32_t want_tokens[] = {1, 1, 3, 1, 2, 1};
    assert_int_equal(out.n_events, 6);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(out.events[i].t_ns, want_t[i]);
        assert_int_equal(out.events[i].request, want_row[i]);
        assert_int_equal(out.events[i].n_tokens, want_tokens[i]);
    }
    /* Without events: the requests alone. */
    tokenlog rows;
    tokenlog_init(&rows);
    assert_int_equal(tokenlog_merge(parts, 2, false, &rows, err), 0);
    assert_int_equal(rows.n_requests, 5);
    assert_int_equal(rows.n_events, 0);
    tokenlog_free(&rows);
    tokenlog_free(&out);
    tokenlog_free(&a);
    tokenlog_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cut_last_row_dropped),
        cmocka_unit_test(test_event_fits_32_bytes),
        cmocka_unit_test(test_growth_keeps_every_row),
        cmocka_unit_test(test_writers_exact_format),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_reader_tolerates_crlf_and_blank_lines),
        cmocka_unit_test(test_reads_steps_without_late_ns),
        cmocka_unit_test(test_sched_events),
        cmocka_unit_test(test_name_sched_events),
        cmocka_unit_test(test_read_errors_name_file_and_line),
        cmocka_unit_test(test_writer_whole_rows_always),
        cmocka_unit_test(test_writer_full_disk),
        cmocka_unit_test(test_writer_file_too_large),
        cmocka_unit_test(test_row_reader),
        cmocka_unit_test(test_reader_keeps_its_path),
        cmocka_unit_test(test_writers_match_printf),
        cmocka_unit_test(test_merge_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
