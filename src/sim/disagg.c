/* disagg — prefill/decode disaggregation in the simulator (sim.h, "Disaggregated prefill"):
 * the KV-link catalog, the P:D and link parsers, and the run's event loop.
 *
 * One virtual clock, several instances. The loop jumps from one instant to the next event:
 * a step's end on some instance, a KV transfer's end, an injection, an open-loop arrival.
 * At an instant t it handles, in this order: the steps ending at t (instances by index,
 * prefill instances first), the transfers ending at t (by their start), the arrivals due at t;
 * then the token events of t go out (after every request row of t, as sim.c's sink order
 * has it), then every idle instance with work starts a step at t (its row goes out then).
 * So events leave in time order and steps in start order, for the sink and the log alike.
 *
 * A step is committed to its scheduler when it starts (as sim.c does: nothing can observe
 * the difference, the instance is busy until the end), and what its end needs (which
 * request sampled, which finished) is copied then, because a sched_add to that instance
 * during the step may move the batch's items. */
#include "sim/disagg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "sim/steplog.h"

/* ---- the KV-link catalog ------------------------------------------------------------- */

typedef struct kv_link {
    const char *name;
    double bytes_per_s; /* one direction */
    int64_t latency_ns; /* per transfer: an assumed order of magnitude, not a measured one */
    const char *source;
} kv_link;

static const kv_link KV_LINKS[] = {
    /* NVIDIA H100 SXM datasheet: NVLink 4, 900 GB/s total bandwidth per GPU, which counts
     * both directions; one direction moves half. */
    {"nvlink", 450e9, 5000,
     "NVIDIA H100 datasheet: NVLink 4, 900 GB/s bidirectional per GPU -> 450 GB/s one way"},
    /* PCI-SIG PCIe 5.0: 32 GT/s a lane, 128b/130b encoding, x16 -> ~63 GB/s one way
     * (commonly quoted as 64 GB/s; 128 GB/s counts both directions). */
    {"pcie5", 64e9, 10000, "PCIe 5.0 x16: 32 GT/s x 16 lanes, ~64 GB/s one way"},
    /* A 100 Gb/s RDMA NIC (InfiniBand EDR, RoCE): 100e9 / 8 bytes/s at line rate. */
    {"rdma-100g", 12.5e9, 20000, "100 Gb/s RDMA (EDR InfiniBand / RoCE): 12.5 GB/s line rate"},
    /* A 400 Gb/s RDMA NIC (InfiniBand NDR, ConnectX-7): 400e9 / 8 bytes/s at line rate. */
    {"rdma-400g", 50e9, 20000, "400 Gb/s RDMA (NDR InfiniBand / ConnectX-7): 50 GB/s line rate"},
};
#define N_KV_LINKS (sizeof KV_LINKS / sizeof KV_LINKS[0])

void sim_kv_links_print(FILE *out)
{
    for (size_t i = 0; i < N_KV_LINKS; i++)
        fprintf(out, "  %-10s %6.1f GB/s one way, +%.0f us a transfer   %s\n", KV_LINKS[i].name,
                KV_LINKS[i].bytes_per_s / 1e9, (double)KV_LINKS[i].latency_ns / 1e3,
                KV_LINKS[i].source);
}

int sim_kv_link_parse(const char *text, sim_disagg *out, char *err)
{
    if (!text || !*text)
        return err_set(err, "empty (nvlink, pcie5, rdma-100g, rdma-400g or GB/s, "
                            "e.g. 25GB/s)");
    if (strlen(text) >= sizeof out->link)
        return err_set(err, "'%.40s...': too long", text);
    for (size_t i = 0; i < N_KV_LINKS; i++) {
        if (strcmp(text, KV_LINKS[i].name) == 0) {
            snprintf(out->link, sizeof out->link, "%s", text);
            out->link_bytes_per_s = KV_LINKS[i].bytes_per_s;
            out->link_latency_ns = KV_LINKS[i].latency_ns;
            return 0;
        }
    }
    /* A number of decimal GB/s, "GB/s" spelled exactly (Gb/s is eight times less). */
    char *end = NULL;
    double gb = strtod(text, &end);
    if (end != text && strcmp(end, "GB/s") == 0) {
        if (!(gb > 0) || !isfinite(gb) || gb > 1e6)
            return err_set(err, "'%s': the bandwidth must be above 0 (and at most "
                                "1000000 GB/s)",
                           text);
        snprintf(out->link, sizeof out->link, "%s", text);
        out->link_bytes_per_s = gb * 1e9;
        out->link_latency_ns = 0;
        return 0;
    }
    return err_set(err, "'%s': unknown link (known: nvlink, pcie5, rdma-100g, "
                        "rdma-400g, or a bandwidth such as 25GB/s)",
                   text);
}

