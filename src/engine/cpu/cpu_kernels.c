#include "engine/cpu/cpu_kernels.h"

#include <cblas.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- references ------------------------------------------------------------------ */

void cpu_rmsnorm(float *o, const float *x, const float *weight, int size, float eps)
{
    double ss = 0;
    for (int j = 0; j < size; j++)
        ss += (double)x[j] * x[j];
    const float inv_rms = cpu_inv_rms(ss, size, eps);
    for (int j = 0; j < size; j++)
        o[j] = weight[j] * (inv_rms * x[j]);
}

void cpu_softmax(float *x, int size)
{
    float max_val = x[0];
    for (int i = 1; i < size; i++)
        max_val = x[i] > max_val ? x[i] : max_val;
    double sum = 0;
    for (int i = 0; i < size; i++) {
        x[i] = expf(x[i] - max_val);
        sum += x[i];
    }
    for (int i = 0; i < size; i++)
        x[i] = (float)(x[i] / sum);
}

void cpu_matmul_naive(float *xout, const float *x, const float *w, int n, int d)
{
    for (int i = 0; i < d; i++) {
        double val = 0;
        for (int j = 0; j < n; j++)
            val += (double)w[(size_t)i * n + j] * x[j];
        xout[i] = (float)val;
    }
}

void cpu_rope_naive(float *vec, int n_heads, int head_dim, int pos, double theta)
{
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < head_dim; i += 2) {
            const double angle = pos * pow(theta, -(double)i / head_dim);
            cpu_rotate_pair(vec + h * head_dim + i, (float)cos(angle), (float)sin(angle));
        }
}

void cpu_swiglu(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

int cpu_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

void cpu_gemm_naive(float *y, int ldy, const float *x, int ldx, const float *w, int m, int n,
                    int k, bool accumulate)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double val = accumulate ? y[(size_t)i * ldy + j] : 0;
            for (int p = 0; p < k; p++)
                val += (double)x[(size_t)i * ldx + p] * w[(size_t)j * k + p];
            y[(size_t)i * ldy + j] = (float)val;
        }
}

/* ---- dispatch ------------------------------------------------------------------ */

static atomic_int isa_active = -1; /* -1: not decided yet */

cpu_isa cpu_isa_cap(void)
{
    static atomic_int cap = -1;
    int c = atomic_load(&cap);
    if (c < 0) {
        const char *env = getenv("STALLSCOPE_CPU_ISA");
        c = CPU_ISA_AVX512;
        if (env && strcmp(env, "portable") == 0)
            c = CPU_ISA_PORTABLE;
        else if (env && strcmp(env, "avx2") == 0)
            c = CPU_ISA_AVX2;
        atomic_store(&cap, c);
    }
    return (cpu_isa)c;
}

const char *cpu_isa_name(cpu_isa isa)
{
    return isa == CPU_ISA_AVX512 ? "avx512" : isa == CPU_ISA_AVX2 ? "avx2" : "portable";
}

/* What the CPU has, the cap not applied. */
static bool has_avx512(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#else
    return false;
#endif
}

/* AVX2, FMA and F16C (the KV cache's halves widened by vcvtph2ps; every AVX2 CPU has it,
 * and the check costs nothing). F16C from CPUID leaf 1, which every compiler reads alike. */
static bool has_avx2(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    unsigned eax, ebx, ecx = 0, edx;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
    return false;
#endif
}

static cpu_isa widest(void)
{
    const cpu_isa cap = cpu_isa_cap();
    if (cap >= CPU_ISA_AVX512 && has_avx512() && has_avx2())
        return CPU_ISA_AVX512;
    if (cap >= CPU_ISA_AVX2 && has_avx2())
        return CPU_ISA_AVX2;
    return CPU_ISA_PORTABLE;
}

cpu_isa cpu_isa_active(void)
{
    int a = atomic_load(&isa_active);
    if (a < 0) {
        a = widest();
        atomic_store(&isa_active, a);
    }
    return (cpu_isa)a;
}

cpu_isa cpu_isa_set(cpu_isa want)
{
    const cpu_isa best = widest();
    const cpu_isa a = want < best ? want : best;
    atomic_store(&isa_active, a);
    return a;
}

