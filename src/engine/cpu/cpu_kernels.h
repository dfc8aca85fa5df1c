/* cpu_kernels — the arithmetic of one forward pass, each as a ten-line reference loop next
 * to the fast version that the engine runs (tests hold them to each other).
 *
 * Fast versions use AVX-512 when the CPU has it (checked once at run time; the build needs
 * no -march flag) and fall back to the plain loops otherwise. Matrix products go to
 * OpenBLAS SGEMM for many rows (prefill) and to our own kernel for few rows (decode), where
 * SGEMM spends its time packing a weight matrix it then uses a handful of times. */
#ifndef STALLSCOPE_CPU_KERNELS_H
#define STALLSCOPE_CPU_KERNELS_H
#include <stdbool.h>
#include <stdint.h>

#include "engine/cpu/cpu_pool.h"

/* ---- references (one token, llama2.c) ------------------------------------------- */

/* o = x / rms(x) * weight, rms over size elements */
void cpu_rmsnorm(float *o, const float *x, const float *weight, int size, float eps);
/* in place, numerically stable */
void cpu_softmax(float *x, int size);
/* xout (d,) = W (d, n) @ x (n,), accumulated in double */
void cpu_matmul_naive(float *xout, const float *x, const float *w, int n, int d);
/* rotate each head_dim-sized head of vec by the angles of position pos (pairs 2i, 2i+1) */
void cpu_rope_naive(float *vec, int n_heads, int head_dim, int pos, double theta);
/* out[i] = silu(gate[i]) * up[i] */
void cpu_swiglu(float *out, const float *gate, const float *up, int n);
/* index of the largest value; the lowest index among equals */
int cpu_argmax(const float *x, int n);

/* ---- batched, fast ------------------------------------------------------------- */

/* Y (m, n; row stride ldy) = X (m, k; row stride ldx) @ W^T, W (n, k) row-major;
 * accumulate: Y += instead of Y =. Spread over the pool's threads. */
void cpu_gemm(cpu_pool *pool, float *y, int ldy, const float *x, int ldx, const float *w,
              int m, int n, int k, bool accumulate);
/* The same product as a plain triple loop in double (the reference of cpu_gemm). */
void cpu_gemm_naive(float *y, int ldy, const float *x, int ldx, const float *w, int m, int n,
                    int k, bool accumulate);
/* Rows below this use the small-batch kernel; from it on, OpenBLAS. */
#define CPU_GEMM_SMALL_M 128

/* The widest instruction set the dispatch may use. The environment variable
 * STALLSCOPE_CPU_ISA caps it ("portable": plain C only; "avx2": AVX2 + FMA, no AVX-512;
 * unset or "native": what the CPU has), so the slower paths can be tested and measured on a
 * CPU that has the faster ones. Read once. */
typedef enum cpu_isa { CPU_ISA_PORTABLE, CPU_ISA_AVX2, CPU_ISA_AVX512 } cpu_isa;
cpu_isa cpu_isa_cap(void);

/* Fast-path control for tests and benchmarks: whether this CPU has AVX-512 (F, DQ) and the
 * cap allows it, and whether the kernels use it (default: when available). */
bool cpu_simd_available(void);
void cpu_simd_enable(bool on);
bool cpu_simd_enabled(void);
/* false after cpu_simd_enable(false): the AVX2 paths (cpu_attn_tile_avx2) stand down too. */
bool cpu_simd_allowed(void);

/* The small-batch kernel on its own (rows [n0, n1) of W), for tests: same contract as
 * cpu_gemm. Requires cpu_simd_available(). */
void cpu_gemm_small_avx512(float *y, int ldy, const float *x, int ldx, const float *w, int m,
                           int n0, int n1, int k, bool accumulate);

/* cpu_swiglu with a vector exp (AVX-512 when enabled, else cpu_swiglu). */
void cpu_swiglu_fast(float *out, const float *gate, const float *up, int n);
void cpu_swiglu_avx512(float *out, const float *gate, const float *up, int n);

/* Sampling helpers: the largest value; x[i] = exp((x[i] - max) * inv_temperature) in place,
 * with the sum of each 256-element chunk in chunk_sums (ceil(n / 256) of them); returns the
 * total. */
float cpu_max_avx512(const float *x, int n);
double cpu_exp_weights_avx512(float *x, int n, float max, float inv_temperature,
                              double *chunk_sums);
#define CPU_SAMPLE_CHUNK 256

/* exp2 on AVX-512 lanes as the attention kernel computes it (relative error < 2e-7),
 * exposed for tests: out[i] = 2^in[i] for n values. */
void cpu_exp2_avx512(float *out, const float *in, int n);

#endif
