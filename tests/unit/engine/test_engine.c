/* engine: the loop on its thread with a scripted executor (finish reasons, stop strings
 * across tokens, min_tokens, cancel, refusal, shutdown, the step log) and with the emulate
 * executor (steps last their modeled time, and time does not drift). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>

#include "common/clock.h"
#include "engine/cost.h"
#include "engine/engine.h"
#include "engine/exec_emulate.h"
#include "engine/vocab.h"

/* ---- a scripted executor: token at position p is p % 5 ("ab", "cd", "ef", "gh", "ij");
 * EOS (id 99) at position seq->seed - 1 when seed > 0, even with ignore_eos (so the
 * engine's own rules are what the tests see). Not paced: steps take no time. */

#define FAKE_EOS 99
static const char *fake_words[] = {"ab", "cd", "ef", "gh", "ij"};
/* A test that must catch a request still running sets this: each step then lasts this long. */
static atomic_llong fake_step_ns;

static int fake_step(exec *x, const sched_batch *batch, const exec_seq *const *seqs,
                     int64_t start_ns, int32_t *tokens, int64_t *modeled_ns, char *err)
{
    (void)x, (void)start_ns, (void)err;
    for (int i = 0; i < batch->n_items; i++) {
        if (!batch->items[i].samples)
            continue;
        int64_t p = batch->items[i].req->generated;
        tokens[i] = seqs[i]->seed > 0 && p == (int64_t)seqs[i]->seed - 1 ? FAKE_EOS
                                                                          : (int32_t)(p % 5);
    }
    *modeled_ns = 1000;
    const long long sleep_ns = atomic_load(&fake_step_ns);
    if (sleep_ns > 0)
        clock_sleep_until_ns(clock_now_ns() + sleep_ns);
    return 0;
}

static const char *fake_text(const exec *x, int32_t token, size_t *len)
{
    (void)x;
    const char *t = token >= 0 && token < 5 ? fake_words[token] : "";
    *len = strlen(t);
    return t;
}

static bool fake_is_eos(const exec *x, int32_t token)
{
    (void)x;
    return token == FAKE_EOS;
}

static int64_t fake_tokenize(const exec *x, const char *t, size_t n, int32_t *ids, int64_t m)
{
    (void)x, (void)ids, (void)m;
    return vocab_tokenize(t, n, NULL, 0, 0);
}

static void fake_destroy(exec *x)
{
    free(x);
}

static exec *fake_exec(void)
{
    exec *x = calloc(1, sizeof *x);
    x->name = "fake";
    x->vocab_size = 100;
    x->step = fake_step;
    x->token_text = fake_text;
    x->is_eos = fake_is_eos;
    x->tokenize = fake_tokenize;
    x->destroy = fake_destroy;
    return x;
}

/* ---- harness: the consumer side ------------------------------------------------------ */

typedef struct got {
    int n_tokens;
    char text[4096];
    int32_t last_completion;
    engine_finish finish;
    int stop_index;
    bool done;
} got;

typedef struct harness {
    engine *e;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int notified;
    int64_t steps;
    int64_t idle_summaries;
    int last_running;
    int64_t last_kv_used;
} harness;

static void on_notify(void *arg)
{
    harness *h = arg;
    pthread_mutex_lock(&h->lock);
    h->notified++;
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->lock);
}

static sched_config small_sched(void)
{
    return (sched_config){.policy = SCHED_CHUNKED, .max_num_batched_tokens = 64,
                          .max_num_seqs = 64, .max_model_len = 512, .block_size = 16,
                          .kv_blocks = 4096};
}

static void harness_start(harness *h, exec *x, sched_config sc, FILE *log)
{
    /* SCHED_FIFO where allowed, as the server asks: precise wake-ups on a busy machine. */
    const bool realtime = x->paced;
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    engine_config cfg = {.sched = sc, .executor = x, .step_log = log, .notify = on_notify,
                         .notify_arg = h, .realtime = realtime};
    char err[ERR_LEN] = "";
    h->e = engine_create(&cfg, err);
    if (!h->e)
        fail_msg("engine_create: %s", err);
    assert_int_equal(engine_start(h->e, err), 0);
}

static void harness_stop(harness *h)
{
    engine_free(h->e);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
}

