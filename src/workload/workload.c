#include "workload/workload.h"

#include <math.h>
#include <string.h>

#include "common/clock.h"
#include "common/err.h"
#include "common/rng.h"

void workload_default(workload_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->users = 32;
    cfg->duration_ns = 40 * CLOCK_NS_PER_S;
    cfg->inject = true;
    cfg->inject_at_ns = 5 * CLOCK_NS_PER_S;
    cfg->inject_every_ns = 10 * CLOCK_NS_PER_S;
    cfg->prompt_tokens = 8000;
    cfg->inject_max_tokens = 16;
    /* Chat turns: short prompts, long answers. */
    cfg->prompt_len = (workload_dist){.kind = WORKLOAD_DIST_UNIFORM, .a = 32, .b = 128};
    cfg->answer_len = (workload_dist){.kind = WORKLOAD_DIST_UNIFORM, .a = 256, .b = 1024};
    cfg->seed = 1;
    cfg->turns = 1;
    cfg->burstiness = 1.0;
    cfg->speedup = 1.0;
}

/* Sarathi-Serve's two workloads (OSDI '24, its table of datasets; docs/guide/traces.md says
 * which figures are the lesson's and which are assumptions): prompt and answer lengths as
 * lognormals by median and 90th percentile. Prompts are kept under 16,000 tokens so one-step
 * prefill (the lesson's budget of 16,384) admits every one of them. */
static void open_loop_preset(workload_config *cfg, double rate, int prompt_median, int prompt_p90,
                             int answer_median, int answer_p90)
{
    cfg->users = 0;
    cfg->request_rate = rate;
    cfg->duration_ns = 60 * CLOCK_NS_PER_S;
    cfg->prompt_len = (workload_dist){.kind = WORKLOAD_DIST_LOGNORMAL, .a = prompt_median,
                                      .b = prompt_p90, .max = 16000};
    cfg->answer_len = (workload_dist){.kind = WORKLOAD_DIST_LOGNORMAL, .a = answer_median,
                                      .b = answer_p90, .max = 4096};
}

int workload_preset(workload_config *cfg, const char *name, char *err)
{
    if (strcmp(name, "lesson") == 0) {
        uint64_t seed = cfg->seed;
        workload_default(cfg);
        cfg->seed = seed ? seed : 1;
        return 0;
    }
    if (strcmp(name, "lesson-1s") == 0) {
        uint64_t seed = cfg->seed;
        workload_default(cfg);
        cfg->seed = seed ? seed : 1;
        cfg->inject_at_ns = 500 * CLOCK_NS_PER_MS;
        cfg->inject_every_ns = CLOCK_NS_PER_S;
        return 0;
    }
    if (strcmp(name, "chat") == 0 || strcmp(name, "summarization") == 0) {
        uint64_t seed = cfg->seed;
        workload_default(cfg);
        cfg->seed = seed ? seed : 1;
        if (name[0] == 'c')
            open_loop_preset(cfg, 2.0, 1730, 5696, 415, 834);
        else
            open_loop_preset(cfg, 1.0, 7060, 12985, 208, 371);
        return 0;
    }
    return err_set(err, "unknown preset '%s' (known: lesson, lesson-1s, chat, summarization)",
                   name);
}

static int check_dist(const workload_dist *d, const char *what, char *err)
{
    switch (d->kind) {
    case WORKLOAD_DIST_UNIFORM:
    case WORKLOAD_DIST_FIXED:
        if (d->a <= 0 || d->b < d->a || d->b > WORKLOAD_MAX_LEN)
            return err_set(err, "%s range %d..%d is invalid", what, d->a, d->b);
        return 0;
    case WORKLOAD_DIST_LOGNORMAL:
        if (d->a <= 0 || d->b <= d->a || d->max < d->a || d->max > WORKLOAD_MAX_LEN)
            return err_set(err, "%s: lognormal median %d, p90 %d, max %d is invalid", what, d->a,
                           d->b, d->max);
        return 0;
    case WORKLOAD_DIST_EMPIRICAL:
        if (!d->file[0])
            return err_set(err, "%s: an empirical distribution needs a file", what);
        return 0;
    }
    return err_set(err, "%s: unknown distribution", what);
}