void cpu_isa_describe(char *out, size_t size)
{
    const char *env = getenv("STALLSCOPE_CPU_ISA");
    snprintf(out, size,
             "cpu kernels: %s (CPU: AVX2+FMA+F16C %s, AVX-512 F+DQ %s; STALLSCOPE_CPU_ISA %s%s); "
             "OpenBLAS %s",
             cpu_isa_name(cpu_isa_active()), has_avx2() ? "yes" : "no", has_avx512() ? "yes" : "no",
             env ? "=" : "unset", env ? env : "", openblas_get_corename());
}

bool cpu_avx2_available(void)
{
    return cpu_isa_cap() >= CPU_ISA_AVX2 && has_avx2();
}

bool cpu_simd_available(void)
{
    return cpu_isa_cap() >= CPU_ISA_AVX512 && has_avx512();
}

void cpu_simd_enable(bool on)
{
    cpu_isa_set(on ? CPU_ISA_AVX512 : CPU_ISA_PORTABLE);
}

bool cpu_simd_enabled(void)
{
    return cpu_isa_active() == CPU_ISA_AVX512;
}

/* ---- element-wise, dispatched ------------------------------------------------------ */

void cpu_rope_table(float *vec, int n_heads, int head_dim, const float *cos_sin)
{
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < head_dim; i += 2)
            cpu_rotate_pair(vec + h * head_dim + i, cos_sin[i], cos_sin[i + 1]);
}

void cpu_swiglu_fast(float *out, const float *gate, const float *up, int n)
{
    switch (cpu_isa_active()) {
    case CPU_ISA_AVX512: cpu_swiglu_avx512(out, gate, up, n); break;
    case CPU_ISA_AVX2: cpu_swiglu_avx2(out, gate, up, n); break;
    default: cpu_swiglu(out, gate, up, n); break;
    }
}

void cpu_rmsnorm_fast(float *o, const float *x, const float *weight, int size, float eps)
{
    switch (cpu_isa_active()) {
    case CPU_ISA_AVX512: cpu_rmsnorm_avx512(o, x, weight, size, eps); break;
    case CPU_ISA_AVX2: cpu_rmsnorm_avx2(o, x, weight, size, eps); break;
    default: cpu_rmsnorm(o, x, weight, size, eps); break;
    }
}

void cpu_rope_fast(float *vec, int n_heads, int head_dim, const float *cos_sin)
{
    switch (cpu_isa_active()) {
    case CPU_ISA_AVX512: cpu_rope_avx512(vec, n_heads, head_dim, cos_sin); break;
    case CPU_ISA_AVX2: cpu_rope_avx2(vec, n_heads, head_dim, cos_sin); break;
    default: cpu_rope_table(vec, n_heads, head_dim, cos_sin); break;
    }
}

void cpu_halves_from_floats(cpu_half *out, const float *in, int n)
{
    if (cpu_isa_active() >= CPU_ISA_AVX2) {
        cpu_halves_from_floats_avx2(out, in, n);
        return;
    }
    for (int i = 0; i < n; i++)
        out[i] = cpu_half_from_float(in[i]);
}

float cpu_stream_sum(const float *x, size_t n)
{
    switch (cpu_isa_active()) {
    case CPU_ISA_AVX512: return cpu_stream_sum_avx512(x, n);
    case CPU_ISA_AVX2: return cpu_stream_sum_avx2(x, n);
    default: break;
    }
    float lanes[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++)
            lanes[j] += x[i + j];
    float sum = 0;
    for (int j = 0; j < 16; j++)
        sum += lanes[j];
    for (; i < n; i++)
        sum += x[i];
    return sum;
}

/* ---- GEMM ------------------------------------------------------------------------ */

typedef struct gemm_job {
    float *y;
    const float *x, *w;
    int ldy, ldx, m, n, k;
    bool accumulate;
    cpu_isa small; /* our kernel for this instruction set; CPU_ISA_PORTABLE: SGEMM */
    bool split_m;  /* tasks are row ranges of X; else row ranges of W */
    int per_task;  /* rows of X or of W per task */
    int span;      /* m or n: what per_task divides */
} gemm_job;

/* Task `task`'s share [*lo, *hi) of span items handed out per_task at a time; false when it
 * is empty (the last tasks of a span that does not divide evenly). */