/* Poll until every request in reqs has its final event (at most 10 s). */
static void drain(harness *h, engine_req **reqs, got *out, int n)
{
    int64_t deadline = clock_now_ns() + 10 * CLOCK_NS_PER_S;
    for (;;) {
        engine_event *evs;
        size_t k = engine_poll(h->e, &evs);
        for (size_t i = 0; i < k; i++) {
            const engine_event *ev = &evs[i];
            if (!ev->req) {
                if (ev->info.is_step)
                    h->steps++;
                else
                    h->idle_summaries++;
                h->last_running = ev->info.running;
                h->last_kv_used = ev->info.kv_blocks_used;
                continue;
            }
            int j = 0;
            while (j < n && reqs[j] != ev->req)
                j++;
            assert_true(j < n);
            got *g = &out[j];
            assert_false(g->done);
            if (ev->token >= 0) {
                g->n_tokens++;
                assert_int_equal(ev->completion_tokens, g->n_tokens);
                size_t len;
                const char *t = fake_text(NULL, ev->token, &len);
                if ((size_t)ev->text_len < len)
                    len = (size_t)ev->text_len;
                strncat(g->text, t, len);
            }
            g->last_completion = ev->completion_tokens;
            if (ev->finish != ENGINE_FINISH_NONE) {
                g->done = true;
                g->finish = (engine_finish)ev->finish;
                g->stop_index = ev->stop_index;
            }
        }
        bool all = true;
        for (int j = 0; j < n; j++)
            all = all && out[j].done;
        if (all)
            return;
        if (clock_now_ns() > deadline)
            fail_msg("requests did not finish in 10 s");
        pthread_mutex_lock(&h->lock);
        int64_t wait = clock_now_ns() + 50 * CLOCK_NS_PER_MS;
        (void)wait;
        if (h->notified == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&h->cond, &h->lock, &ts);
        }
        h->notified = 0;
        pthread_mutex_unlock(&h->lock);
    }
}

