/* tune_table — `stallscope tune` in words (tune_table.h). */
#include "report/tune_table.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/redact.h"
#include "experiment/server_flags.h"

int tune_table_front_rows(const tune_result *res, int *out)
{
    int n = 0;
    for (int i = 0; i < res->n_points; i++) {
        const tune_point *pt = &res->points[i];
        if (!pt->on_front || pt->same_as >= 0)
            continue;
        /* insertion: a front is a few dozen rows */
        int k = n++;
        for (; k > 0; k--) {
            const tune_figures *a = &res->points[out[k - 1]].predicted, *b = &pt->predicted;
            const bool before = b->output_per_gpu > a->output_per_gpu ||
                                (b->output_per_gpu == a->output_per_gpu &&
                                 b->itl_p999_ms < a->itl_p999_ms);
            if (!before)
                break;
            out[k] = out[k - 1];
        }
        out[k] = i;
    }
    return n;
}

int tune_table_same_count(const tune_result *res, int p)
{
    int n = 0;
    for (int i = 0; i < res->n_points; i++)
        n += i == p || res->points[i].same_as == p;
    return n;
}

void tune_table_rel_error(double predicted, double measured, char *buf, size_t size)
{
    if (measured == 0 || !isfinite(measured))
        snprintf(buf, size, "—");
    else
        snprintf(buf, size, "%+.1f %%", (predicted - measured) / measured * 100);
}

static void fmt_ms(double v, char *buf, size_t size)
{
    if (v >= 100)
        snprintf(buf, size, "%.0f ms", v);
    else if (v >= 10)
        snprintf(buf, size, "%.1f ms", v);
    else
        snprintf(buf, size, "%.2f ms", v);
}

void tune_table_verdict(const tune_config *tc, const tune_result *res, char *buf, size_t size)
{
    char name[64], ttft[32], p999[32], max[32];
    if (res->choice >= 0) {
        const tune_point *pt = &res->points[res->choice];
        tune_point_name(pt, name, sizeof name);
        fmt_ms(pt->predicted.ttft_p99_ms, ttft, sizeof ttft);
        fmt_ms(pt->predicted.itl_p999_ms, p999, sizeof p999);
        fmt_ms(pt->predicted.itl_max_ms, max, sizeof max);
        const bool per_gpu = tc->n_setups > 1;
        snprintf(buf, size,
                 "%s: the most output throughput%s (%.0f tok/s%s; within %.0f %% counts as a "
                 "tie, then the lower ITL p99.9) of the %d setting%s that meet%s every SLO; "
                 "predicted ITL p99.9 %s, ITL max %s, TTFT p99 %s",
                 name, per_gpu ? " per GPU" : "",
                 per_gpu ? pt->predicted.output_per_gpu : pt->predicted.output_throughput,
                 per_gpu ? " per GPU" : "", TUNE_THROUGHPUT_TIE * 100,
                 res->n_feasible, res->n_feasible == 1 ? "" : "s", res->n_feasible == 1 ? "s" : "",
                 p999, max, ttft);
        return;
    }
    if (res->closest < 0) {
        snprintf(buf, size, "no setting can serve this workload (%d tried)", res->n_points);
        return;
    }
    const tune_point *pt = &res->points[res->closest];
    char why[400];
    tune_point_name(pt, name, sizeof name);
    tune_point_why(&tc->slo, pt, why, sizeof why);
    snprintf(buf, size,
             "no setting meets every SLO; the closest is %s (%s, %.0f %% past its limit): %s "
             "binds",
             name, why, pt->violation * 100,
             res->binding_slo >= 0 ? tc->slo.rule[res->binding_slo].text : "?");
}

/* With --disaggregate's splits the names are longer and a per-GPU column comes in. */
static int name_width(const tune_config *tc)
{
    return tc->n_setups > 1 ? 30 : 22;
}

