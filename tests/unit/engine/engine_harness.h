/* engine_harness — the engine loop on its thread as its tests drive it (test_engine,
 * test_exec_emulate): a scripted executor, and the consumer side (start, poll until every
 * request has its final event, stop). Include after <cmocka.h>. */
#ifndef STALLSCOPE_TEST_ENGINE_HARNESS_H
#define STALLSCOPE_TEST_ENGINE_HARNESS_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/err.h"
#include "engine/engine.h"
#include "engine/exec.h"
#include "engine/vocab.h"

/* ---- a scripted executor: token at position p is p % 5 ("ab", "cd", "ef", "gh", "ij");
 * EOS (id 99) at position seq->seed - 1 when seed > 0, even with ignore_eos (so the
 * engine's own rules are what the tests see). Not paced: steps take no time. */

#define FAKE_EOS 99
static const char *fake_words[] = {"ab", "cd", "ef", "gh", "ij"};
/* A test that must catch a request still running sets this: each step then lasts this long. */
static atomic_llong fake_step_ns;

static inline int fake_step(exec *x, const sched_batch *batch, const exec_seq *const *seqs,
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

static inline const char *fake_text(const exec *x, int32_t token, size_t *len)
{
    (void)x;
    const char *t = token >= 0 && token < 5 ? fake_words[token] : "";
    *len = strlen(t);
    return t;
}

static inline bool fake_is_eos(const exec *x, int32_t token)
{
    (void)x;
    return token == FAKE_EOS;
}

static inline int64_t fake_tokenize(const exec *x, const char *t, size_t n, int32_t *ids, int64_t m)
{
    (void)x, (void)ids, (void)m;
    return vocab_tokenize(t, n, NULL, 0, 0);
}

static inline void fake_destroy(exec *x)
{
    free(x);
}

static inline exec *fake_exec(void)
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

static inline void on_notify(void *arg)
{
    harness *h = arg;
    pthread_mutex_lock(&h->lock);
    h->notified++;
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->lock);
}

static inline sched_config small_sched(void)
{
    return (sched_config){.policy = SCHED_CHUNKED, .max_num_batched_tokens = 64,
                          .max_num_seqs = 64, .max_model_len = 512, .block_size = 16,
                          .kv_blocks = 4096};
}

/* With its step log and its sched log (either NULL). */
static inline void harness_start_logs(harness *h, exec *x, sched_config sc, FILE *log,
                                      FILE *sched_log)
{
    /* SCHED_FIFO where allowed, as the server asks: precise wake-ups on a busy machine. */
    const bool realtime = x->paced;
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    engine_config cfg = {.sched = sc, .executor = x, .step_log = log, .sched_log = sched_log,
                         .notify = on_notify, .notify_arg = h, .realtime = realtime};
    char err[ERR_LEN] = "";
    h->e = engine_create(&cfg, err);
    if (!h->e)
        fail_msg("engine_create: %s", err);
    assert_int_equal(engine_start(h->e, err), 0);
}

static inline void harness_start(harness *h, exec *x, sched_config sc, FILE *log)
{
    harness_start_logs(h, x, sc, log, NULL);
}

static inline void harness_stop(harness *h)
{
    engine_free(h->e);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
}

/* Poll until every request in reqs has its final event (at most 10 s). */
static inline void drain(harness *h, engine_req **reqs, got *out, int n)
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

static inline engine_req *new_req(int64_t id, int prompt, int max_tokens)
{
    engine_req *r = calloc(1, sizeof *r);
    r->id = id;
    r->prompt_tokens = prompt;
    r->max_tokens = max_tokens;
    return r;
}

#endif