static bool task_range(int task, int per_task, int span, int *lo, int *hi)
{
    *lo = task * per_task;
    *hi = *lo + per_task < span ? *lo + per_task : span;
    return *lo < *hi;
}

static void gemm_task(void *arg, int task, int thread)
{
    (void)thread;
    const gemm_job *g = arg;
    int lo, hi;
    if (!task_range(task, g->per_task, g->span, &lo, &hi))
        return;
    const float beta = g->accumulate ? 1.0f : 0.0f;
    if (g->small == CPU_ISA_AVX512) {
        cpu_gemm_small_avx512(g->y, g->ldy, g->x, g->ldx, g->w, g->m, lo, hi, g->k, g->accumulate);
    } else if (g->small == CPU_ISA_AVX2) {
        cpu_gemm_small_avx2(g->y, g->ldy, g->x, g->ldx, g->w, g->m, lo, hi, g->k, g->accumulate);
    } else if (g->split_m) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, hi - lo, g->n, g->k, 1.0f,
                    g->x + (size_t)lo * g->ldx, g->ldx, g->w, g->k, beta,
                    g->y + (size_t)lo * g->ldy, g->ldy);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->m, hi - lo, g->k, 1.0f, g->x,
                    g->ldx, g->w + (size_t)lo * g->k, g->k, beta, g->y + lo, g->ldy);
    }
}

static int ceil_div(int a, int b)
{
    return (a + b - 1) / b;
}

void cpu_gemm(cpu_pool *pool, float *y, int ldy, const float *x, int ldx, const float *w,
              int m, int n, int k, bool accumulate)
{
    if (m <= 0 || n <= 0)
        return;
    const int threads = cpu_pool_threads(pool);
    gemm_job g = {y, x, w, ldy, ldx, m, n, k, accumulate, CPU_ISA_PORTABLE, false, 0, 0};
    g.small = m < CPU_GEMM_SMALL_M ? cpu_isa_active() : CPU_ISA_PORTABLE;
    if (g.small) {
        /* W rows in multiples of 16 (the kernel's block), about four tasks a thread so
         * the dynamic hand-out evens out. */
        g.per_task = ceil_div(ceil_div(n, threads * 4), 16) * 16;
        g.span = n;
    } else if (m >= 64 * threads) {
        g.split_m = true;
        g.per_task = ceil_div(m, threads);
        g.span = m;
    } else {
        g.per_task = ceil_div(ceil_div(n, threads), 16) * 16;
        g.span = n;
    }
    cpu_pool_run(pool, ceil_div(g.span, g.per_task), gemm_task, &g);
}

size_t cpu_panels_floats(int n, int k)
{
    return (size_t)ceil_div(n, CPU_PANEL) * CPU_PANEL * (size_t)k;
}

void cpu_pack_panels(float *panels, const float *w, int n, int k)
{
    for (int n0 = 0; n0 < n; n0 += CPU_PANEL) {
        float *panel = panels + (size_t)n0 * k;
        for (int p = 0; p < k; p++)
            for (int j = 0; j < CPU_PANEL; j++)
                panel[(size_t)p * CPU_PANEL + j] = n0 + j < n ? w[(size_t)(n0 + j) * k + p] : 0.0f;
    }
}

size_t cpu_gemm_xpack_floats(int m, int k)
{
    return (size_t)m * (size_t)k;
}

typedef struct panels_job {
    float *y, *xpack;
    const float *x, *panels;
    int ldy, ldx, m, n, k;
    bool accumulate;
    int per_task; /* groups of X to rearrange, or columns of Y to compute */
    cpu_rows_fn prep; /* X's rows made first (or NULL) */
    void *prep_arg;
} panels_job;

/* X's groups of CPU_PANEL_ROWS rows, each [k][rows] (AVX2 and up: the only instruction sets
 * cpu_gemm_panels runs its kernels on). */
static void xpack_task(void *arg, int task, int thread)
{
    const panels_job *g = arg;
    int lo, hi;
    if (!task_range(task, g->per_task, ceil_div(g->m, CPU_PANEL_ROWS), &lo, &hi))
        return;
    for (int gi = lo; gi < hi; gi++) {
        const int r0 = gi * CPU_PANEL_ROWS;
        const int rows = g->m - r0 < CPU_PANEL_ROWS ? g->m - r0 : CPU_PANEL_ROWS;
        if (g->prep)
            g->prep(g->prep_arg, r0, r0 + rows, thread);
        cpu_xpack_group_avx2(g->xpack + (size_t)r0 * g->k, g->x + (size_t)r0 * g->ldx, g->ldx,
                             rows, g->k);
    }
}