static void print_figures_header(FILE *out, const char *indent, const tune_config *tc)
{
    fprintf(out, "%s%-*s %11s", indent, name_width(tc), "setting", "out tok/s");
    if (tc->n_setups > 1)
        fprintf(out, " %10s", "per GPU");
    fprintf(out, " %10s %9s %10s %10s  %s\n", "TTFT p99", "ITL p50", "ITL p99.9", "ITL max",
            "SLOs");
}

static void print_point_row(FILE *out, const char *indent, const tune_config *tc,
                            const tune_result *res, int i, bool same_note)
{
    const tune_point *pt = &res->points[i];
    char name[64], ttft[32], p50[32], p999[32], max[32], why[400];
    tune_point_name(pt, name, sizeof name);
    tune_point_why(&tc->slo, pt, why, sizeof why);
    if (!pt->servable) {
        fprintf(out, "%s%-*s %s\n", indent, name_width(tc), name, why);
        return;
    }
    fmt_ms(pt->predicted.ttft_p99_ms, ttft, sizeof ttft);
    fmt_ms(pt->predicted.itl_p50_ms, p50, sizeof p50);
    fmt_ms(pt->predicted.itl_p999_ms, p999, sizeof p999);
    fmt_ms(pt->predicted.itl_max_ms, max, sizeof max);
    char note[48] = "";
    const int same = same_note ? tune_table_same_count(res, i) : 1;
    if (same > 1)
        snprintf(note, sizeof note, " (+%d with these figures)", same - 1);
    fprintf(out, "%s%-*s %11.1f", indent, name_width(tc), name, pt->predicted.output_throughput);
    if (tc->n_setups > 1)
        fprintf(out, " %10.1f", pt->predicted.output_per_gpu);
    fprintf(out, " %10s %9s %10s %10s  %s%s%s\n", ttft, p50, p999, max,
            pt->feasible ? "all met" : why, i == res->choice ? "   <- chosen" : "", note);
}

/* --disaggregate: one instance against each split, by the best setting of each that meets
 * every SLO (tune_ranked's order), per GPU first. */
void tune_table_print_setups(FILE *out, const tune_config *tc, const tune_result *res)
{
    int *ranked = calloc((size_t)res->n_points + 1, sizeof *ranked);
    const int n = ranked ? tune_ranked(res, ranked, res->n_points) : 0;
    fprintf(out, "One instance against disaggregated prefill (the best setting of each that "
                 "meets every SLO):\n");
    fprintf(out, "  %-12s %-30s %5s %10s %11s %10s %10s %10s\n", "setup", "setting", "GPUs",
            "per GPU", "out tok/s", "TTFT p99", "ITL p99.9", "ITL max");
    for (int d = 0; d < tc->n_setups; d++) {
        const sim_disagg *sd = &tc->setups[d];
        char setup[32];
        if (sd->prefill > 0)
            snprintf(setup, sizeof setup, "%dP:%dD %s", sd->prefill, sd->decode, sd->link);
        else
            snprintf(setup, sizeof setup, "one instance");
        int best = -1;
        for (int k = 0; k < n && best < 0; k++) {
            const tune_point *pt = &res->points[ranked[k]];
            if (pt->disagg.prefill == sd->prefill && pt->disagg.decode == sd->decode)
                best = ranked[k];
        }
        if (best < 0) {
            fprintf(out, "  %-12s no setting meets every SLO\n", setup);
            continue;
        }
        const tune_point *pt = &res->points[best];
        char name[64], ttft[32], p999[32], max[32];
        tune_point_name(pt, name, sizeof name);
        fmt_ms(pt->predicted.ttft_p99_ms, ttft, sizeof ttft);
        fmt_ms(pt->predicted.itl_p999_ms, p999, sizeof p999);
        fmt_ms(pt->predicted.itl_max_ms, max, sizeof max);
        fprintf(out, "  %-12s %-30s %5d %10.1f %11.1f %10s %10s %10s\n", setup, name,
                tune_point_gpus(pt), pt->predicted.output_per_gpu,
                pt->predicted.output_throughput, ttft, p999, max);
    }
    free(ranked);
}

