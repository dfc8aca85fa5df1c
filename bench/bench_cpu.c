/* bench_cpu — the cpu engine's speed against this machine's measured roofline.
 *
 * Prints, for each thread count: the sustained SGEMM rate, attention-kernel rate and read
 * bandwidths, streaming and in scattered 1 KB blocks (cpu_calib.h), then one-shot prefill of
 * 512, 2,048 and 8,192 tokens (the longest again on an arena whose free list is shuffled, as
 * a server that has run a while leaves it) and decode steps of 1, 32 and 256 sequences at
 * context 512, each with the cost model's FLOPs and bytes (F32) and its roofline:
 * max(FLOPs / SGEMM rate, bytes / bandwidth), and for decode also the serial bound
 * max(FLOPs / SGEMM rate, weight bytes / bandwidth) + KV bytes / bandwidth (an engine that
 * reads the cache between its products, not during them, takes at least that) and the
 * scattered bound, the same with the KV bytes read at the scattered-block bandwidth; their
 * blocks drawn from that arena, each sequence's at once (runs) and grown a block at a time
 * in turn (interleaved) (--decode B alone: a fresh arena, runs); then the decode step of 32
 * sequences 1,000 times back to back (its p50, p99, max and the steps above twice the p50: the
 * engine's own jitter, which a served stream sees as gaps); then llama-bench's pp512
 * and tg128 in its shape (tg128 with sampling); last, the SGEMM rate measured again, to
 * show how far the machine's speed moved under the ratios. The first line says the
 * kernels' dispatch (STALLSCOPE_CPU_ISA=avx2 measures the AVX2 path on an AVX-512 CPU;
 * OPENBLAS_CORETYPE picks OpenBLAS's). Never fails on time.
 *
 *   bench_cpu [--model NAME] [--threads N] [--quick] [--rounds N] [--prefill N | --decode B]
 *             [--steady STEPS] [--no-roofline]
 * Default: model ref-256, threads 1 and every count up to the cores, every figure;
 * --prefill / --decode: that one (a prefill of N tokens, a decode step of B sequences at
 * context 512) repeated, for a profiler; --steady STEPS: the steady-state figure alone over
 * STEPS steps (batch 32, or --decode's); --no-roofline skips the calibration (to time two
 * builds against each other from outside); --rounds N (up to 20): the whole run N times, each
 * round against its own calibration, then each figure's median and range over the rounds
 * (a VM's speed moves between runs minutes apart: one run's ratios are one draw). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/rng.h"
#include "engine/cost.h"
#include "engine/cpu/cpu_calib.h"
#include "engine/cpu/cpu_forward.h"
#include "engine/cpu/cpu_kernels.h"
#include "engine/cpu/cpu_kv.h"
#include "engine/cpu/cpu_sample.h"

#include "median.h"

typedef struct bench {
    cpu_model model;
    cpu_runstate run;
    cpu_kv kv;
    cpu_pool *pool;
    cost_params cost; /* F32, the measured rates */
    double block_bandwidth; /* reads of scattered 1 KB pieces (cpu_calib.h), bytes/s */
} bench;

static void die(const char *what, const char *err)
{
    fprintf(stderr, "bench_cpu: %s: %s\n", what, err);
    exit(1);
}

/* --rounds N: each figure with a ratio or a rate, recorded round by round for the summary
 * (median and range) that follows a thread count's rounds. */
#define MAX_ROUNDS 20
#define MAX_FIGURES 24
typedef struct tally {
    int n_figures;
    char name[MAX_FIGURES][48];
    const char *unit[MAX_FIGURES]; /* printf format of one value */
    double value[MAX_FIGURES][MAX_ROUNDS];
    int n[MAX_FIGURES];
} tally;
static tally rounds;