int sim_disagg_parse(const char *text, sim_disagg *out, char *err)
{
    const char *colon = text ? strchr(text, ':') : NULL;
    if (!colon)
        return err_set(err, "'%s': expected P:D, prefill and decode instances "
                            "(e.g. 1:1)",
                       text ? text : "");
    long v[2];
    const char *part[2] = {text, colon + 1};
    for (int i = 0; i < 2; i++) {
        char *end = NULL;
        if (*part[i] < '0' || *part[i] > '9')
            end = (char *)part[i];
        else
            v[i] = strtol(part[i], &end, 10);
        const char *stop = i == 0 ? colon : part[1] + strlen(part[1]);
        if (end != stop || end == part[i])
            return err_set(err, "'%s': expected P:D, two whole numbers (e.g. 1:1)",
                           text);
        if (v[i] < 1 || v[i] > SIM_DISAGG_MAX_INSTANCES)
            return err_set(err, "'%s': %s instances must be 1 to %d", text,
                           i == 0 ? "prefill" : "decode", SIM_DISAGG_MAX_INSTANCES);
    }
    out->prefill = (int)v[0];
    out->decode = (int)v[1];
    return 0;
}

int sim_disagg_check(const sim_disagg *d, char *err)
{
    if (d->prefill == 0 && d->decode == 0)
        return 0;
    if (d->prefill < 1 || d->prefill > SIM_DISAGG_MAX_INSTANCES || d->decode < 1 ||
        d->decode > SIM_DISAGG_MAX_INSTANCES)
        return err_set(err, "disaggregation %d:%d: prefill and decode instances must be 1 to %d",
                       d->prefill, d->decode, SIM_DISAGG_MAX_INSTANCES);
    if (!(d->link_bytes_per_s > 0) || d->link_latency_ns < 0)
        return err_set(err, "disaggregation: the KV link '%s' has no bandwidth", d->link);
    return 0;
}

int64_t sim_kv_transfer_ns(const sim_disagg *d, const cost_params *cost, int prompt_tokens)
{
    const double bytes = cost_kv_bytes_per_token(cost) * (double)prompt_tokens;
    /* Rounded to the nearest ns by hand: the sim layer links no libm. */
    return (int64_t)(bytes / d->link_bytes_per_s * 1e9 + 0.5) + d->link_latency_ns;
}

int sim_disagg_gpus(const sim_disagg *d)
{
    return d->prefill > 0 ? d->prefill + d->decode : 1;
}

void sim_disagg_describe(const sim_disagg *d, char *buf, size_t size)
{
    if (d->prefill > 0)
        snprintf(buf, size, "disaggregated %dP:%dD over %s", d->prefill, d->decode, d->link);
    else if (size > 0)
        buf[0] = '\0';
}

/* ---- the run -------------------------------------------------------------------------- */

typedef enum { DG_PREFILL, DG_TRANSFER, DG_DECODE, DG_DONE } dg_phase;

/* One request: a sched_req on its prefill instance, another on its decode instance (each
 * scheduler's `user` pointer leads back here). */
typedef struct dg_req {
    sched_req pre;
    sched_req dec;
    int64_t id;
    int user;  /* -1 for the injector */
    bool open; /* holds a max_concurrency slot */
    int kind;  /* tokenlog_kind */
    int prompt_tokens, max_tokens;
    dg_phase phase;
    int delivered; /* tokens the client has */
    int64_t t_plan_ns, t_send_ns, t_first_ns, t_end_ns;
    int64_t t_ready_ns; /* the transfer's end */
    int64_t log_index;
} dg_req;

/* What a step's end needs, copied at its start. */
typedef struct dg_done {
    dg_req *req;
    bool finished; /* the item finished its request on this instance */
} dg_done;

typedef struct dg_instance {
    sched *sched;
    bool prefill;
    bool busy;
    int64_t t_end;
    dg_done *done; /* the sampling items of the running step */
    int n_done, cap_done;
    int64_t link_free_ns; /* a prefill instance: when its outgoing link is free */
} dg_instance;

