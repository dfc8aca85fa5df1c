/* bench_warm — is the first long prompt a start-up artefact, and does the fitted profile
 * predict the cpu engine? (issue 16). Prints figures; never fails on time.
 *
 *   bench_warm [STALLSCOPE [OUT]] [--runs 3] [--hardware hw.json] [-- run/sim workload flags]
 *
 * (STALLSCOPE defaults to the stallscope binary beside this one, OUT to a new directory in
 * /tmp: `make bench` runs it with no arguments, the lesson as it is.)
 *
 * Runs `STALLSCOPE run --no-baseline --out OUT/run-<i> FLAGS` --runs times (the embedded
 * server on the cpu engine, warm-started) and prints, for each run, every injection's spike
 * (its max_gap_ms in summary.json) and the first one's ratio to the median of the others.
 * An injection still in prefill when the run ended (no first token) has no whole spike and
 * is left out, and said so.
 * With --hardware it also runs `STALLSCOPE sim --no-baseline --hardware FILE FLAGS` once
 * (virtual time: one run says it all) and prints, for each cpu run, the sim's gap p50 and
 * spikes beside the measured ones with their errors. The load average (/proc/loadavg) is
 * printed before and after each run: the figures mean little without it on a shared machine.
 * The flags after -- go to both commands unchanged (e.g. --model small --prompt-tokens 2000). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/buf.h"
#include "report/predict.h"

#include "median.h"

#define MAX_INJ 64
#define MAX_RUNS 16

typedef struct run_figures {
    double p50;
    double spikes[MAX_INJ]; /* injections that got their first token before the end */
    int n;
    int cut;                /* injections still in prefill when the run ended: left out */
} run_figures;

static void loadavg(char *out, size_t size)
{
    snprintf(out, size, "?");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f)
        return;
    double a, b, c;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(out, size, "%.2f, %.2f, %.2f", a, b, c);
    fclose(f);
}

static int read_summary(const char *dir, run_figures *out)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/interference/summary.json", dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        fprintf(stderr, "bench_warm: %s: %s\n", path, jerr.text);
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->p50 = json_number_value(json_object_get(json_object_get(root, "itl_ms"), "p50"));
    json_t *inj = json_object_get(root, "injections");
    /* An injection whose prefill the run's end cut short has no whole spike to compare. */
    for (size_t i = 0; i < json_array_size(inj) && out->n < MAX_INJ; i++) {
        json_t *x = json_array_get(inj, i);
        json_t *ttft = json_object_get(x, "ttft_ms");
        if (!json_is_number(ttft) || json_number_value(ttft) < 0) {
            out->cut++;
            continue;
        }
        out->spikes[out->n++] = json_number_value(json_object_get(x, "max_gap_ms"));
    }
    json_decref(root);
    return 0;
}

static double median(const double *v, int n)
{
    double s[MAX_INJ];
    memcpy(s, v, sizeof(double) * (size_t)n);
    median_sort(s, n);
    return median_of_sorted(s, n);
}

/* Quote one argument for sh. */
static void append_quoted(buf *b, const char *arg)
{
    buf_append(b, " '", 2);
    for (const char *p = arg; *p; p++)
        if (*p == '\'')
            buf_append(b, "'\\''", 4);
        else
            buf_append(b, p, 1);
    buf_append(b, "'", 1);
}