void tune_table_print_failures(FILE *out, const char *indent, const tune_config *tc,
                               const tune_result *res)
{
    /* Groups: each SLO (by the points it breaks most), then "cannot serve". */
    for (int g = 0; g <= tc->slo.n; g++) {
        const bool cannot = g == tc->slo.n;
        int count = 0, least = -1, most = -1;
        for (int i = 0; i < res->n_points; i++) {
            const tune_point *pt = &res->points[i];
            if (cannot ? pt->servable : (!pt->servable || pt->worst_slo != g))
                continue;
            count++;
            if (cannot) {
                if (least < 0)
                    least = i;
                continue;
            }
            if (least < 0 || pt->violation < res->points[least].violation)
                least = i;
            if (most < 0 || pt->violation > res->points[most].violation)
                most = i;
        }
        if (count == 0)
            continue;
        char a[64], b[64], wa[400], wb[400];
        tune_point_name(&res->points[least], a, sizeof a);
        tune_point_why(&tc->slo, &res->points[least], wa, sizeof wa);
        if (cannot) {
            fprintf(out, "%s%d cannot serve the workload, e.g. %s: %s\n", indent, count, a,
                    wa + strlen("cannot serve: "));
            continue;
        }
        tune_point_name(&res->points[most], b, sizeof b);
        tune_point_why(&tc->slo, &res->points[most], wb, sizeof wb);
        if (count == 1 || least == most)
            fprintf(out, "%s%d break %s most: %s: %s\n", indent, count, tc->slo.rule[g].text, a,
                    wa);
        else
            fprintf(out, "%s%d break %s most: nearest %s: %s; furthest %s: %s\n", indent, count,
                    tc->slo.rule[g].text, a, wa, b, wb);
    }
}

void tune_table_print(FILE *out, const tune_config *tc, const tune_result *res, bool all)
{
    char engine[256];
    tune_engine_name(tc, engine, sizeof engine);
    fprintf(out, "tune: %d setting%s in the simulator (%s) in %.1f s; SLOs:", res->n_points,
            res->n_points == 1 ? "" : "s",
            engine, res->search_s);
    for (int r = 0; r < tc->slo.n; r++)
        fprintf(out, " %s", tc->slo.rule[r].text);
    fprintf(out, "\n%d can serve the workload, %d %s every SLO.\n\n", res->n_servable,
            res->n_feasible, res->n_feasible == 1 ? "meets" : "meet");

    int *rows = calloc((size_t)res->n_points + 1, sizeof *rows);
    const int n_rows = rows ? tune_table_front_rows(res, rows) : 0;
    fprintf(out, "Pareto front (most output throughput, least TTFT p99 and ITL p99.9): %d "
                 "settings, %d distinct predictions:\n",
            res->n_front, n_rows);
    print_figures_header(out, "  ", tc);
    for (int k = 0; k < n_rows; k++)
        print_point_row(out, "  ", tc, res, rows[k], true);
    free(rows);

    char verdict[1024];
    tune_table_verdict(tc, res, verdict, sizeof verdict);
    fprintf(out, "\n%s: %s.\n", res->choice >= 0 ? "Chosen" : "No feasible setting", verdict);
    if (tc->n_setups > 1) {
        fputc('\n', out);
        tune_table_print_setups(out, tc, res);
    }

    if (all) {
        fprintf(out, "\nEvery setting:\n");
        print_figures_header(out, "  ", tc);
        for (int i = 0; i < res->n_points; i++)
            print_point_row(out, "  ", tc, res, i, false);
    } else if (res->n_points - (res->choice >= 0) > 0) {
        fprintf(out, "\nWhy the others fail (each by the SLO it breaks most; --all lists every "
                     "setting):\n");
        tune_table_print_failures(out, "  ", tc, res);
        const int also = res->n_feasible - (res->choice >= 0);
        if (also > 0)
            fprintf(out, "  %d other setting%s every SLO with less output throughput or a "
                         "higher tail\n",
                    also, also == 1 ? " meets" : "s meet");
    }
    const int shown = res->choice >= 0 ? res->choice : res->closest;
    if (shown >= 0) {
        const tune_point *pt = &res->points[shown];
        char name[64];
        tune_point_name(pt, name, sizeof name);
        fprintf(out, "\nServer flags for %s%s:\n", name,
                res->choice >= 0 ? "" : " (the closest, which does NOT meet the SLOs)");
        if (pt->disagg.prefill > 0)
            fprintf(out, "  (disaggregated %dP:%dD over %s: %d prefill and %d decode servers, each "
                         "with the flags below; vLLM joins them with --kv-transfer-config behind "
                         "a proxy, docs/guide/what-ifs.md)\n",
                    pt->disagg.prefill, pt->disagg.decode, pt->disagg.link, pt->disagg.prefill,
                    pt->disagg.decode);
        experiment_print_server_setting(out, "  ", pt->policy, pt->max_num_batched_tokens,
                                        pt->max_num_seqs, &tc->base.wl);
        if (pt->prefix_caching)
            experiment_print_prefix_caching(out, "  ");
    }
    if (res->n_verified > 0) {
        fprintf(out, "\n");
        tune_table_print_verify(out, tc, res);
    }
}