typedef struct dg_state {
    const sim_config *cfg;
    const workload_plan *plan;
    tokenlog *log;
    const tokenlog_sink *sink;
    sim_stats *stats;
    dg_instance *inst; /* prefill instances, then decode instances */
    int n_inst;
    dg_req **reqs; /* every request ever created, for freeing */
    int64_t n_reqs, cap_reqs;
    dg_req **transfers; /* in flight, in start order */
    int n_transfers;
    int64_t cap_transfers;
    tokenlog_event *pending; /* the events of the current instant */
    int n_pending;
    int64_t cap_pending;
    cost_seq *seqs;
    int cap_seqs;
    int64_t *next_k;
    int64_t next_open;
    int open_in_flight;
    bool draining; /* past the duration: steps end, nothing starts */
} dg_state;

static void dg_row(const dg_req *r, tokenlog_request *row)
{
    memset(row, 0, sizeof *row);
    row->request = r->id;
    row->user = r->user;
    row->kind = r->kind;
    row->t_plan_ns = r->t_plan_ns;
    row->t_send_ns = r->t_send_ns;
    row->t_first_ns = r->t_first_ns;
    row->t_end_ns = r->t_end_ns;
    row->prompt_tokens_requested = r->prompt_tokens;
    row->prompt_tokens = r->prompt_tokens;
    row->completion_tokens = r->delivered;
    if (r->t_end_ns >= 0)
        strcpy(row->finish_reason, "length");
}

/* The request's row changed (sent, first token, end): to the sink, or into the log. */
static int dg_emit_row(dg_state *st, dg_req *r, char *err)
{
    tokenlog_request row;
    if (!st->log && !st->sink)
        return 0;
    dg_row(r, &row);
    if (st->log) {
        if (r->log_index < 0) {
            if (tokenlog_add_request(st->log, &row, &r->log_index) != 0)
                return err_set(err, "out of memory for the request log");
        } else {
            st->log->requests[r->log_index] = row;
        }
    }
    if (st->sink && st->sink->request(st->sink->ctx, &row, err) != 0)
        return -1;
    return 0;
}

/* The least loaded instance of a pool: the requests it holds, queued, running or finishing
 * in the step under way (committed at its start, so its scheduler has let them go already:
 * a prefill instance busy with a long prompt holds that prompt); ties: the lowest index. */
static int dg_pick(const dg_state *st, bool prefill)
{
    int best = -1, best_load = 0;
    for (int i = 0; i < st->n_inst; i++) {
        const dg_instance *in = &st->inst[i];
        if (in->prefill != prefill)
            continue;
        int load = sched_num_waiting(in->sched) + sched_num_running(in->sched);
        for (int k = 0; in->busy && k < in->n_done; k++)
            load += in->done[k].finished;
        if (best < 0 || load < best_load) {
            best = i;
            best_load = load;
        }
    }
    return best;
}

static dg_req *dg_new_req(dg_state *st, int prompt_tokens, int max_tokens)
{
    if (st->n_reqs == st->cap_reqs) {
        int64_t cap = st->cap_reqs ? st->cap_reqs * 2 : 1024;
        dg_req **grown = realloc(st->reqs, (size_t)cap * sizeof *grown);
        if (!grown)
            return NULL;
        st->reqs = grown;
        st->cap_reqs = cap;
    }
    dg_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    st->reqs[st->n_reqs] = r;
    r->id = st->n_reqs++;
    r->pre.user = r->dec.user = r;
    r->pre.id = r->dec.id = r->id;
    r->prompt_tokens = prompt_tokens;
    r->max_tokens = max_tokens;
    r->pre.prompt_tokens = prompt_tokens;
    r->pre.max_tokens = r->pre.min_tokens = 1; /* the prefill instance samples token 1 only */
    r->dec.prompt_tokens = prompt_tokens;
    r->dec.max_tokens = r->dec.min_tokens = max_tokens;
    r->t_first_ns = r->t_end_ns = -1;
    r->log_index = -1;
    return r;
}

static int dg_submit(dg_state *st, dg_req *r, int64_t t_plan_ns, int64_t t_ns, char *err)
{
    r->t_plan_ns = t_plan_ns;
    r->t_send_ns = t_ns;
    r->phase = DG_PREFILL;
    if (dg_emit_row(st, r, err) != 0)
        return -1;
    st->stats->requests++;
    char why[ERR_LEN];
    if (sched_add(st->inst[dg_pick(st, true)].sched, &r->pre, why) != 0)
        return err_set(err, "request %lld refused: %s", (long long)r->id, why);
    return 0;
}

