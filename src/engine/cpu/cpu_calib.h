/* cpu_calib — what this CPU sustains, measured with the engine's own kernels: the numbers
 * a hardware profile (stallscope calibrate) gives the cost model, and the rooflines the
 * benchmark compares the engine with.
 *
 *   gemm FLOP/s       the engine's product (cpu_gemm_panels: at these rows OpenBLAS SGEMM
 *                     split over the pool) on prefill-sized products: 4096 rows x
 *                     (256 -> 768) and (768 -> 256), 2 m n k FLOPs
 *   attention FLOP/s  the attention kernel on a causal prefill of 4096 tokens, counted as
 *                     the cost model counts it (4 head_dim FLOPs per query-key pair)
 *   bandwidth         streaming read of a 256 MB buffer split over the pool (bytes/s)
 *   block bandwidth   the same buffer read as 1 KB pieces (a KV block of one head at
 *                     head_dim 32) in shuffled order, each piece prefetched CPU_CALIB_AHEAD
 *                     pieces ahead, as a decode step's attention reads a server's arena:
 *                     pieces scattered over the arena (bytes/s)
 *   small-batch GEMM  the same with 32 rows (a decode step's shape): the GEMM on panels
 *                     (plain C: the small-batch loop), FLOP/s
 * Each figure is the best of several repetitions over at least min_seconds. */
#ifndef STALLSCOPE_CPU_CALIB_H
#define STALLSCOPE_CPU_CALIB_H

#include <stddef.h>

#include "engine/cost.h"
#include "engine/fit.h"
#include "engine/cpu/cpu_pool.h"

typedef struct cpu_calib {
    int threads;
    double gemm_flops;
    double attention_flops;
    double mem_bandwidth;
    double small_gemm_flops;
    double block_bandwidth;
} cpu_calib;

/* Pieces ahead that the block-bandwidth probe prefetches (the attention kernels' distance). */
#define CPU_CALIB_AHEAD 3
/* Bytes of one piece of the block-bandwidth probe. */
#define CPU_CALIB_BLOCK_BYTES 1024

/* This CPU's model name from /proc/cpuinfo ("unknown CPU" when it cannot be read). */
void cpu_calib_cpu_name(char *out, size_t size);

int cpu_calib_gemm(cpu_pool *pool, int rows, double min_seconds, double *flops, char *err);
int cpu_calib_attention(cpu_pool *pool, int head_dim, int n_tokens, double min_seconds,
                        double *flops, char *err);
int cpu_calib_bandwidth(cpu_pool *pool, double min_seconds, double *bytes_per_s, char *err);
int cpu_calib_block_bandwidth(cpu_pool *pool, double min_seconds, double *bytes_per_s,
                              char *err);
/* All of the above. */
int cpu_calib_run(cpu_pool *pool, double min_seconds, cpu_calib *out, char *err);

/* The engine's own step times for a model (synthetic weights), the probes of the fitted step
 * model (fit.h): first a decode step for every (batch, mean context) of the grid, its
 * sequences' contexts spread evenly over [context / 4, 7 context / 4] and their blocks
 * interleaved as in a server, each step the forward pass and a token drawn at `temperature`
 * for every sequence (as the executor samples; 0: greedy), the median of its steps over
 * min_seconds (at least 6); then a one-shot prefill of each prompt length, the median of 3.
 * The probes run in 3 passes, each pass every probe with a third of its steps, so a slow
 * spell of a shared machine touches every probe a little rather than a few wholly. The KV
 * arena (sized to the probes) and the buffers are touched first (a warmed-up server). out
 * gets n_batches x n_contexts + n_prompts probes in that order. 0, or -1 with err. */
int cpu_calib_steps(cpu_pool *pool, const cost_arch *arch, const int *batches, int n_batches,
                    const int *contexts, int n_contexts, const int *prompts, int n_prompts,
                    double temperature, double min_seconds, fit_probe *out, char *err);

#endif