static void verify_row(FILE *out, const char *figure, double predicted, double measured,
                       bool ms)
{
    char p[32], m[32], e[32];
    if (ms) {
        fmt_ms(predicted, p, sizeof p);
        fmt_ms(measured, m, sizeof m);
    } else {
        snprintf(p, sizeof p, "%.1f", predicted);
        snprintf(m, sizeof m, "%.1f", measured);
    }
    tune_table_rel_error(predicted, measured, e, sizeof e);
    fprintf(out, "    %-20s %12s %12s %10s\n", figure, p, m, e);
}

void tune_table_print_verify(FILE *out, const tune_config *tc, const tune_result *res)
{
    char target[1024];
    redact_url(tc->base.client.target, target, sizeof target);
    fprintf(out, "Verified live against %s (error = (predicted - measured) / measured):\n", target);
    for (int c = 0; c < res->n_verified; c++) {
        const tune_verified *v = &res->verified[c];
        const tune_point *pt = &res->points[v->point];
        char name[64];
        tune_point_name(pt, name, sizeof name);
        if (!v->ran) {
            fprintf(out, "  %d. %s (%s): did not run: %s\n", c + 1, name, v->dir, v->why);
            continue;
        }
        fprintf(out, "  %d. %s (%s): %s\n", c + 1, name, v->dir,
                v->meets ? "meets every SLO live" : "MISSES an SLO live");
        fprintf(out, "    %-20s %12s %12s %10s\n", "figure", "predicted", "measured", "error");
        verify_row(out, "ITL p50", pt->predicted.itl_p50_ms, v->measured.itl_p50_ms, true);
        verify_row(out, "ITL p99.9", pt->predicted.itl_p999_ms, v->measured.itl_p999_ms, true);
        verify_row(out, "ITL max", pt->predicted.itl_max_ms, v->measured.itl_max_ms, true);
        verify_row(out, "TTFT p99", pt->predicted.ttft_p99_ms, v->measured.ttft_p99_ms, true);
        verify_row(out, "output tok/s", pt->predicted.output_throughput,
                   v->measured.output_throughput, false);
        for (int r = 0; r < tc->slo.n; r++) {
            char have[48];
            tune_format_slo_value(&tc->slo.rule[r], v->slo_value[r], have, sizeof have);
            const bool met = !isnan(v->slo_value[r]) &&
                             gate_rule_holds(&tc->slo.rule[r], v->slo_value[r]);
            fprintf(out, "    SLO %-16s live %s: %s\n", tc->slo.rule[r].text, have,
                    met ? "met" : "MISSED");
        }
    }
}