int workload_check(const workload_config *cfg, char *err)
{
    if (cfg->users < 0 || cfg->users > 1000000)
        return err_set(err, "users must be between 0 and 1000000 (got %d)", cfg->users);
    if (cfg->duration_ns <= 0)
        return err_set(err, "duration must be positive");
    if (cfg->inject) {
        if (cfg->inject_every_ns <= 0)
            return err_set(err, "inject-every must be positive");
        if (cfg->inject_at_ns < 0)
            return err_set(err, "inject-at must not be negative");
        if (cfg->prompt_tokens <= 0)
            return err_set(err, "prompt-tokens must be positive (got %d)", cfg->prompt_tokens);
        if (cfg->inject_max_tokens <= 0)
            return err_set(err, "inject-max-tokens must be positive");
        if ((cfg->duration_ns - cfg->inject_at_ns) / cfg->inject_every_ns >
            WORKLOAD_MAX_INJECTIONS)
            return err_set(err, "more than %d injections planned", WORKLOAD_MAX_INJECTIONS);
    }
    if (check_dist(&cfg->prompt_len, "background prompt", err) != 0 ||
        check_dist(&cfg->answer_len, "background answer", err) != 0)
        return -1;
    if (!(cfg->request_rate >= 0) || !isfinite(cfg->request_rate))
        return err_set(err, "request-rate must be a rate >= 0 (got %g)", cfg->request_rate);
    if (!(cfg->burstiness > 0) || !isfinite(cfg->burstiness))
        return err_set(err, "burstiness must be positive (got %g)", cfg->burstiness);
    if (cfg->ramp_up_ns < 0)
        return err_set(err, "ramp-up must not be negative");
    if (cfg->max_concurrency < 0)
        return err_set(err, "max-concurrency must not be negative");
    if (cfg->max_requests < 0)
        return err_set(err, "max-requests must not be negative");
    if (cfg->num_prompts < 0)
        return err_set(err, "num-prompts must not be negative");
    if (cfg->num_prompts > 0 && cfg->max_requests > 0)
        return err_set(err, "--num-prompts and --max-requests both count the open-loop requests: "
                            "give one");
    if (cfg->request_rate > 0 && cfg->trace[0])
        return err_set(err, "--request-rate and --trace are two sources of open-loop arrivals: "
                            "give one");
    /* A flag that would change nothing is refused, not ignored. */
    if (!cfg->trace[0] && (cfg->trace_from_ns || cfg->trace_to_ns || cfg->trace_loop ||
                           cfg->skip_bad_rows || cfg->trace_format != TRACE_AUTO ||
                           cfg->speedup != 1.0 || cfg->tokenizer[0] || cfg->synthetic_prompts))
        return err_set(err, "--from, --to, --loop, --speedup, --trace-format, --skip-bad-rows, "
                            "--tokenizer and --synthetic-prompts need --trace");
    if (cfg->request_rate <= 0 && (cfg->ramp_up_ns > 0 || cfg->burstiness != 1.0))
        return err_set(err, "--ramp-up and --burstiness need --request-rate");
    if (!workload_open_loop(cfg) && (cfg->max_concurrency > 0 || cfg->max_requests > 0))
        return err_set(err, "--max-concurrency and --max-requests apply to open-loop requests: "
                            "they need --request-rate, --num-prompts or --trace");
    if (cfg->trace[0]) {
        if (!(cfg->speedup > 0) || !isfinite(cfg->speedup))
            return err_set(err, "speedup must be positive (got %g)", cfg->speedup);
        if (cfg->trace_from_ns < 0 || cfg->trace_to_ns < 0)
            return err_set(err, "--from and --to must not be negative");
        if (cfg->trace_to_ns > 0 && cfg->trace_to_ns <= cfg->trace_from_ns)
            return err_set(err, "--to must be after --from");
        if (cfg->trace_format < TRACE_AUTO || cfg->trace_format > TRACE_JSONL)
            return err_set(err, "unknown trace format %d", cfg->trace_format);
        if (cfg->until_trace_end && cfg->trace_loop && cfg->num_prompts == 0)
            return err_set(err, "--loop repeats the trace until --duration (or --num-prompts): "
                                "give one");
    }
    if (cfg->until_trace_end) {
        if (!cfg->trace[0] && cfg->num_prompts == 0)
            return err_set(err, "until_trace_end needs --trace or --num-prompts");
        if (cfg->shard.count > 0)
            return err_set(err, "shards need a fixed --duration (every shard stops at the same "
                                "time): not --num-prompts, nor a trace without --duration");
    }
    if (cfg->system_prompt_tokens < 0 || cfg->system_prompt_tokens > WORKLOAD_MAX_LEN)
        return err_set(err, "system-prompt-tokens must be between 0 and %d (got %d)",
                       WORKLOAD_MAX_LEN, cfg->system_prompt_tokens);
    if (cfg->turns < 0 || cfg->turns > WORKLOAD_MAX_TURNS)
        return err_set(err, "turns must be between 1 and %d (got %d)", WORKLOAD_MAX_TURNS,
                       cfg->turns);
    if (cfg->think_time_ns < 0)
        return err_set(err, "think-time must not be negative");
    if (cfg->users == 0 && (cfg->turns > 1 || cfg->think_time_ns > 0))
        return err_set(err, "--turns and --think-time shape the closed users' conversations: "
                            "they need --users");
    if (cfg->shard.count < 0 || cfg->shard.count > WORKLOAD_MAX_SHARDS)
        return err_set(err, "shard count must be between 1 and %d (got %d)", WORKLOAD_MAX_SHARDS,
                       cfg->shard.count);
    if (cfg->shard.count > 0 && (cfg->shard.index < 0 || cfg->shard.index >= cfg->shard.count))
        return err_set(err, "shard %d/%d: the index must be between 0 and %d", cfg->shard.index,
                       cfg->shard.count, cfg->shard.count - 1);
    if (cfg->shard.count > cfg->users && !workload_open_loop(cfg))
        return err_set(err, "%d shards for %d user%s: a shard without users measures nothing "
                            "(at most one shard per user)",
                       cfg->shard.count, cfg->users, cfg->users == 1 ? "" : "s");
    return 0;
}