static int dg_start_bg(dg_state *st, int user, int64_t t, char *err)
{
    workload_bg_request w = workload_plan_bg(st->plan, &st->cfg->wl, user, st->next_k[user]++);
    dg_req *r = dg_new_req(st, w.prompt_tokens, w.max_tokens);
    if (!r)
        return err_set(err, "out of memory");
    r->user = user;
    r->kind = TOKENLOG_BG;
    return dg_submit(st, r, t, t, err);
}

/* The open-loop arrivals planned by t, while a slot is free: sent at t (their plan, or the
 * instant a slot freed). */
static int dg_admit_open(dg_state *st, int64_t t, char *err)
{
    const int limit = st->cfg->wl.max_concurrency;
    while (st->next_open < st->plan->n_arrivals) {
        const workload_arrival *a = &st->plan->arrivals[st->next_open];
        if (a->t_ns > t || (limit > 0 && st->open_in_flight >= limit))
            break;
        dg_req *r = dg_new_req(st, a->prompt_tokens, a->max_tokens);
        if (!r)
            return err_set(err, "out of memory");
        r->user = workload_arrival_user(&st->cfg->wl, st->next_open);
        r->kind = TOKENLOG_BG;
        r->open = true;
        st->open_in_flight++;
        st->stats->open_requests++;
        if (t > a->t_ns) {
            int64_t wait = t - a->t_ns;
            st->stats->open_waited++;
            st->stats->open_wait_total_ns += wait;
            if (wait > st->stats->open_wait_max_ns)
                st->stats->open_wait_max_ns = wait;
        }
        st->next_open++;
        if (dg_submit(st, r, a->t_ns, t, err) != 0)
            return -1;
    }
    return 0;
}

/* The client receives a token of r at t. */
static int dg_deliver(dg_state *st, dg_req *r, int64_t t, bool last, char *err)
{
    if (buf_grow_items((void **)&st->pending, &st->cap_pending, st->n_pending + 1,
                       sizeof *st->pending) != 0)
        return err_set(err, "out of memory");
    st->pending[st->n_pending++] = (tokenlog_event){.t_ns = t, .request = r->id, .user = r->user,
                                                    .n_tokens = 1, .kind = r->kind};
    st->stats->token_events++;
    r->delivered++;
    bool first = r->t_first_ns < 0;
    if (first)
        r->t_first_ns = t;
    if (last) {
        r->t_end_ns = t;
        r->phase = DG_DONE;
    }
    if ((first || last) && dg_emit_row(st, r, err) != 0)
        return -1;
    if (st->log && r->log_index >= 0) /* a log's row holds the tokens so far, as sim.c's */
        st->log->requests[r->log_index].completion_tokens = r->delivered;
    if (last) {
        /* The closed user starts its next request at once; an open one frees its slot. */
        if (r->open)
            st->open_in_flight--;
        else if (r->kind == TOKENLOG_BG && dg_start_bg(st, r->user, t, err) != 0)
            return -1;
    }
    return 0;
}

static int dg_flush(dg_state *st, char *err)
{
    for (int i = 0; i < st->n_pending; i++) {
        if (st->sink && st->sink->event(st->sink->ctx, &st->pending[i], err) != 0)
            return -1;
        if (st->log) {
            const tokenlog_event *ev = &st->pending[i];
            if (tokenlog_add_event(st->log, ev) != 0)
                return err_set(err, "out of memory for the token log");
        }
    }
    st->n_pending = 0;
    return 0;
}

/* Instance i's step ends at t. */
static int dg_end_step(dg_state *st, int i, int64_t t, char *err)
{
    dg_instance *in = &st->inst[i];
    in->busy = false;
    for (int k = 0; k < in->n_done; k++) {
        dg_req *r = in->done[k].req;
        if (!in->prefill) {
            if (dg_deliver(st, r, t, in->done[k].finished, err) != 0)
                return -1;
            continue;
        }
        if (r->max_tokens == 1) {
            /* Nothing to decode: the answer is the prefill's token, sent from here. */
            if (dg_deliver(st, r, t, true, err) != 0)
                return -1;
            continue;
        }
        /* The KV leaves on this instance's link, after the transfer before it. */
        int64_t start = t > in->link_free_ns ? t : in->link_free_ns;
        r->t_ready_ns = start + sim_kv_transfer_ns(&st->cfg->disagg, &st->cfg->cost,
                                                   r->prompt_tokens);
        in->link_free_ns = r->t_ready_ns;
        r->phase = DG_TRANSFER;
        if (buf_grow_items((void **)&st->transfers, &st->cap_transfers, st->n_transfers + 1,
                           sizeof *st->transfers) != 0)
            return err_set(err, "out of memory");
        st->transfers[st->n_transfers++] = r;
    }
    in->n_done = 0;
    return 0;
}

