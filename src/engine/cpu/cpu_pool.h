/* cpu_pool — a fixed set of threads that run the tasks of one parallel section.
 *
 * The caller is one of the threads: a pool of n threads starts n - 1 workers, and a pool of
 * 1 runs everything inline on the caller (the default on a 2-core machine: one core for the
 * engine, one for HTTP and the load generator). cpu_pool_run hands out tasks 0..n_tasks-1
 * dynamically (an atomic counter, so uneven tasks balance) and returns when all are done.
 * Between sections the workers spin briefly (a forward pass runs dozens of sections per
 * step, microseconds apart), then sleep on a condition variable, so an idle engine costs no
 * CPU. OpenBLAS is kept single-threaded and called from inside tasks: one pool, no two
 * thread pools fighting over two cores. */
#ifndef STALLSCOPE_CPU_POOL_H
#define STALLSCOPE_CPU_POOL_H

typedef struct cpu_pool cpu_pool;

/* task in [0, n_tasks), thread in [0, n_threads): the thread's index, for scratch space. */
typedef void (*cpu_pool_fn)(void *arg, int task, int thread);

/* n_threads >= 1 (the caller included). NULL with err. */
cpu_pool *cpu_pool_create(int n_threads, char *err);
/* A pool of one thread whose sections run on the caller as thread `self`: for a part of the
 * work that one task of another pool runs alone, with that task's thread index (and so its
 * scratch space). NULL with err. */
cpu_pool *cpu_pool_create_solo(int self, char *err);
void cpu_pool_free(cpu_pool *p);
int cpu_pool_threads(const cpu_pool *p);
/* Run fn(arg, task, thread) for every task; returns when all have returned. Not reentrant:
 * one caller thread, no nested runs. */
void cpu_pool_run(cpu_pool *p, int n_tasks, cpu_pool_fn fn, void *arg);

/* As cpu_pool_fn, and next: the task this thread runs right after this one, already claimed
 * (or -1: none claimed yet), so the task may fetch what next will read while it computes. */
typedef void (*cpu_pool_ahead_fn)(void *arg, int task, int next, int thread);
/* cpu_pool_run where each thread claims its next task before it runs the current one, while
 * at least as many tasks as threads are unclaimed (so that every thread gets one: with two
 * tasks and two threads, each runs one, told no next). A thread holds at most one claimed
 * task more than cpu_pool_run's, so the balance of uneven tasks is as good within one task. */
void cpu_pool_run_ahead(cpu_pool *p, int n_tasks, cpu_pool_ahead_fn fn, void *arg);

/* Threads the engine uses by default: the CPUs this process may run on (proc_cpus) - 1, at
 * least 1. */
int cpu_pool_default_threads(void);

#endif
