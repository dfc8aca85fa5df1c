/* pair — the experiment itself: baseline, its p50 as the reference, the interference run,
 * summaries, artifacts. One implementation for sim, run, sweep, the report's prediction and
 * the tests; the runner decides where the tokens come from. */
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/fsio.h"
#include "common/redact.h"
#include "experiment/config.h"
#include "experiment/config_json.h"
#include "experiment/options.h"
#include "experiment/pair.h"
#include "experiment/runner.h"

/* summary.json and stalls.csv (every stall with its cause and culprits). */
static int write_summary(const char *dir, const analysis_summary *s, char *err)
{
    char path[4200], stalls[4200];
    if (fsio_join(path, sizeof path, dir, "summary.json", err) != 0 ||
        fsio_join(stalls, sizeof stalls, dir, "stalls.csv", err) != 0)
        return -1;
    json_t *json = analysis_summary_to_json(s);
    int rc = fsio_write_json(path, json, 0, err);
    json_decref(json);
    return rc == 0 ? analysis_write_stalls_csv(s, stalls, err) : -1;
}

/* The analysis of one run as far as it is known before the run. */
static void run_options(const experiment_config *cfg, const workload_config *wl,
                        const experiment_runner *runner, const char *label, double reference_p50,
                        standard_options *standard, analysis_options *opt)
{
    *opt = (analysis_options){.label = label,
                              .duration_s = (double)wl->duration_ns / 1e9,
                              .users = workload_analysis_users(wl),
                              .users_are_streams = workload_open_loop(wl),
                              .shard = wl->shard.index,
                              .shards = wl->shard.count,
                              .threshold_ms = (double)cfg->stall_threshold_ns / 1e6,
                              .reference_p50_ms = reference_p50,
                              .gap_digest = runner->streams,
                              .gpus = experiment_gpus(cfg)};
    experiment_standard_options(cfg, standard);
    opt->standard = standard;
}

/* ... and what the run told it: the engine, the target, how it ended, its stamps. */
static void options_from_run(const experiment_meta *meta, const experiment_streaming *streaming,
                             analysis_options *opt)
{
    opt->engine = meta->engine_name;
    opt->target = meta->target;
    opt->complete = meta->complete;
    opt->protocol_violations = meta->protocol_violations;
    opt->tokens_csv_dropped = streaming->tokens_csv_dropped;
    opt->tokens_csv_max_events = streaming->tokens_csv_max_events > 0
                                     ? streaming->tokens_csv_max_events
                                     : EXPERIMENT_TOKENS_CSV_MAX_DEFAULT;
    experiment_meta_stamps(meta, opt);
}

/* One run: config.json first (incomplete), the runner, config.json again with how it went,
 * the summary. *complete false with why filled when the run was cut short, or when it ran
 * to its end but mostly failed (analysis_summary.failed: *failed true, config.json then
 * written once more, incomplete). */