static engine_req *new_req(int64_t id, int prompt, int max_tokens)
{
    engine_req *r = calloc(1, sizeof *r);
    r->id = id;
    r->prompt_tokens = prompt;
    r->max_tokens = max_tokens;
    return r;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_finish_reasons(void **state)
{
    (void)state;
    harness h;
    harness_start(&h, fake_exec(), small_sched(), NULL);
    engine_req *length = new_req(1, 10, 7);
    engine_req *eos = new_req(2, 10, 50);
    eos->seq.seed = 4; /* EOS at position 3: "abcdef" + EOS */
    engine_req *ignored = new_req(3, 10, 6);
    ignored->seq.seed = 2;
    ignored->seq.ignore_eos = true; /* the EOS token is just a token without text */
    engine_req *late = new_req(4, 10, 50);
    late->seq.seed = 3;
    late->seq.min_tokens = 5; /* EOS at 2 < min_tokens: not an end */
    engine_req *reqs[] = {length, eos, ignored, late};
    got g[4];
    memset(g, 0, sizeof g);
    for (int i = 0; i < 4; i++)
        engine_submit(h.e, reqs[i]);
    drain(&h, reqs, g, 4);
    assert_int_equal(g[0].finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(g[0].n_tokens, 7);
    assert_string_equal(g[0].text, "abcdefghijabcd");
    assert_int_equal(g[1].finish, ENGINE_FINISH_STOP);
    assert_int_equal(g[1].n_tokens, 4); /* EOS counts as a completion token */
    assert_string_equal(g[1].text, "abcdef");
    assert_int_equal(g[1].stop_index, -1);
    assert_int_equal(g[2].finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(g[2].n_tokens, 6);
    assert_string_equal(g[2].text, "abefghijab"); /* position 1 was EOS: no text */
    assert_int_equal(g[3].finish, ENGINE_FINISH_LENGTH);
    assert_int_equal(g[3].n_tokens, 50);
    assert_true(h.steps > 0);
    harness_stop(&h);
    for (int i = 0; i < 4; i++)
        free(reqs[i]);
}

static void test_stop_strings(void **state)
{
    (void)state;
    harness h;
    harness_start(&h, fake_exec(), small_sched(), NULL);
    /* Text "ab" "cd" "ef" "gh" ...; stops inside a token, across tokens, and unmatched. */
    static const char *inside[] = {"zz", "d"};
    static const char *across[] = {"bcde"};
    static const char *before_min[] = {"cd"};
    engine_req *a = new_req(1, 4, 40);
    a->stop = inside;
    a->n_stop = 2;
    engine_req *b = new_req(2, 4, 40);
    b->stop = across;
    b->n_stop = 1;
    engine_req *c = new_req(3, 4, 40);
    c->stop = before_min; /* "cd" at tokens 2 and 7; min_tokens 4 skips the first */
    c->n_stop = 1;
    c->seq.min_tokens = 4;
    engine_req *reqs[] = {a, b, c};
    got g[3];
    memset(g, 0, sizeof g);
    for (int i = 0; i < 3; i++)
        engine_submit(h.e, reqs[i]);
    drain(&h, reqs, g, 3);
    assert_int_equal(g[0].finish, ENGINE_FINISH_STOP);
    assert_int_equal(g[0].stop_index, 1);
    assert_int_equal(g[0].n_tokens, 2);
    assert_string_equal(g[0].text, "abc"); /* cut before "d" */
    assert_int_equal(g[1].finish, ENGINE_FINISH_STOP);
    assert_int_equal(g[1].n_tokens, 3); /* "bcde" completes with "ef" */
    assert_string_equal(g[1].text, "abcd"); /* streamed text is never taken back */
    assert_int_equal(g[2].finish, ENGINE_FINISH_STOP);
    assert_int_equal(g[2].n_tokens, 7);
    assert_string_equal(g[2].text, "abcdefghijab");
    harness_stop(&h);
    for (int i = 0; i < 3; i++)
        free(reqs[i]);
}

static void test_cancel_refuse_shutdown(void **state)
{
    (void)state;
    harness h;
    harness_start(&h, fake_exec(), small_sched(), NULL);
    engine_req *refused = new_req(1, 600, 4); /* prompt > max_model_len 512 */
    engine_req *cancelled = new_req(2, 8, 400);
    engine_req *reqs[] = {refused, cancelled};
    got g[2];
    memset(g, 0, sizeof g);
    engine_submit(h.e, refused);
    engine_submit(h.e, cancelled);
    engine_cancel(h.e, cancelled);
    drain(&h, reqs, g, 2);
    assert_int_equal(g[0].finish, ENGINE_FINISH_ERROR);
    assert_non_null(strstr(refused->error, "max_model_len"));
    assert_int_equal(g[1].finish, ENGINE_FINISH_ABORT);
    assert_true(g[1].n_tokens < 400);
    /* Gauges come back to 0 once idle. */
    assert_int_equal(h.last_running, 0);
    assert_int_equal(h.last_kv_used, 0);

    /* Shutdown aborts what runs, and answers what comes after. Steps of 1 ms: 500 tokens
     * take half a second, so the request is still running when shutdown comes (with steps
     * that take no time it could finish first on a busy machine: 2 runs in 100 did). */
    atomic_store(&fake_step_ns, 1000000);
    engine_req *running = new_req(3, 8, 1 << 20);
    running->max_tokens = 500;
    engine_req *after = new_req(4, 8, 5);
    engine_req *reqs2[] = {running, after};
    got g2[2];
    memset(g2, 0, sizeof g2);
    engine_submit(h.e, running);
    engine_shutdown(h.e);
    engine_submit(h.e, after);
    drain(&h, reqs2, g2, 2);
    assert_int_equal(g2[0].finish, ENGINE_FINISH_ABORT);
    assert_int_equal(g2[1].finish, ENGINE_FINISH_ABORT);
    assert_int_equal(g2[1].n_tokens, 0);
    atomic_store(&fake_step_ns, 0);
    harness_stop(&h);
    free(refused);
    free(cancelled);
    free(running);
    free(after);
}

static void test_many_and_step_log(void **state)
{
    (void)state;
    FILE *log = tmpfile();
    harness h;
    sched_config sc = small_sched();
    sc.max_num_seqs = 8; /* most wait their turn */
    harness_start(&h, fake_exec(), sc, log);
    enum { N = 100 };
    engine_req *reqs[N];
    got g[N];
    memset(g, 0, sizeof g);
    for (int i = 0; i < N; i++) {
        reqs[i] = new_req(i, 1 + i % 40, 1 + i % 23);
        engine_submit(h.e, reqs[i]);
    }
    drain(&h, reqs, g, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(g[i].finish, ENGINE_FINISH_LENGTH);
        assert_int_equal(g[i].n_tokens, 1 + i % 23);
    }
    int64_t steps = h.steps;
    harness_stop(&h); /* flushes the log */
    rewind(log);
    char line[256];
    assert_non_null(fgets(line, sizeof line, log));
    assert_string_equal(line,
                        "step,t_start_ns,t_end_ns,decode_tokens,prefill_tokens,n_requests,"
                        "modeled_ns,late_ns\n");
    int64_t rows = 0, last_end = 0;
    while (fgets(line, sizeof line, log)) {
        long long step, t0, t1, modeled, late;
        int dec, pre, n;
        assert_int_equal(sscanf(line, "%lld,%lld,%lld,%d,%d,%d,%lld,%lld", &step, &t0, &t1,
                                &dec, &pre, &n, &modeled, &late),
                         8);
        assert_int_equal(late, 0); /* this test's executor is not paced */
        assert_int_equal(step, rows);
        assert_true(t1 >= t0 && t0 >= last_end - 1000000);
        assert_true(dec + pre <= 64 && n <= 8);
        assert_int_equal(modeled, 1000);
        last_end = t1;
        rows++;
    }
    assert_int_equal(rows, steps);
    fclose(log);
    for (int i = 0; i < N; i++)
        free(reqs[i]);
}

/* The emulated H100: each step lasts its modeled time, and the schedule does not drift. */
/* The median of 60 values (sorts them). */
static int64_t median_of_60(int64_t *v)
{
    for (int i = 1; i < 60; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            int64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[30];
}

static void test_emulate_timing(void **state)
{
    (void)state;
    char err[ERR_LEN] = "";
    cost_gpu gpu;
    cost_arch arch;
    assert_int_equal(cost_gpu_find("h100-sxm", &gpu, err), 0);
    assert_int_equal(cost_arch_find("llama-3.1-8b", &arch, err), 0);
    cost_params cost;
    cost_params_init(&cost, &gpu, &arch);
    exec *x = exec_emulate_create(&cost, err);
    assert_non_null(x);
    assert_true(x->paced);
    FILE *log = tmpfile();
    harness h;
    sched_config sc = small_sched();
    sc.max_num_batched_tokens = 4096;
    sc.max_model_len = 8192;
    harness_start(&h, x, sc, log);
    engine_req *r = new_req(1, 2000, 60);
    r->seq.ignore_eos = true;
    engine_req *reqs[] = {r};
    got g[1];
    memset(g, 0, sizeof g);
    engine_submit(h.e, r);
    drain(&h, reqs, g, 1);
    harness_stop(&h);
    rewind(log);
    char line[256];
    assert_non_null(fgets(line, sizeof line, log));
    int64_t prev_deadline = -1, sum_modeled = 0, rows = 0, restarts = 0;
    int64_t late[64], unexplained[64];
    while (fgets(line, sizeof line, log)) {
        long long step, t0, t1, modeled, recorded;
        int dec, pre, n;
        assert_int_equal(sscanf(line, "%lld,%lld,%lld,%d,%d,%d,%lld,%lld", &step, &t0, &t1,
                                &dec, &pre, &n, &modeled, &recorded),
                         8);
        assert_true(rows < 64);
        /* Never early. */
        assert_true(t1 - t0 >= modeled);
        late[rows] = t1 - t0 - modeled;
        /* The engine's record of its late wake-up (late_ns) accounts for the step's excess:
         * the executor read the clock on waking, the engine a moment later. */
        assert_true(recorded >= 0 && recorded <= late[rows]);
        unexplained[rows] = late[rows] - recorded;
        /* No drift: each step starts exactly at the previous one's deadline, unless the
         * engine fell more than ENGINE_SLIP_NS behind (a busy machine) and restarted. */
        if (prev_deadline >= 0 && t0 != prev_deadline) {
            assert_true(t0 > prev_deadline + ENGINE_SLIP_NS);
            restarts++;
        }
        prev_deadline = t0 + modeled;
        sum_modeled += modeled;
        rows++;
    }
    assert_int_equal(rows, 60); /* one prefill step (samples the first token) + 59 decodes */
    assert_true(restarts <= 3);
    assert_true(sum_modeled > 250 * CLOCK_NS_PER_MS); /* ~59 x 4.5 ms + a 2k-token prefill */
    /* Late by a wake-up: the median well under a millisecond even on a busy machine. */
    assert_true(median_of_60(late) < CLOCK_NS_PER_MS);
    assert_true(median_of_60(unexplained) < 100 * 1000); /* within 0.1 ms */
    fclose(log);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finish_reasons),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_cancel_refuse_shutdown),
        cmocka_unit_test(test_many_and_step_log),
        cmocka_unit_test(test_emulate_timing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