bool workload_injects(const workload_config *cfg)
{
    return cfg->inject && !cfg->no_inject;
}

bool workload_open_loop(const workload_config *cfg)
{
    return cfg->request_rate > 0 || cfg->trace[0] != '\0' || cfg->num_prompts > 0;
}

bool workload_drawn_arrivals(const workload_config *cfg)
{
    return cfg->request_rate > 0 || (cfg->num_prompts > 0 && !cfg->trace[0]);
}

int64_t workload_request_cap(const workload_config *cfg)
{
    return cfg->num_prompts > 0 ? cfg->num_prompts : cfg->max_requests;
}

/* Round-robin rather than contiguous blocks: with users ramped or added later the shards
 * stay within one user of each other, and a shard's users are spread over the id range as
 * the single-process run's are. */
bool workload_shard_has_user(const workload_config *cfg, int user)
{
    return cfg->shard.count <= 1 || user % cfg->shard.count == cfg->shard.index;
}

bool workload_shard_has_injector(const workload_config *cfg)
{
    return cfg->shard.count <= 1 || cfg->shard.index == 0;
}

bool workload_shard_has_arrival(const workload_config *cfg, int64_t index)
{
    return cfg->shard.count <= 1 || index % cfg->shard.count == cfg->shard.index;
}

int workload_shard_concurrency(const workload_config *cfg, int index)
{
    int n = cfg->shard.count, limit = cfg->max_concurrency;
    if (limit <= 0 || n <= 1)
        return limit;
    int share = limit / n + (index < limit % n ? 1 : 0);
    return share > 0 ? share : 1;
}

int workload_analysis_users(const workload_config *cfg)
{
    return workload_open_loop(cfg) ? 0 : workload_shard_users(cfg, cfg->shard.index);
}

int32_t workload_arrival_user(const workload_config *cfg, int64_t index)
{
    return (int32_t)(cfg->users + index);
}

int workload_shard_users(const workload_config *cfg, int index)
{
    int n = cfg->shard.count;
    if (n <= 1)
        return cfg->users;
    if (index < 0 || index >= n || cfg->users <= 0)
        return 0;
    return cfg->users / n + (index < cfg->users % n ? 1 : 0);
}

int workload_injection_times(const workload_config *cfg, int64_t *out, int max)
{
    if (!workload_injects(cfg) || cfg->inject_every_ns <= 0)
        return 0;
    int n = 0;
    if (cfg->inject_poisson) {
        uint64_t state = rng_hash3(cfg->seed, 0x9015502ULL, 0);
        double t = (double)cfg->inject_at_ns;
        while (t < (double)cfg->duration_ns && n < max) {
            out[n++] = (int64_t)t;
            /* 1 - u is in (0, 1]: the log is finite. */
            t += -log(1.0 - rng_uniform(&state)) * (double)cfg->inject_every_ns;
        }
        return n;
    }
    for (int64_t t = cfg->inject_at_ns; t < cfg->duration_ns && n < max; t += cfg->inject_every_ns)
        out[n++] = t;
    return n;
}

workload_bg_request workload_bg(const workload_config *cfg, int user, int64_t k)
{
    uint64_t state = rng_hash3(cfg->seed, (uint64_t)user + 1, (uint64_t)k);
    workload_bg_request r;
    r.prompt_tokens = workload_dist_draw(&cfg->prompt_len, NULL, 0, &state);
    r.max_tokens = workload_dist_draw(&cfg->answer_len, NULL, 0, &state);
    return r;
}

int workload_typical_context(const workload_config *cfg)
{
    return workload_dist_median(&cfg->prompt_len) + workload_dist_median(&cfg->answer_len) / 2;
}