static int run_command(const char *bin, const char *verb, const char *out, const char *hardware,
                       char **flags, int n_flags, const char *log)
{
    buf cmd = {0};
    append_quoted(&cmd, bin);
    buf_append(&cmd, " ", 1);
    buf_append(&cmd, verb, strlen(verb));
    buf_append(&cmd, " --no-baseline --out", 20);
    append_quoted(&cmd, out);
    if (hardware) {
        buf_append(&cmd, " --hardware", 11);
        append_quoted(&cmd, hardware);
    }
    for (int i = 0; i < n_flags; i++)
        append_quoted(&cmd, flags[i]);
    buf_append(&cmd, " >", 2);
    append_quoted(&cmd, log);
    buf_append(&cmd, " 2>&1", 5);
    buf_append(&cmd, "", 1);
    if (cmd.failed) {
        buf_free(&cmd);
        return -1;
    }
    printf("$%s\n", cmd.data);
    fflush(stdout);
    const int rc = system(cmd.data);
    buf_free(&cmd);
    return rc == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    static char default_bin[1024], default_out[] = "/tmp/bench_warm_XXXXXX";
    const char *bin = NULL, *out = NULL, *hardware = NULL;
    int runs = 3, first_flag = argc, i = 1;
    if (i < argc && strncmp(argv[i], "--", 2) != 0)
        bin = argv[i++];
    if (i < argc && strncmp(argv[i], "--", 2) != 0)
        out = argv[i++];
    if (!bin) { /* the stallscope beside this binary */
        const char *slash = strrchr(argv[0], '/');
        snprintf(default_bin, sizeof default_bin, "%.*sstallscope",
                 slash ? (int)(slash - argv[0] + 1) : 0, argv[0]);
        bin = default_bin;
    }
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--hardware") == 0 && i + 1 < argc)
            hardware = argv[++i];
        else if (strcmp(argv[i], "--") == 0) {
            first_flag = i + 1;
            break;
        } else {
            fprintf(stderr, "bench_warm: unknown argument %s\nusage: bench_warm [STALLSCOPE "
                            "[OUT]] [--runs N] [--hardware FILE] [-- FLAGS]\n", argv[i]);
            return 2;
        }
    }
    if (runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr, "bench_warm: --runs 1 .. %d\n", MAX_RUNS);
        return 2;
    }
    char **flags = argv + first_flag;
    const int n_flags = argc - first_flag;
    if (!out) {
        if (!mkdtemp(default_out)) {
            perror("bench_warm: mkdtemp");
            return 1;
        }
        out = default_out;
    }
    mkdir(out, 0755);
    printf("bench_warm: %s, %d run%s into %s\n", bin, runs, runs == 1 ? "" : "s", out);
    char load[64], dir[1024], log[1100];

    run_figures sim = {0};
    bool have_sim = false;
    if (hardware) {
        snprintf(dir, sizeof dir, "%s/sim", out);
        snprintf(log, sizeof log, "%s/sim.log", out);
        if (run_command(bin, "sim", dir, hardware, flags, n_flags, log) != 0 ||
            read_summary(dir, &sim) != 0) {
            fprintf(stderr, "bench_warm: the sim failed (see %s)\n", log);
            return 1;
        }
        have_sim = true;
        printf("sim --hardware %s: gap p50 %.2f ms, spikes", hardware, sim.p50);
        for (int j = 0; j < sim.n; j++)
            printf(" %.0f", sim.spikes[j]);
        printf(" ms\n");
    }

    double ratios[MAX_RUNS];
    int n_ratios = 0;
    for (int r = 0; r < runs; r++) {
        snprintf(dir, sizeof dir, "%s/run-%d", out, r + 1);
        snprintf(log, sizeof log, "%s/run-%d.log", out, r + 1);
        loadavg(load, sizeof load);
        printf("run %d: load average before: %s\n", r + 1, load);
        run_figures f;
        if (run_command(bin, "run", dir, hardware, flags, n_flags, log) != 0 ||
            read_summary(dir, &f) != 0) {
            fprintf(stderr, "bench_warm: run %d failed (see %s)\n", r + 1, log);
            continue;
        }
        loadavg(load, sizeof load);
        printf("run %d: load average after: %s\n", r + 1, load);
        printf("run %d: gap p50 %.2f ms; spikes", r + 1, f.p50);
        for (int j = 0; j < f.n; j++)
            printf(" %.0f", f.spikes[j]);
        printf(" ms");
        if (f.cut)
            printf(" (%d more still in prefill at the end: left out)", f.cut);
        printf("\n");
        if (f.n >= 2) {
            const double rest = median(f.spikes + 1, f.n - 1);
            ratios[n_ratios++] = f.spikes[0] / rest;
            printf("run %d: first spike / median of the other %d = %.0f / %.0f = %.3f (%+.1f %%)\n",
                   r + 1, f.n - 1, f.spikes[0], rest, f.spikes[0] / rest,
                   (f.spikes[0] / rest - 1) * 100);
        }
        if (have_sim) {
            /* errors as the report prints them: predicted / measured - 1 */
            printf("run %d vs sim: gap p50 %.2f vs %.2f ms (sim %+.1f %%)", r + 1, f.p50, sim.p50,
                   report_relative_error(f.p50, sim.p50) * 100);
            const int n = f.n < sim.n ? f.n : sim.n;
            double worst = 0;
            for (int j = 0; j < n; j++) {
                const double e = report_relative_error(f.spikes[j], sim.spikes[j]);
                printf("%s spike %d %.0f vs %.0f ms (%+.1f %%)", j ? "," : ";", j + 1, f.spikes[j],
                       sim.spikes[j], e * 100);
                worst = fabs(e) > worst ? fabs(e) : worst;
            }
            if (n > 0) {
                const double mm = median(f.spikes, n), ms = median(sim.spikes, n);
                printf("; median spike %.0f vs %.0f ms (%+.1f %%); worst single spike %.1f %%",
                       mm, ms, report_relative_error(mm, ms) * 100, worst * 100);
            }
            printf("\n");
        }
        fflush(stdout);
    }
    if (n_ratios > 0) {
        printf("first spike / median of the others over %d runs:", n_ratios);
        for (int i = 0; i < n_ratios; i++)
            printf(" %.3f", ratios[i]);
        printf("\n");
    }
    return 0;
}
