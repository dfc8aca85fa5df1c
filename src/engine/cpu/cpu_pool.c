#include "engine/cpu/cpu_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/proc.h"

/* Spin iterations before a worker sleeps: about 100 us with a pause per iteration. */
#define CPU_POOL_SPIN 4096

struct cpu_pool {
    int n_threads;
    int self; /* the caller's thread index (0, or a solo pool's) */
    pthread_t *workers; /* n_threads - 1 */
    int n_started;

    /* the current section, published by bumping generation: fn, or ahead_fn */
    cpu_pool_fn fn;
    cpu_pool_ahead_fn ahead_fn;
    void *arg;
    int n_tasks;
    atomic_int next_task;
    atomic_int busy_workers; /* workers still inside the current section */
    atomic_uint generation;
    atomic_bool stop;

    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_int sleepers;
};

typedef struct worker_arg {
    cpu_pool *pool;
    int index;
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int claim_task(cpu_pool *p)
{
    return atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
}

static void run_tasks(cpu_pool *p, int thread)
{
    if (p->ahead_fn) {
        int task = claim_task(p);
        while (task < p->n_tasks) {
            /* The next one claimed now only while each thread can still get a task: with as
             * few tasks as threads, one thread claiming two would leave another idle. */
            int next = -1;
            if (atomic_load_explicit(&p->next_task, memory_order_relaxed) + p->n_threads <=
                p->n_tasks)
                next = claim_task(p);
            p->ahead_fn(p->arg, task, next >= 0 && next < p->n_tasks ? next : -1, thread);
            task = next >= 0 ? next : claim_task(p);
        }
        return;
    }
    for (;;) {
        const int task = claim_task(p);
        if (task >= p->n_tasks)
            return;
        p->fn(p->arg, task, thread);
    }
}

/* Wait until the generation moves past seen (or stop); returns the new generation. */
static unsigned wait_generation(cpu_pool *p, unsigned seen)
{
    for (int i = 0; i < CPU_POOL_SPIN; i++) {
        unsigned g = atomic_load(&p->generation);
        if (g != seen || atomic_load(&p->stop))
            return g;
        cpu_relax();
    }
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add(&p->sleepers, 1);
    unsigned g;
    while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->lock);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->lock);
    return g;
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    cpu_pool *p = wa->pool;
    const int index = wa->index;
    free(wa);
    /* 0, not a fresh load: a section published before this thread got here must not be
     * mistaken for the past. */
    unsigned seen = 0;
    for (;;) {
        seen = wait_generation(p, seen);
        if (atomic_load(&p->stop))
            return NULL;
        run_tasks(p, index);
        atomic_fetch_sub_explicit(&p->busy_workers, 1, memory_order_release);
    }
}

cpu_pool *cpu_pool_create(int n_threads, char *err)
{
    if (n_threads < 1) {
        err_set(err, "thread count %d must be at least 1", n_threads);
        return NULL;
    }
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) {
        err_set(err, "out of memory for a thread pool");
        return NULL;
    }
    p->n_threads = n_threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    if (n_threads == 1)
        return p;
    p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
    if (!p->workers) {
        cpu_pool_free(p);
        err_set(err, "out of memory for %d threads", n_threads);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa)
            *wa = (worker_arg){p, i};
        int rc = wa ? pthread_create(&p->workers[i - 1], NULL, worker_main, wa) : -1;
        if (rc != 0) {
            free(wa);
            err_set(err, "cannot start worker thread %d of %d", i, n_threads);
            cpu_pool_free(p);
            return NULL;
        }
        p->n_started++;
    }
    return p;
}

cpu_pool *cpu_pool_create_solo(int self, char *err)
{
    if (self < 0) {
        err_set(err, "thread index %d must be at least 0", self);
        return NULL;
    }
    cpu_pool *p = cpu_pool_create(1, err);
    if (p)
        p->self = self;
    return p;
}

void cpu_pool_free(cpu_pool *p)
{
    if (!p)
        return;
    if (p->n_started > 0) {
        pthread_mutex_lock(&p->lock);
        atomic_store(&p->stop, true);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; i < p->n_started; i++)
            pthread_join(p->workers[i], NULL);
    }
    free(p->workers);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p);
}

int cpu_pool_threads(const cpu_pool *p)
{
    return p->n_threads;
}

/* Run a section (fn, or ahead_fn): on the caller alone when there are no workers or one
 * task (each task told the one after it as its next); else published to the workers, tasks
 * run on the caller too, and the workers waited for. */
static void run_section(cpu_pool *p, int n_tasks, cpu_pool_fn fn, cpu_pool_ahead_fn ahead_fn,
                        void *arg)
{
    if (n_tasks <= 0)
        return;
    if (p->n_started == 0 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) {
            if (ahead_fn)
                ahead_fn(arg, t, t + 1 < n_tasks ? t + 1 : -1, p->self);
            else
                fn(arg, t, p->self);
        }
        return;
    }
    p->fn = fn;
    p->ahead_fn = ahead_fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&p->busy_workers, p->n_started, memory_order_relaxed);
    /* seq_cst store then load, against the worker's sleepers++ then generation load: one
     * of the two sees the other, so a worker never sleeps through a section. */
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    run_tasks(p, 0);
    /* Spin for the others, then sleep in short naps: a caller of higher priority (a
     * SCHED_FIFO engine thread) spinning forever could keep a worker that shares its core
     * from ever finishing. */
    for (int i = 0; atomic_load_explicit(&p->busy_workers, memory_order_acquire) > 0; i++) {
        if (i < CPU_POOL_SPIN) {
            cpu_relax();
        } else {
            struct timespec nap = {0, 20000};
            nanosleep(&nap, NULL);
        }
    }
}

void cpu_pool_run(cpu_pool *p, int n_tasks, cpu_pool_fn fn, void *arg)
{
    run_section(p, n_tasks, fn, NULL, arg);
}

void cpu_pool_run_ahead(cpu_pool *p, int n_tasks, cpu_pool_ahead_fn fn, void *arg)
{
    run_section(p, n_tasks, NULL, fn, arg);
}

int cpu_pool_default_threads(void)
{
    const int cores = proc_cpus();
    return cores > 1 ? cores - 1 : 1;
}