/* The transfers that end at t: the first token reaches the client, the request joins a
 * decode instance. */
static int dg_end_transfers(dg_state *st, int64_t t, char *err)
{
    int kept = 0;
    for (int k = 0; k < st->n_transfers; k++) {
        dg_req *r = st->transfers[k];
        if (r->t_ready_ns != t) {
            st->transfers[kept++] = r;
            continue;
        }
        char why[ERR_LEN];
        if (sched_add_prefilled(st->inst[dg_pick(st, false)].sched, &r->dec, why) != 0)
            return err_set(err, "request %lld refused by the decode instance: %s",
                           (long long)r->id, why);
        r->phase = DG_DECODE;
        if (dg_deliver(st, r, t, false, err) != 0)
            return -1;
    }
    st->n_transfers = kept;
    return 0;
}

/* Instance i starts a step at t if it has work. */
static int dg_start_step(dg_state *st, int i, int64_t t, char *err)
{
    dg_instance *in = &st->inst[i];
    sched_batch batch;
    int n = sched_next(in->sched, &batch);
    if (n == 0)
        return 0;
    if (n > st->cap_seqs) {
        cost_seq *grown = realloc(st->seqs, (size_t)n * 2 * sizeof *grown);
        if (!grown)
            return err_set(err, "out of memory");
        st->seqs = grown;
        st->cap_seqs = n * 2;
    }
    for (int k = 0; k < n; k++)
        st->seqs[k] = (cost_seq){.new_tokens = batch.items[k].new_tokens,
                                 .context = batch.items[k].context,
                                 .samples = batch.items[k].samples};
    int64_t duration =
        cost_step_cells_ns(&st->cfg->cost, st->seqs, n, batch.occupied_cells, NULL);
    if (duration < 1)
        duration = 1; /* time must move */
    sched_commit(in->sched, &batch);
    if (n > in->cap_done) {
        dg_done *grown = realloc(in->done, (size_t)n * 2 * sizeof *grown);
        if (!grown)
            return err_set(err, "out of memory");
        in->done = grown;
        in->cap_done = n * 2;
    }
    in->n_done = 0;
    for (int k = 0; k < n; k++) {
        const sched_item *it = &batch.items[k];
        if (!it->samples)
            continue;
        in->done[in->n_done++] = (dg_done){.req = it->req->user,
                                           .finished = it->req->state == SCHED_FINISHED};
    }
    in->busy = true;
    in->t_end = t + duration;
    if (st->log || st->sink) {
        tokenlog_step step = {.step = st->stats->steps, .t_start_ns = t, .t_end_ns = in->t_end,
                              .decode_tokens = batch.decode_tokens,
                              .prefill_tokens = batch.prefill_tokens, .n_requests = n,
                              .modeled_ns = duration};
        if (sim_steplog_add(st->log, st->sink, &step, &batch, err) != 0)
            return -1;
    }
    st->stats->steps++;
    return 0;
}

static void dg_free(dg_state *st)
{
    for (int i = 0; st->inst && i < st->n_inst; i++) {
        if (st->inst[i].sched)
            sched_free(st->inst[i].sched);
        free(st->inst[i].done);
    }
    free(st->inst);
    for (int64_t i = 0; i < st->n_reqs; i++)
        free(st->reqs[i]);
    free(st->reqs);
    free(st->transfers);
    free(st->pending);
    free(st->seqs);
    free(st->next_k);
}