static int one_run(const experiment_config *cfg, const experiment_runner *runner,
                   const experiment_io *io, const char *label, bool inject, double reference_p50,
                   analysis_summary *summary, bool *complete, bool *failed, char *why, char *err)
{
    *failed = false;
    char dir[4096], config_path[4200];
    const char *d = NULL;
    if (io->out_dir) {
        if (fsio_join(dir, sizeof dir, io->out_dir, label, err) != 0 ||
            fsio_join(config_path, sizeof config_path, dir, "config.json", err) != 0 ||
            fsio_mkdirs(dir, err) != 0)
            return -1;
        d = dir;
    }
    workload_config wl = cfg->wl;
    wl.inject = inject;
    experiment_config run_cfg = *cfg;
    run_cfg.wl = wl;

    experiment_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.label, sizeof meta.label, "%s", label);
    experiment_engine_name(cfg, cfg->client.model_name, meta.engine_name, sizeof meta.engine_name);
    if (cfg->engine == EXPERIMENT_REMOTE)
        redact_url(cfg->client.target, meta.target, sizeof meta.target);
    tokenlog log;
    tokenlog_init(&log);
    int rc = -1;
    if (experiment_meta_set_argv(&meta, io->argc, io->argv) != 0) {
        err_set(err, "out of memory");
        goto done;
    }
    /* Written before the run: a run killed half-way is still reportable. */
    if (d && experiment_config_write(config_path, &run_cfg, &meta, err) != 0)
        goto done;
    /* The threshold the analysis will use, where it is known before the run: given, or
     * 5 x the baseline's p50 (analysis_summarize's default). */
    const int64_t threshold_ns = cfg->stall_threshold_ns > 0 ? cfg->stall_threshold_ns
                                 : reference_p50 > 0       ? (int64_t)(5 * reference_p50 * 1e6)
                                                           : 0;
    experiment_phase phase = {.cfg = &run_cfg, .wl = &wl, .label = label, .dir = d,
                              .notes = io->notes, .quiet = io->quiet,
                              .interrupted = io->interrupted, .stall_threshold_ns = threshold_ns};
    standard_options standard;
    analysis_options opt;
    run_options(cfg, &wl, runner, label, reference_p50, &standard, &opt);
    /* A runner that streams hands its rows to the analysis as they come: nothing holds the
     * token log (an hour of 256 users is 10^8 events). */
    experiment_streaming streaming = {.tokens_csv_max_events = io->tokens_csv_max_events,
                                      .log_events_max = io->log_events_max};
    bool ended_pass = false; /* the one pass again a trace's own end may take */
    bool said = false;       /* that pass says nothing the first did not */
    for (int pass = 0; pass < 2; pass++) {
        if (runner->streams && !(streaming.stream = analysis_stream_begin(&opt, err)))
            goto done;
        phase.streaming = &streaming;
        why[0] = '\0';
        experiment_phase this_pass = phase;
        if (said)
            this_pass.notes = NULL, this_pass.quiet = false;
        said = false;
        if (runner->run(runner->impl, &this_pass, &log, &meta, why) != 0) {
            analysis_stream_free(streaming.stream);
            err_set(err, "the %s run: %s", label, why);
            goto done;
        }
        *complete = meta.complete;
        if (meta.ended_ns > 0 && meta.ended_ns < wl.duration_ns) {
            /* A trace replayed to its end (or --num-prompts): the run lasted until its last
             * request finished,
             * and that is its duration, in config.json and in the analysis. A stream was
             * begun for the cap: the simulator again, to that end (deterministic: the same
             * events up to it). */
            wl.duration_ns = meta.ended_ns;
            run_cfg.wl.duration_ns = meta.ended_ns;
            opt.duration_s = (double)meta.ended_ns / 1e9;
            if (io->notes && !io->quiet)
                fprintf(io->notes, "%s: %s finished at %.3f s: the run ends there\n", label,
                        wl.trace[0] ? "the trace's last request" : "the last of the --num-prompts",
                        opt.duration_s);
            if (runner->streams && !ended_pass) {
                analysis_stream_free(streaming.stream);
                streaming.stream = NULL;
                ended_pass = said = true;
                pass--;
                continue;
            }
        }
        if (pass == 0 && d && experiment_config_write(config_path, &run_cfg, &meta, err) != 0) {
            analysis_stream_free(streaming.stream);
            goto done;
        }
        options_from_run(&meta, &streaming, &opt);
        if (!runner->streams) {
            /* A long live run kept its events on disk only: the analysis streams its files
             * (with their own request ids: the run's rows as the driver wrote them). */
            if (streaming.events_on_disk && d) {
                if (analysis_summarize_files(d, &opt, summary, NULL, err) != 0)
                    goto done;
            } else if (analysis_summarize(&log, &opt, summary, err) != 0) {
                goto done;
            }
            break;
        }
        /* The stream ends (and is freed) here. Without a threshold given, more long gaps than
         * its budget before the run's own p50 was known: run again with that threshold (the
         * simulator is deterministic; the second pass is exact). */
        double threshold_ms = 0;
        int rc_end = analysis_stream_end(streaming.stream, &opt, summary, &threshold_ms, err);
        streaming.stream = NULL;
        if (rc_end == 0)
            break;
        if (rc_end != -2 || pass == 1)
            goto done;
        opt.threshold_ms = threshold_ms;
        opt.threshold_known = true;
        if (io->notes && !io->quiet)
            fprintf(io->notes, "%s: the stall threshold (%.3f ms) was known only at the end: "
                               "a second pass with it\n", label, threshold_ms);
    }
    if (*complete && summary->failed) {
        /* It ran to its end, but most of its requests failed: not a run to compare. */
        *complete = false;
        *failed = true;
        analysis_failure_text(summary, why, ERR_LEN);
        meta.complete = false;
        if (d && experiment_config_write(config_path, &run_cfg, &meta, err) != 0) {
            analysis_summary_free(summary);
            goto done;
        }
    }
    if (d && write_summary(d, summary, err) != 0) {
        analysis_summary_free(summary);
        goto done;
    }
    rc = 0;
done:
    experiment_meta_free(&meta);
    tokenlog_free(&log);
    return rc;
}

int experiment_run_pair(const experiment_config *cfg, const experiment_runner *runner,
                        const experiment_io *io, experiment_pair *pair, char *err)
{
    memset(pair, 0, sizeof *pair);
    pair->complete = true;
    if (io->out_dir && fsio_mkdirs(io->out_dir, err) != 0)
        return -1;
    char why[ERR_LEN];
    bool complete = true, failed = false;
    double reference_p50 = 0;
    /* --no-inject: both runs would be one workload; the one run is the traffic alone. */
    if (!cfg->no_baseline && !cfg->wl.no_inject) {
        if (one_run(cfg, runner, io, EXPERIMENT_RUN_BASELINE, false, 0, &pair->baseline,
                    &complete, &failed, why, err) != 0)
            return -1;
        pair->have_baseline = true;
        if (!complete) {
            /* No comparison against half a baseline, nor against a failed one. */
            pair->complete = false;
            snprintf(pair->why, sizeof pair->why, "the baseline run %s: %.255s",
                     failed ? "failed" : "stopped early", why);
            return 0;
        }
        reference_p50 = pair->baseline.itl_ms.p50;
    }
    const char *label = cfg->wl.no_inject ? EXPERIMENT_RUN_TRAFFIC : EXPERIMENT_RUN_INTERFERENCE;
    if (one_run(cfg, runner, io, label, true, reference_p50, &pair->interference, &complete,
                &failed, why, err) != 0)
        return -1;
    pair->have_interference = true;
    if (!complete) {
        pair->complete = false;
        snprintf(pair->why, sizeof pair->why, "the %s run %s: %.255s", label,
                 failed ? "failed" : "stopped early", why);
    }
    if (io->out_dir) {
        char path[4200];
        if (fsio_join(path, sizeof path, io->out_dir, "comparison.json", err) != 0)
            return -1;
        json_t *cmp = analysis_comparison_to_json(pair->have_baseline ? &pair->baseline : NULL,
                                                  &pair->interference);
        int rc = fsio_write_json(path, cmp, 0, err);
        json_decref(cmp);
        if (rc != 0)
            return -1;
    }
    return 0;
}

void experiment_pair_free(experiment_pair *pair)
{
    if (pair->have_baseline)
        analysis_summary_free(&pair->baseline);
    if (pair->have_interference)
        analysis_summary_free(&pair->interference);
    pair->have_baseline = pair->have_interference = false;
}
