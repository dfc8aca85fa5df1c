#include "client/driver.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "client/driver_loop.h"
#include "common/buf.h"
#include "common/err.h"

static void *loop_thread(void *arg)
{
    driver_loop_run(arg);
    return NULL;
}

/* ---- putting the segments together ---------------------------------------------------- */

/* The k-way merge (tokenlog_merge): the loops' ordered segments into log, requests first
 * (their ids become their rows in log), then events unless they were dropped as they were
 * written (the log then gets the requests only). */
static int merge_segments(driver_shared *ph, tokenlog *log, char *err)
{
    tokenlog **parts = malloc((size_t)ph->n_loops * sizeof *parts);
    if (!parts)
        return err_set(err, "out of memory merging the token log");
    for (int i = 0; i < ph->n_loops; i++)
        parts[i] = &ph->loops[i].seg;
    int rc = tokenlog_merge(parts, ph->n_loops, !atomic_load(&ph->dropping), log, err);
    free(parts);
    return rc;
}

/* The loops' totals into res. */
static void sum_results(driver_shared *ph, driver_result *res, const char **first_violation)
{
    int64_t first_at = INT64_MAX;
    *first_violation = NULL;
    for (int i = 0; i < ph->n_loops; i++) {
        driver_loop *l = &ph->loops[i];
        res->requests += l->res.requests;
        res->errors += l->res.errors;
        res->tokens += l->res.tokens;
        res->injections_sent += l->res.injections_sent;
        res->open_requests += l->res.open_requests;
        res->open_waited += l->res.open_waited;
        res->open_wait_total_ns += l->res.open_wait_total_ns;
        if (l->res.open_wait_max_ns > res->open_wait_max_ns)
            res->open_wait_max_ns = l->res.open_wait_max_ns;
        res->prompt_mismatches += l->res.prompt_mismatches;
        res->protocol_violations += l->res.protocol_violations;
        for (int k = 0; k < CHUNK_VIOLATION_KINDS; k++)
            res->violations_by_kind[k] += l->res.violations_by_kind[k];
        for (int k = 0; k < TRANSPORT_STAMP_KINDS; k++)
            res->stamps[k] += l->res.stamps[k];
        if (l->t_end_ns > res->t_end_ns)
            res->t_end_ns = l->t_end_ns;
        if (l->first_violation && l->first_violation_ns < first_at) {
            first_at = l->first_violation_ns;
            *first_violation = l->first_violation;
        }
        if (l->res.n_fidelity == 0)
            continue;
        if (buf_grow_items((void **)&res->fidelity_ms, &res->cap_fidelity,
                           res->n_fidelity + l->res.n_fidelity, sizeof *res->fidelity_ms) != 0)
            continue; /* the self-check is optional */
        memcpy(res->fidelity_ms + res->n_fidelity, l->res.fidelity_ms,
               (size_t)l->res.n_fidelity * sizeof *res->fidelity_ms);
        res->n_fidelity += l->res.n_fidelity;
    }
}

/* This shard's users (every user when the run is not sharded): workload_shard_has_user. */
static int shard_users(const workload_config *wl)
{
    int n = 0;
    for (int u = 0; u < wl->users; u++)
        n += workload_shard_has_user(wl, u);
    return n;
}

/* Users to loops: the k-th of this shard's users runs on background loop k mod n_bg, so
 * every loop has its share whatever the count, and a user's loop depends only on (u, n_bg,
 * the shard). */
static int assign_users(driver_shared *ph)
{
    const workload_config *wl = ph->wl;
    const int users = wl->users > 0 ? wl->users : 0;
    ph->user_table = malloc((size_t)(users > 0 ? users : 1) * sizeof *ph->user_table);
    if (!ph->user_table)
        return -1;
    int at = 0;
    for (int i = 0; i < ph->n_bg; i++) {
        driver_loop *l = &ph->loops[i];
        l->users = ph->user_table + at;
        for (int u = 0, k = 0; u < users; u++)
            if (workload_shard_has_user(wl, u) && k++ % ph->n_bg == i)
                ph->user_table[at++] = u;
        l->n_users = (int)(ph->user_table + at - l->users);
    }
    return 0;
}

/* Open-loop arrivals to open loops: this shard's (workload_shard_has_arrival), the k-th of
 * them on open loop k mod n_open, each loop's in time order (the plan's). */