int sim_disagg_run(const sim_config *cfg, const workload_plan *plan, tokenlog *log,
                   const tokenlog_sink *sink, sim_stats *stats, char *err)
{
    dg_state st;
    memset(&st, 0, sizeof st);
    st.cfg = cfg;
    st.plan = plan;
    st.log = log;
    st.sink = sink;
    st.stats = stats;
    int64_t *inject_times = NULL;
    int rc = -1;
    if (sim_disagg_check(&cfg->disagg, err) != 0)
        return -1;

    st.n_inst = cfg->disagg.prefill + cfg->disagg.decode;
    st.inst = calloc((size_t)st.n_inst, sizeof *st.inst);
    st.next_k = calloc((size_t)cfg->wl.users + 1, sizeof *st.next_k);
    inject_times = malloc(sizeof *inject_times * WORKLOAD_MAX_INJECTIONS);
    if (!st.inst || !st.next_k || !inject_times) {
        err_set(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < st.n_inst; i++) {
        st.inst[i].prefill = i < cfg->disagg.prefill;
        if (!(st.inst[i].sched = sched_create(&cfg->sched, err)))
            goto done;
    }
    const int n_inject = workload_injection_times(&cfg->wl, inject_times, WORKLOAD_MAX_INJECTIONS);
    for (int i = 0; i < n_inject; i++)
        inject_times[i] += cfg->t0_ns; /* planned from t = 0 (a warm start's) */
    int next_inject = 0;

    for (int u = 0; u < cfg->wl.users; u++)
        if (dg_start_bg(&st, u, 0, err) != 0)
            goto done;

    int64_t t = 0;
    for (;;) {
        /* The trace's last request has finished: the run ends with it, as at the duration. */
        if (cfg->wl.until_trace_end && st.next_open >= plan->n_arrivals && st.open_in_flight == 0)
            st.draining = true;
        /* The instant's arrivals (the steps and transfers of t were handled below). */
        if (!st.draining) {
            while (next_inject < n_inject && inject_times[next_inject] <= t) {
                dg_req *r = dg_new_req(&st, cfg->wl.prompt_tokens, cfg->wl.inject_max_tokens);
                if (!r) {
                    err_set(err, "out of memory");
                    goto done;
                }
                r->user = -1;
                r->kind = TOKENLOG_INJECT;
                if (dg_submit(&st, r, inject_times[next_inject], inject_times[next_inject],
                              err) != 0)
                    goto done;
                next_inject++;
            }
            if (dg_admit_open(&st, t, err) != 0)
                goto done;
        }
        if (dg_flush(&st, err) != 0)
            goto done;
        if (!st.draining)
            for (int i = 0; i < st.n_inst; i++)
                if (!st.inst[i].busy && dg_start_step(&st, i, t, err) != 0)
                    goto done;

        /* The next instant: a step's end, a transfer's end or an arrival. */
        int64_t next = INT64_MAX;
        for (int i = 0; i < st.n_inst; i++)
            if (st.inst[i].busy && st.inst[i].t_end < next)
                next = st.inst[i].t_end;
        if (!st.draining) {
            for (int k = 0; k < st.n_transfers; k++)
                if (st.transfers[k]->t_ready_ns < next)
                    next = st.transfers[k]->t_ready_ns;
            if (next_inject < n_inject && inject_times[next_inject] < next)
                next = inject_times[next_inject];
            if (st.next_open < plan->n_arrivals && plan->arrivals[st.next_open].t_ns < next &&
                (cfg->wl.max_concurrency <= 0 || st.open_in_flight < cfg->wl.max_concurrency))
                next = plan->arrivals[st.next_open].t_ns;
        }
        if (next == INT64_MAX)
            break; /* nothing running and nothing to come */
        if (next <= t && !st.draining)
            next = t; /* an arrival planned at t that waited for a slot: handled above */
        t = next;
        if (t >= cfg->t0_ns + cfg->wl.duration_ns)
            st.draining = true; /* the steps under way end; nothing new starts */
        for (int i = 0; i < st.n_inst; i++)
            if (st.inst[i].busy && st.inst[i].t_end == t && dg_end_step(&st, i, t, err) != 0)
                goto done;
        if (!st.draining && dg_end_transfers(&st, t, err) != 0)
            goto done;
        stats->virtual_ns = t;
    }
    if (dg_flush(&st, err) != 0)
        goto done;
    for (int i = 0; i < st.n_inst; i++)
        stats->preemptions += sched_num_preemptions(st.inst[i].sched);
    /* The rows of the requests still running: their tokens so far, as a log holds them. */
    for (int64_t i = 0; sink && i < st.n_reqs; i++) {
        dg_req *r = st.reqs[i];
        if (r->phase == DG_DONE || r->t_first_ns < 0)
            continue;
        tokenlog_request row;
        dg_row(r, &row);
        if (sink->request(sink->ctx, &row, err) != 0)
            goto done;
    }
    rc = 0;
done:
    free(inject_times);
    dg_free(&st);
    return rc;
}