/* Columns [lo, hi) of the task; next: the task this thread computes after it, whose first
 * two panels its last two's tiles prefetch (a task of its own starts cold otherwise). */
static void panels_task(void *arg, int task, int next, int thread)
{
    (void)thread;
    const panels_job *g = arg;
    int lo, hi, after0 = 0, after1 = 0;
    if (!task_range(task, g->per_task, g->n, &lo, &hi))
        return;
    if (next >= 0 && !task_range(next, g->per_task, g->n, &after0, &after1))
        after0 = after1 = 0;
    if (cpu_isa_active() == CPU_ISA_AVX512)
        cpu_gemm_panels_avx512(g->y, g->ldy, g->xpack, g->panels, g->m, lo, hi, g->k,
                               g->accumulate, after0, after1);
    else
        cpu_gemm_panels_avx2(g->y, g->ldy, g->xpack, g->panels, g->m, lo, hi, g->k,
                             g->accumulate, after0, after1);
}

/* A row function over a pool section, a task's share of the rows at a time. */
typedef struct rows_job {
    cpu_rows_fn fn;
    void *arg;
    int m, per_task;
} rows_job;

static void rows_task(void *arg, int task, int thread)
{
    const rows_job *r = arg;
    int lo, hi;
    if (task_range(task, r->per_task, r->m, &lo, &hi))
        r->fn(r->arg, lo, hi, thread);
}

/* Rows of a task of cpu_rows_run: at most ROWS_MAX_TASK, at least ROWS_MIN_TASK. */
#define ROWS_MAX_TASK 64
#define ROWS_MIN_TASK 8

void cpu_rows_run(cpu_pool *pool, int m, cpu_rows_fn fn, void *arg)
{
    if (m <= 0)
        return;
    int per_task = ceil_div(m, cpu_pool_threads(pool));
    per_task = per_task > ROWS_MAX_TASK ? ROWS_MAX_TASK : per_task;
    per_task = per_task < ROWS_MIN_TASK ? ROWS_MIN_TASK : per_task;
    rows_job r = {fn, arg, m, per_task};
    cpu_pool_run(pool, ceil_div(m, per_task), rows_task, &r);
}

void cpu_gemm_panels_prep(cpu_pool *pool, float *y, int ldy, const float *x, int ldx,
                          const float *w, const float *panels, int m, int n, int k,
                          bool accumulate, float *xpack, cpu_rows_fn prep, void *prep_arg)
{
    if (!panels || m < CPU_GEMM_PANEL_M || m >= CPU_GEMM_SMALL_M || n <= 0 ||
        cpu_isa_active() == CPU_ISA_PORTABLE) {
        if (prep)
            cpu_rows_run(pool, m, prep, prep_arg);
        cpu_gemm(pool, y, ldy, x, ldx, w, m, n, k, accumulate);
        return;
    }
    const int threads = cpu_pool_threads(pool);
    panels_job g = {y, xpack, x, panels, ldy, ldx, m, n, k, accumulate, 0, prep, prep_arg};
    const int groups = ceil_div(m, CPU_PANEL_ROWS);
    g.per_task = ceil_div(groups, threads);
    cpu_pool_run(pool, ceil_div(groups, g.per_task), xpack_task, &g);
    /* columns in multiples of two panels, about four tasks a thread; each task's first two
     * panels are fetched while the thread's task before it computes (a thread's first task
     * starts cold) */
    g.per_task = ceil_div(ceil_div(n, threads * 4), 2 * CPU_PANEL) * 2 * CPU_PANEL;
    cpu_pool_run_ahead(pool, ceil_div(n, g.per_task), panels_task, &g);
}

void cpu_gemm_panels(cpu_pool *pool, float *y, int ldy, const float *x, int ldx, const float *w,
                     const float *panels, int m, int n, int k, bool accumulate, float *xpack)
{
    cpu_gemm_panels_prep(pool, y, ldy, x, ldx, w, panels, m, n, k, accumulate, xpack, NULL, NULL);
}