static int assign_arrivals(driver_shared *ph)
{
    const workload_config *wl = ph->wl;
    const int64_t n = ph->wplan.n_arrivals;
    ph->open_table = malloc((size_t)(n > 0 ? n : 1) * sizeof *ph->open_table);
    if (!ph->open_table)
        return -1;
    int64_t at = 0;
    const int limit = workload_shard_concurrency(wl, wl->shard.index);
    for (int j = 0; j < ph->n_open; j++) {
        driver_loop *l = &ph->loops[ph->n_bg + j];
        l->open_idx = ph->open_table + at;
        for (int64_t i = 0, k = 0; i < n; i++)
            if (workload_shard_has_arrival(wl, i) && k++ % ph->n_open == j)
                ph->open_table[at++] = i;
        l->n_open = ph->open_table + at - l->open_idx;
        l->open_limit = limit;
    }
    return 0;
}

int driver_run_phase(const driver_transports *transports, const driver_phase *cfg, tokenlog *log,
                     driver_result *res, char *err)
{
    const workload_config *wl = cfg->wl;
    memset(res, 0, sizeof *res);
    driver_shared ph;
    memset(&ph, 0, sizeof ph);
    ph.cfg = cfg;
    ph.wl = wl;
    ph.error_limit = wl->users * 4 > 64 ? wl->users * 4 : 64;
    ph.first_request = log->n_requests;
    atomic_init(&ph.stop, false);
    atomic_init(&ph.consecutive_errors, 0);
    atomic_init(&ph.next_request, 0);
    atomic_init(&ph.held_events, 0);
    atomic_init(&ph.dropping, false);
    atomic_init(&ph.open_left, 0);
    atomic_init(&ph.drained, false);
    const int users = shard_users(wl) > 0 ? shard_users(wl) : 1;
    ph.n_bg = cfg->threads > 0 ? cfg->threads : 1;
    if (ph.n_bg > users)
        ph.n_bg = users;
    int status = -1, n_started = 0;
    bool mutex = false;
    if (workload_plan_build(wl, &ph.wplan, err) != 0)
        return -1;
    if (cfg->record && workload_open_loop(wl))
        workload_plan_describe(&ph.wplan, wl, res->open_plan, sizeof res->open_plan);
    int64_t mine = 0;
    for (int64_t i = 0; i < ph.wplan.n_arrivals; i++)
        mine += workload_shard_has_arrival(wl, i);
    res->open_planned = mine;
    atomic_store(&ph.open_left, mine);
    if (mine > 0) /* one loop keeps the arrivals first come, first served under a limit */
        ph.n_open = wl->max_concurrency > 0 ? 1 : (cfg->threads > 0 ? cfg->threads : 1);
    ph.n_loops = ph.n_bg + ph.n_open + (workload_injects(wl) ? 1 : 0);
    if (workload_injects(wl)) {
        int64_t max = (wl->duration_ns - wl->inject_at_ns) / wl->inject_every_ns + 2;
        ph.plan = malloc((size_t)(max > 1 ? max : 1) * sizeof *ph.plan);
        if (!ph.plan)
            goto oom;
        if (workload_shard_has_injector(wl)) /* the injector runs in one shard */
            ph.n_plan = workload_injection_times(wl, ph.plan, (int)(max > 1 ? max : 1));
    }
    if (!(ph.loops = calloc((size_t)ph.n_loops, sizeof *ph.loops)) || assign_users(&ph) != 0 ||
        assign_arrivals(&ph) != 0)
        goto oom;
    for (int i = 0; i < ph.n_loops; i++)
        if (driver_loop_init(&ph, i) != 0)
            goto oom;
    if (pthread_mutex_init(&ph.mu, NULL) != 0) {
        err_set(err, "cannot create a lock");
        goto done;
    }
    mutex = true;
    for (int i = 0; i < ph.n_loops; i++) {
        if (transports->open(transports->ctx, i, &ph.loops[i].t, err) != 0)
            goto done;
        ph.loops[i].opened = true;
    }
    ph.t_start = ph.loops[0].t.now(ph.loops[0].t.impl);
    ph.t0 = ph.t_start + (cfg->warmup_ns > 0 ? cfg->warmup_ns : 0);
    ph.t_stop = ph.t0 + wl->duration_ns;
    res->t0_ns = ph.t0;
    if (cfg->on_t0)
        cfg->on_t0(cfg->t0_ctx, ph.t0);
    for (int i = 1; i < ph.n_loops; i++) {
        int rc = pthread_create(&ph.loops[i].thread, NULL, loop_thread, &ph.loops[i]);
        if (rc != 0) {
            err_set(err, "cannot start client thread %d: %s", i, strerror(rc));
            atomic_store(&ph.stop, true);
            break;
        }
        ph.loops[i].started = true;
        n_started++;
    }
    if (n_started == ph.n_loops - 1)
        driver_loop_run(&ph.loops[0]);
    for (int i = 1; i < ph.n_loops; i++)
        if (ph.loops[i].started)
            pthread_join(ph.loops[i].thread, NULL);
    if (n_started < ph.n_loops - 1)
        goto done; /* err says which thread */
    for (int i = 0; i < ph.n_loops; i++)
        if (ph.loops[i].status != 0) {
            err_set(err, "%s", ph.loops[i].err);
            goto done;
        }
    const char *first_violation;
    sum_results(&ph, res, &first_violation);
    /* Nothing recorded, and every request since the last token failed (the warm-up's, its
     * users still backing off when a short run ended): no run to report, and the reason. */
    const int64_t in_a_row = atomic_load(&ph.consecutive_errors);
    if (cfg->record && !ph.failed && res->requests == 0 && in_a_row > 0) {
        ph.failed = true;
        snprintf(ph.error, sizeof ph.error,
                 "no request was recorded: the %lld before t = 0 failed, the last with: %s",
                 (long long)in_a_row, ph.last_error);
    }
    res->complete = !ph.failed;
    res->drained = atomic_load(&ph.drained);
    res->events_dropped = atomic_load(&ph.dropping);
    snprintf(res->error, sizeof res->error, "%s", ph.error);
    if (cfg->record && merge_segments(&ph, log, err) != 0)
        goto done;
    if (cfg->progress && ph.loops[0].recording) { /* not when stopped before t = 0 */
        driver_progress p = driver_loop_figures(&ph, res->t_end_ns);
        p.active = 0;
        p.final = true; /* the rate over the whole run, not the last interval's */
        p.tokens_per_s = p.elapsed_ns > 0 ? (double)p.tokens * 1e9 / (double)p.elapsed_ns : 0;
        cfg->progress(cfg->progress_ctx, &p);
    }
    if (cfg->record && res->protocol_violations > 0 && cfg->notes)
        fprintf(cfg->notes,
                "warning: %lld protocol violations from the server, ignored (the first: %s; "
                "see docs/reference/run.md)\n",
                (long long)res->protocol_violations, first_violation ? first_violation : "?");
    if (cfg->record && res->violations_by_kind[CHUNK_VIOLATION_ABOVE_STREAM] > 0 && cfg->notes)
        fprintf(cfg->notes,
                "warning: %lld usage counts claimed more completion tokens than were streamed: "
                "refused; requests.csv, the throughputs and tokens.csv count what streamed\n",
                (long long)res->violations_by_kind[CHUNK_VIOLATION_ABOVE_STREAM]);
    if (cfg->record && res->prompt_mismatches > 0 && cfg->notes)
        fprintf(cfg->notes,
                "warning: %d requests had a server-counted prompt more than 2 %% off the "
                "requested length\n",
                res->prompt_mismatches);
    status = 0;
    goto done;
oom:
    err_set(err, "out of memory");
done:
    for (int i = 0; ph.loops && i < ph.n_loops; i++) {
        if (ph.loops[i].opened)
            transports->close(transports->ctx, i, &ph.loops[i].t);
        driver_loop_free(&ph.loops[i]);
    }
    if (mutex)
        pthread_mutex_destroy(&ph.mu);
    free(ph.loops);
    free(ph.user_table);
    free(ph.open_table);
    free(ph.plan);
    workload_plan_free(&ph.wplan);
    if (status != 0)
        driver_result_free(res);
    return status;
}

void driver_result_free(driver_result *res)
{
    free(res->fidelity_ms);
    res->fidelity_ms = NULL;
    res->n_fidelity = res->cap_fidelity = 0;
}
