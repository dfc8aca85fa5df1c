/* cpu_kernels — the arithmetic of one forward pass, each as a ten-line reference loop next
 * to the fast version that the engine runs (tests hold them to each other).
 *
 * Fast versions come in two instruction sets, AVX-512 (cpu_avx512.c) and AVX2 + FMA
 * (cpu_avx2.c), compiled by function attribute (the build needs no -march flag); one binary
 * runs the widest the CPU has (cpu_isa_active, checked once at run time) and the plain loops
 * where it has neither. Matrix products go to
 * OpenBLAS SGEMM for many rows (prefill) and to our own kernel for few rows (decode), where
 * SGEMM spends its time packing a weight matrix it then uses a handful of times. */
#ifndef STALLSCOPE_CPU_KERNELS_H
#define STALLSCOPE_CPU_KERNELS_H
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/cpu/cpu_isa_kernels.h"
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
/* rotate each head_dim-sized head of vec by a row of the RoPE table: pair i by cos_sin[2i]
 * (cosine) and cos_sin[2i + 1] (sine) */
void cpu_rope_table(float *vec, int n_heads, int head_dim, const float *cos_sin);
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
/* Rows below this use the small-batch kernel; from it on, OpenBLAS. A decode step of 256
 * sequences is ours: OpenBLAS packs X and zeroes Y (beta 0) first, a fifth of its time on a
 * 256-row product against the 32,000-row LM head, where our kernel streams W once and
 * writes Y directly; a prefill is OpenBLAS's, its packing paid back over thousands of rows. */
#define CPU_GEMM_SMALL_M 512

/* W in panels: W's rows (Y's columns) in groups of CPU_PANEL, each group its k columns one
 * after the other, CPU_PANEL floats each ([ceil(n / 16)][k][16], the last group padded with
 * zeros; CPU_PANEL and CPU_PANEL_ROWS are in cpu_isa_kernels.h). With AVX2 or AVX-512,
 * products of CPU_GEMM_PANEL_M to CPU_GEMM_SMALL_M - 1 rows read W so: a step of k loads
 * two vectors of W (32 columns on AVX-512, 16 on AVX2) and broadcasts one value of X for
 * each of up to CPU_PANEL_ROWS rows (6 on AVX2), with no horizontal sums, where the small-batch kernel takes a dot product per output and sums
 * it across the vector. Fewer rows than CPU_GEMM_PANEL_M are bound by reading W, which the
 * small-batch kernel overlaps better. */
#define CPU_GEMM_PANEL_M 16
/* Floats of W (n, k) in panels. */
size_t cpu_panels_floats(int n, int k);
/* panels (cpu_panels_floats(n, k)) = W (n, k) row-major, in panels. */
void cpu_pack_panels(float *panels, const float *w, int n, int k);
/* Floats of the scratch cpu_gemm_panels takes for X (m, k): its rows in groups of
 * CPU_PANEL_ROWS, each group's k columns one after the other. */
size_t cpu_gemm_xpack_floats(int m, int k);
/* cpu_gemm, reading W from its panels (or NULL) where a kernel on panels applies; xpack holds
 * cpu_gemm_xpack_floats(m, k) floats for X rearranged. */
void cpu_gemm_panels(cpu_pool *pool, float *y, int ldy, const float *x, int ldx, const float *w,
                     const float *panels, int m, int n, int k, bool accumulate, float *xpack);
/* Work on rows [r0, r1) of a step (an RMSNorm, a SwiGLU in place, RoPE); thread: the pool
 * thread's index. */
typedef void (*cpu_rows_fn)(void *arg, int r0, int r1, int thread);
/* fn over rows [0, m) as one pool section: tasks of at most 64 rows, fewer in a small step so
 * that every thread gets some (a decode step's 32 rows in one task left the other thread idle
 * through it), never fewer than 8 (fewer are not worth waking a thread for). */
void cpu_rows_run(cpu_pool *pool, int m, cpu_rows_fn fn, void *arg);
/* cpu_gemm_panels with X's rows made by prep first (an RMSNorm into X, a SwiGLU in place).
 * Where the kernel on panels applies, each task makes a group's rows and rearranges them at
 * once, while they are in its cache: no pool section of their own, and no pass over X by one
 * thread after another wrote it. Else prep runs over all rows first (cpu_rows_run). */
void cpu_gemm_panels_prep(cpu_pool *pool, float *y, int ldy, const float *x, int ldx,
                          const float *w, const float *panels, int m, int n, int k,
                          bool accumulate, float *xpack, cpu_rows_fn prep, void *prep_arg);

/* ---- dispatch ------------------------------------------------------------------ */

/* The instruction sets of the fast paths, narrowest first. The environment variable
 * STALLSCOPE_CPU_ISA caps what the dispatch may use ("portable": plain C only; "avx2": AVX2
 * + FMA, no AVX-512; unset or "native": what the CPU has), so the slower paths can be
 * tested and measured on a CPU that has the faster ones. Read once. */
typedef enum cpu_isa { CPU_ISA_PORTABLE, CPU_ISA_AVX2, CPU_ISA_AVX512 } cpu_isa;
cpu_isa cpu_isa_cap(void);
/* "portable", "avx2", "avx512" */
const char *cpu_isa_name(cpu_isa isa);
/* What the kernels run: the widest instruction set this CPU has and the cap allows, unless
 * cpu_isa_set chose a narrower one. */
cpu_isa cpu_isa_active(void);
/* Run at most `want` from now on (tests and benchmarks; the narrower of want and what the
 * CPU has and the cap allows). Returns what is now active. */
cpu_isa cpu_isa_set(cpu_isa want);
/* The dispatch decision in one line, with OpenBLAS's own choice (it dispatches by itself;
 * OPENBLAS_CORETYPE sets it), e.g. "cpu kernels: avx2 (CPU: AVX2+FMA+F16C yes, AVX-512 F+DQ no;
 * STALLSCOPE_CPU_ISA unset); OpenBLAS Haswell". */
void cpu_isa_describe(char *out, size_t size);

/* The AVX-512 switch as earlier versions named it: whether this CPU has AVX-512 (F, DQ)
 * and the cap allows it; cpu_simd_enable(true) is cpu_isa_set(CPU_ISA_AVX512),
 * cpu_simd_enable(false) cpu_isa_set(CPU_ISA_PORTABLE) (no vector path at all);
 * cpu_simd_enabled(): AVX-512 is active. */
bool cpu_simd_available(void);
/* Whether this CPU has AVX2 + FMA and the cap allows them. */
bool cpu_avx2_available(void);
void cpu_simd_enable(bool on);
bool cpu_simd_enabled(void);

/* ---- the fast kernels, dispatched ------------------------------------------------ */

/* cpu_swiglu, cpu_rmsnorm and cpu_rope_table with the active instruction set. */
void cpu_swiglu_fast(float *out, const float *gate, const float *up, int n);
void cpu_rmsnorm_fast(float *o, const float *x, const float *weight, int size, float eps);
void cpu_rope_fast(float *vec, int n_heads, int head_dim, const float *cos_sin);
/* A sum over n floats as fast as memory delivers them (the bandwidth probe). */
float cpu_stream_sum(const float *x, size_t n);
/* out[i] = cpu_half_from_float(in[i]) (cpu_half.h), with F16C where the kernels run AVX2 or
 * AVX-512: the KV cache's writes. */
void cpu_halves_from_floats(cpu_half *out, const float *in, int n);

#endif