static void tally_add(const char *unit, double value, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void tally_add(const char *unit, double value, const char *fmt, ...)
{
    char name[48];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int f = 0;
    while (f < rounds.n_figures && strcmp(rounds.name[f], name) != 0)
        f++;
    if (f == MAX_FIGURES)
        return;
    if (f == rounds.n_figures) {
        snprintf(rounds.name[f], sizeof rounds.name[f], "%s", name);
        rounds.unit[f] = unit;
        rounds.n_figures++;
    }
    if (rounds.n[f] < MAX_ROUNDS)
        rounds.value[f][rounds.n[f]++] = value;
}

/* The summary of a thread count's rounds: each figure's median (the mean of the middle two
 * for an even count), its lowest and highest, and the rounds' values in order. */
static void tally_print(int threads, int n_rounds)
{
    printf("\nthreads %d, %d rounds, each against its own calibration: median, range, and "
           "each round's\n",
           threads, n_rounds);
    printf("  %-34s %9s %9s %9s   %s\n", "figure", "median", "lowest", "highest", "rounds");
    for (int f = 0; f < rounds.n_figures; f++) {
        const int n = rounds.n[f];
        double sorted[MAX_ROUNDS];
        memcpy(sorted, rounds.value[f], sizeof sorted[0] * (size_t)n);
        median_sort(sorted, n);
        char cell[3][24];
        const double shown[3] = {median_of_sorted(sorted, n), sorted[0], sorted[n - 1]};
        for (int c = 0; c < 3; c++)
            snprintf(cell[c], sizeof cell[c], rounds.unit[f], shown[c]);
        printf("  %-34s %9s %9s %9s  ", rounds.name[f], cell[0], cell[1], cell[2]);
        for (int r = 0; r < n; r++) {
            char v[24];
            snprintf(v, sizeof v, rounds.unit[f], rounds.value[f][r]);
            printf(" %s", v);
        }
        printf("\n");
    }
}

/* Give each of the n sequences a cache of n_tokens positions without computing them (decode
 * timing does not depend on what the keys hold): zeroed K and V. grown: the tables grow a
 * block at a time, all sequences in turn, as sequences that decode together grow (their
 * blocks interleave); else each sequence's at once, as a prompt's (a run where the arena
 * has one). */
static void fake_contexts(bench *b, cpu_kv_seq *s, int n, int n_tokens, bool grown)
{
    char err[ERR_LEN];
    for (int upto = grown ? CPU_KV_BLOCK : n_tokens; upto < n_tokens + CPU_KV_BLOCK; upto += CPU_KV_BLOCK)
        for (int i = 0; i < n; i++)
            if (cpu_kv_reserve(&b->kv, &s[i], upto < n_tokens ? upto : n_tokens, err) != 0)
                die("kv", err);
    for (int i = 0; i < n; i++)
        for (int l = 0; l < b->kv.n_layers; l++)
            for (int h = 0; h < b->kv.n_kv_heads; h++)
                for (int k = 0; k < s[i].n_blocks; k++) {
                    const size_t at = (size_t)s[i].blocks[k] * b->kv.block_stride;
                    memset((cpu_half *)cpu_kv_head_k(&b->kv, l, h) + at, 0,
                           b->kv.block_elems * sizeof(cpu_half));
                    memset((cpu_half *)cpu_kv_head_v(&b->kv, l, h) + at, 0,
                           b->kv.block_elems * sizeof(cpu_half));
                }
}

static int64_t time_forward(bench *b, const cpu_batch_seq *seqs, int n)
{
    char err[ERR_LEN];
    const int64_t t0 = clock_now_ns();
    if (cpu_forward(&b->model, &b->run, &b->kv, b->pool, seqs, n, err) != 0)
        die("forward", err);
    return clock_now_ns() - t0;
}

/* One-shot prefill of `tokens`, the best of reps. scattered: the free list shuffled first, as
 * a server that has run a while leaves it (the prompt's blocks then a run from wherever its
 * first block is); else consecutive blocks of a fresh arena. */
static void bench_prefill(bench *b, int tokens, int reps, bool scattered)
{
    if (scattered)
        cpu_kv_shuffle_free(&b->kv, 7);
    int32_t *ids = malloc(sizeof *ids * (size_t)tokens);
    for (int i = 0; i < tokens; i++)
        ids[i] = (i * 7919) % b->model.config.vocab_size;
    int64_t best = INT64_MAX;
    for (int r = 0; r < reps; r++) {
        cpu_kv_seq s = {0};
        char err[ERR_LEN];
        if (cpu_kv_reserve(&b->kv, &s, tokens, err) != 0)
            die("kv", err);
        const cpu_batch_seq seq = {ids, 0, tokens, &s, true};
        const int64_t ns = time_forward(b, &seq, 1);
        best = ns < best ? ns : best;
        cpu_kv_release(&b->kv, &s);
        cpu_kv_seq_free(&s);
    }
    cost_breakdown cb;
    const int64_t roof = cost_prefill_ns(&b->cost, tokens, &cb);
    const double flops = cb.linear_flops + cb.lm_head_flops + cb.attention_flops;
    printf("  %6d %9.1f %9.0f %8.1f %8.1f %7.1f%% %11.1f %8.2fx   (attention %.0f%% of FLOPs%s)\n",
           tokens, best / 1e6, tokens / (best / 1e9), flops / 1e9, flops / best,
           100.0 * flops / best * 1e9 / b->cost.gpu.peak_flops, roof / 1e6,
           (double)best / roof, 100 * cb.attention_flops / flops,
           scattered ? "; free list shuffled" : "");
    tally_add("%.2fx", (double)best / roof, "prefill %d%s vs roof", tokens,
              scattered ? " shuffled" : "");
    free(ids);
}

/* A decode step's batch: `batch` sequences at `context`, one token each, their caches faked
 * (fake_contexts); decode_batch_free gives the blocks back. */
typedef struct decode_batch {
    cpu_kv_seq *kv;
    cpu_batch_seq *seqs;
    int32_t *ids;
    int n;
} decode_batch;

static decode_batch decode_batch_make(bench *b, int batch, int context, bool grown)
{
    decode_batch d = {calloc((size_t)batch, sizeof *d.kv), calloc((size_t)batch, sizeof *d.seqs),
                      calloc((size_t)batch, sizeof *d.ids), batch};
    if (!d.kv || !d.seqs || !d.ids)
        die("decode batch", "out of memory");
    fake_contexts(b, d.kv, batch, context + 1, grown);
    for (int i = 0; i < batch; i++) {
        d.ids[i] = (i * 31) % b->model.config.vocab_size;
        d.seqs[i] = (cpu_batch_seq){d.ids + i, context, 1, &d.kv[i], true};
    }
    return d;
}

static void decode_batch_free(bench *b, decode_batch *d)
{
    for (int i = 0; i < d->n; i++) {
        cpu_kv_release(&b->kv, &d->kv[i]);
        cpu_kv_seq_free(&d->kv[i]);
    }
    free(d->kv);
    free(d->seqs);
    free(d->ids);
}

static void bench_decode(bench *b, int batch, int context, int reps, bool grown)
{
    decode_batch d = decode_batch_make(b, batch, context, grown);
    const cpu_batch_seq *seqs = d.seqs;
    time_forward(b, seqs, batch); /* warm: buffers grown, weights in cache as they will be */
    int64_t best = INT64_MAX, total = 0;
    for (int r = 0; r < reps; r++) {
        const int64_t ns = time_forward(b, seqs, batch);
        best = ns < best ? ns : best;
        total += ns;
    }
    cost_breakdown cb;
    const int64_t roof = cost_decode_ns(&b->cost, batch, context, &cb);
    const double flops = cb.linear_flops + cb.lm_head_flops + cb.attention_flops;
    /* An engine that reads the KV cache (attention, memory-bound) between its products
     * (each bound by its FLOPs or its weights' bytes) rather than at the same time takes at
     * least the products' bound plus the cache's read. */
    const double kv_ns = cb.memory_ns * cb.kv_bytes / (cb.weight_bytes + cb.kv_bytes);
    const double weights_ns = cb.memory_ns - kv_ns;
    const double products = cb.compute_ns > weights_ns ? cb.compute_ns : weights_ns;
    const double serial = products + kv_ns;
    /* The same with the cache read at the rate of scattered blocks: where the arena's blocks
     * are scattered, what the cache's read alone costs on this machine. */
    const double scattered = products + cb.kv_bytes / b->block_bandwidth * 1e9;
    printf("  %6d %-11s %9.2f %9.2f %8.2f %8.1f %11.2f %-7s %8.2fx %10.2f %8.2fx %13.2f %8.2fx "
           "%5d\n",
           batch, grown ? "interleaved" : "runs", best / 1e6, total / 1e6 / reps, flops / 1e9,
           (cb.weight_bytes + cb.kv_bytes) / 1e6, roof / 1e6,
           cb.compute_ns >= cb.memory_ns ? "compute" : "memory", (double)best / roof,
           serial / 1e6, best / serial, scattered / 1e6, best / scattered, b->run.last_parts);
    tally_add("%.2fx", (double)best / roof, "decode %d %s vs roof", batch,
              grown ? "interleaved" : "runs");
    decode_batch_free(b, &d);
}

static int cmp_ns(const void *x, const void *y)
{
    const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* The same decode step `steps` times back to back, as a server runs them: the typical step and
 * its tail (p99, max, and how many took more than twice the median). A best-of figure hides a
 * step the machine or the engine stretched now and then; a served stream sees it as a gap. */
static void bench_steady(bench *b, int batch, int context, int steps)
{
    int64_t *ns = malloc(sizeof *ns * (size_t)steps);
    int64_t *sorted = malloc(sizeof *sorted * (size_t)steps);
    if (!ns || !sorted)
        die("steady", "out of memory");
    decode_batch d = decode_batch_make(b, batch, context, false);
    const cpu_batch_seq *seqs = d.seqs;
    time_forward(b, seqs, batch);
    const int64_t t0 = clock_now_ns();
    for (int r = 0; r < steps; r++)
        ns[r] = time_forward(b, seqs, batch);
    const double seconds = (clock_now_ns() - t0) / 1e9;
    memcpy(sorted, ns, sizeof *ns * (size_t)steps);
    qsort(sorted, (size_t)steps, sizeof *sorted, cmp_ns);
    const int64_t p50 = sorted[steps / 2], p99 = sorted[(int64_t)steps * 99 / 100];
    const int64_t max = sorted[steps - 1];
    int slow = 0;
    for (int r = 0; r < steps; r++)
        slow += ns[r] > 2 * p50;
    printf("decode steady state: batch %d at context %d, %d steps back to back (%.1f s): p50 "
           "%.2f ms, p99 %.2f ms, max %.2f ms (max / p50 %.1f); %d steps above 2 x p50\n",
           batch, context, steps, seconds, p50 / 1e6, p99 / 1e6, max / 1e6, (double)max / p50,
           slow);
    tally_add("%.2f", p50 / 1e6, "steady %d p50 ms", batch);
    tally_add("%.2f", p99 / 1e6, "steady %d p99 ms", batch);
    decode_batch_free(b, &d);
    free(ns);
    free(sorted);
}

/* llama-bench's two figures, in its shape: pp512 (a prompt of 512 tokens in one pass, tokens
 * per second) and tg128 (128 tokens generated one at a time from an empty context, each
 * step the forward pass and a token drawn from its logits at temperature 1, tokens per
 * second); the best of reps. */
static void bench_llama_shape(bench *b, int reps)
{
    char err[ERR_LEN];
    const int vocab = b->model.config.vocab_size;
    int32_t ids[512];
    for (int i = 0; i < 512; i++)
        ids[i] = (i * 7919) % vocab;
    int64_t pp = INT64_MAX, tg = INT64_MAX;
    for (int r = 0; r < reps; r++) {
        cpu_kv_seq s = {0};
        if (cpu_kv_reserve(&b->kv, &s, 512, err) != 0)
            die("kv", err);
        const cpu_batch_seq seq = {ids, 0, 512, &s, true};
        const int64_t ns = time_forward(b, &seq, 1);
        pp = ns < pp ? ns : pp;
        cpu_kv_release(&b->kv, &s);
        cpu_kv_seq_free(&s);
    }
    for (int r = 0; r < reps; r++) {
        cpu_kv_seq s = {0};
        int32_t token = 1;
        const int64_t t0 = clock_now_ns();
        for (int t = 0; t < 128; t++) {
            if (cpu_kv_reserve(&b->kv, &s, t + 1, err) != 0)
                die("kv", err);
            const cpu_batch_seq seq = {&token, t, 1, &s, true};
            if (cpu_forward(&b->model, &b->run, &b->kv, b->pool, &seq, 1, err) != 0)
                die("forward", err);
            token = cpu_sample(b->run.logits, vocab, 1.0, 7, t, -1);
        }
        const int64_t ns = clock_now_ns() - t0;
        tg = ns < tg ? ns : tg;
        cpu_kv_release(&b->kv, &s);
        cpu_kv_seq_free(&s);
    }
    printf("llama-bench shape: pp512 %.0f tok/s, tg128 %.0f tok/s (%.2f ms a token, sampling "
           "included)\n",
           512 / (pp / 1e9), 128 / (tg / 1e9), tg / 1e6 / 128);
    tally_add("%.0f", 512 / (pp / 1e9), "pp512 tok/s");
    tally_add("%.0f", 128 / (tg / 1e9), "tg128 tok/s");
}

/* --prefill N / --decode B: that one figure only (for a profiler); 0: all of them.
 * --no-roofline: no calibration (the rooflines are not figured; for timing two builds
 * against each other from outside, e.g. with farm-bench). */
static int only_prefill, only_decode, only_steady;
static bool no_roofline;

static void run(const char *model_name, int threads, bool quick)
{
    char err[ERR_LEN];
    bench b;
    memset(&b, 0, sizeof b);
    if (!(b.pool = cpu_pool_create(threads, err)))
        die("pool", err);
    cpu_calib cal = {threads, 1e12, 1e12, 1e12, 1e12, 1e12}; /* --no-roofline: placeholders */
    if (!no_roofline && cpu_calib_run(b.pool, quick ? 0.2 : 1.0, &cal, err) != 0)
        die("calibrate", err);
    if (no_roofline)
        printf("\nthreads %d: no calibration (--no-roofline): the roofline columns mean nothing\n",
               threads);
    else
        printf("\nthreads %d: SGEMM %.1f GFLOP/s (4096 rows), %.1f GFLOP/s (32 rows); attention "
           "kernel %.1f GFLOP/s; read bandwidth %.1f GB/s streaming, %.1f GB/s in scattered "
           "%d-byte blocks\n",
           threads, cal.gemm_flops / 1e9, cal.small_gemm_flops / 1e9, cal.attention_flops / 1e9,
           cal.mem_bandwidth / 1e9, cal.block_bandwidth / 1e9, CPU_CALIB_BLOCK_BYTES);
    if (!no_roofline)
        tally_add("%.1f", cal.gemm_flops / 1e9, "SGEMM GFLOP/s at the start");

    cost_arch arch;
    cpu_config config;
    if (cost_arch_find(model_name, &arch, err) != 0 ||
        cpu_config_from_arch(&arch, 1, 0, &config, err) != 0)
        die("model", err);
    int max_prefill = quick ? 2048 : 8192, max_batch = quick ? 32 : 256;
    if (only_steady && !only_decode)
        only_decode = 32;
    if (only_prefill || only_decode) {
        max_prefill = only_prefill;
        max_batch = only_decode;
    }
    const int64_t blocks = (max_prefill + 16) / 16 + (int64_t)max_batch * (512 / 16 + 1) + 16;
    if (cpu_build_model(&b.model, &config, err) != 0 ||
        cpu_build_runstate(&b.run, &b.model, threads, err) != 0 ||
        cpu_kv_init(&b.kv, &config, blocks, err) != 0)
        die("build", err);
    cost_gpu roofline = {.peak_flops = cal.gemm_flops, .mem_bandwidth = cal.mem_bandwidth,
                         .mem_bytes = 1e12, .bytes_per_param = 4,
                         .kv_bytes_per_elem = CPU_KV_ELEM_BYTES};
    snprintf(roofline.name, sizeof roofline.name, "this CPU");
    cost_params_init(&b.cost, &roofline, &arch);
    b.block_bandwidth = cal.block_bandwidth;

    char panels[96] = "";
    if (b.model.panels.wcls)
        snprintf(panels, sizeof panels, " (and %.1f MB of them in panels, for products of %d-%d rows)",
                 cpu_panel_bytes(&config) / 1e6, CPU_GEMM_PANEL_M, CPU_GEMM_SMALL_M - 1);
    printf("model %s: %d layers, hidden %d, %d/%d heads x %d, FFN %d, vocab %d; %.1f MB of F32 "
           "weights%s, F16 KV cache %s\n",
           arch.name, arch.n_layers, arch.hidden, arch.n_heads, arch.n_kv_heads, arch.head_dim,
           arch.ffn, arch.vocab, cpu_weight_bytes(&config) / 1e6, panels,
           cpu_kv_layout_name(b.kv.layout));
    printf("prefill, one shot (roofline = cost-model FLOPs / SGEMM rate, attention included):\n");
    printf("  %6s %9s %9s %8s %8s %8s %11s %9s\n", "tokens", "ms", "tok/s", "GFLOP", "GFLOP/s",
           "of peak", "roofline ms", "vs roof");
    static const int prompts[] = {512, 2048, 8192};
    if (only_prefill || only_decode) {
        if (only_prefill)
            bench_prefill(&b, only_prefill, 3, false);
    } else {
        for (int i = 0; i < 3; i++)
            if (prompts[i] <= max_prefill)
                bench_prefill(&b, prompts[i], 3, false);
        bench_prefill(&b, max_prefill, 3, true);
    }
    printf("decode step, every sequence at context 512 (roofline = max(FLOPs / SGEMM, bytes / "
           "bandwidth); serial = max(FLOPs / SGEMM, weight bytes / bandwidth) + KV bytes / "
           "bandwidth; scattered = the same with KV bytes / scattered-block bandwidth); the "
           "arena %s; blocks: runs = each sequence's reserved at once (a prompt's), interleaved "
           "= the sequences' tables grown a block at a time in turn (sequences decoding "
           "together); parts = the step split into one part per thread, or 1 (run whole):\n",
           only_decode ? "fresh" : "as the prefills left it, its free list shuffled");
    printf("  %6s %-11s %9s %9s %8s %8s %11s %-7s %9s %10s %9s %13s %9s %5s\n", "batch",
           "blocks", "best ms", "mean ms", "GFLOP", "MB read", "roofline ms", "bound", "vs roof",
           "serial ms", "vs serial", "scattered ms", "vs scat", "parts");
    static const int batches[] = {1, 32, 256};
    if (only_steady)
        bench_steady(&b, only_decode, 512, only_steady);
    else if (only_decode)
        bench_decode(&b, only_decode, 512, 100, false);
    for (int grown = 0; grown < 2 && !only_prefill && !only_decode; grown++)
        for (int i = grown; i < 3; i++) /* one sequence's blocks are a run either way */
            if (batches[i] <= max_batch)
                bench_decode(&b, batches[i], 512, 20, grown);
    if (!only_prefill && !only_decode) {
        bench_steady(&b, 32, 512, quick ? 200 : 1000);
        bench_llama_shape(&b, 3);
    }
    /* The machine's speed can move within a run (a VM's most of all) while every ratio
     * above is against the rates measured at its start: SGEMM again, to show how far. */
    if (!no_roofline && !only_prefill && !only_decode && !only_steady) {
        double again = 0;
        if (cpu_calib_gemm(b.pool, 4096, quick ? 0.2 : 1.0, &again, err) != 0)
            die("calibrate", err);
        printf("SGEMM again at the end: %.1f GFLOP/s, %+.1f %% from the start's %.1f (the "
               "ratios above are against the start's)\n",
               again / 1e9, (again / cal.gemm_flops - 1) * 100, cal.gemm_flops / 1e9);
        tally_add("%+.1f", (again / cal.gemm_flops - 1) * 100, "SGEMM at the end, %% moved");
    }
    cpu_kv_free(&b.kv);
    cpu_free_runstate(&b.run);
    cpu_free_model(&b.model);
    cpu_pool_free(b.pool);
}

int main(int argc, char **argv)
{
    const char *model = "ref-256";
    int threads = 0;
    bool quick = false;
    int n_rounds = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--quick") == 0)
            quick = true;
        else if (strcmp(argv[i], "--prefill") == 0 && i + 1 < argc)
            only_prefill = atoi(argv[++i]);
        else if (strcmp(argv[i], "--decode") == 0 && i + 1 < argc)
            only_decode = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steady") == 0 && i + 1 < argc)
            only_steady = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-roofline") == 0)
            no_roofline = true;
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            n_rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_cpu [--model NAME] [--threads N] [--quick] [--rounds N] "
                            "[--prefill N | --decode B] [--steady STEPS] [--no-roofline]\n");
            return 2;
        }
    }
    if (only_steady < 0 || only_decode < 0 || only_prefill < 0) {
        fprintf(stderr, "bench_cpu: --prefill, --decode and --steady take a positive count\n");
        return 2;
    }
    if (n_rounds < 1 || n_rounds > MAX_ROUNDS) {
        fprintf(stderr, "bench_cpu: --rounds takes 1 to %d\n", MAX_ROUNDS);
        return 2;
    }
    if (n_rounds > 1 && (only_prefill || only_decode || only_steady || no_roofline)) {
        fprintf(stderr, "bench_cpu: --rounds repeats the whole run against its calibration: "
                        "not with --prefill, --decode, --steady or --no-roofline\n");
        return 2;
    }
    openblas_set_num_threads(1);
    char name[128];
    cpu_calib_cpu_name(name, sizeof name);
    const int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    char isa[256];
    cpu_isa_describe(isa, sizeof isa);
    printf("bench_cpu: %s, %d cores; %s\n", name, cores, isa);
    for (int t = threads > 0 ? threads : 1; t <= (threads > 0 ? threads : cores); t++) {
        memset(&rounds, 0, sizeof rounds);
        for (int r = 0; r < n_rounds; r++) {
            if (n_rounds > 1)
                printf("\nthreads %d, round %d of %d\n", t, r + 1, n_rounds);
            fflush(stdout);
            run(model, t, quick);
        }
        if (n_rounds > 1)
            tally_print(t, n_rounds);
    }
    return 0;
}
