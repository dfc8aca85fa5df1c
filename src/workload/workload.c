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
    cfg->bg_prompt_min = 32;
    cfg->bg_prompt_max = 128;
    cfg->bg_answer_min = 256;
    cfg->bg_answer_max = 1024;
    cfg->seed = 1;
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
    return err_set(err, "unknown preset '%s' (known: lesson, lesson-1s)", name);
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
    if (cfg->bg_prompt_min <= 0 || cfg->bg_prompt_max < cfg->bg_prompt_min)
        return err_set(err, "background prompt range %d..%d is invalid", cfg->bg_prompt_min,
                       cfg->bg_prompt_max);
    if (cfg->bg_answer_min <= 0 || cfg->bg_answer_max < cfg->bg_answer_min)
        return err_set(err, "background answer range %d..%d is invalid", cfg->bg_answer_min,
                       cfg->bg_answer_max);
    if (cfg->shard.count < 0 || cfg->shard.count > WORKLOAD_MAX_SHARDS)
        return err_set(err, "shard count must be between 1 and %d (got %d)", WORKLOAD_MAX_SHARDS,
                       cfg->shard.count);
    if (cfg->shard.count > 0 && (cfg->shard.index < 0 || cfg->shard.index >= cfg->shard.count))
        return err_set(err, "shard %d/%d: the index must be between 0 and %d", cfg->shard.index,
                       cfg->shard.count, cfg->shard.count - 1);
    if (cfg->shard.count > cfg->users)
        return err_set(err, "%d shards for %d user%s: a shard without users measures nothing "
                            "(at most one shard per user)",
                       cfg->shard.count, cfg->users, cfg->users == 1 ? "" : "s");
    return 0;
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
    if (!cfg->inject || cfg->inject_every_ns <= 0)
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
    r.prompt_tokens = (int)rng_range(&state, cfg->bg_prompt_min, cfg->bg_prompt_max);
    r.max_tokens = (int)rng_range(&state, cfg->bg_answer_min, cfg->bg_answer_max);
    return r;
}

void workload_prompt_ids(const workload_config *cfg, int is_inject, int64_t index, int32_t *ids,
                         int n, int vocab)
{
    uint64_t state = rng_hash3(cfg->seed, is_inject ? 0x1a7ec7ULL : 0xb9ULL, (uint64_t)index);
    /* Keep away from id 0..99, which servers often reserve for special tokens. */
    int lo = vocab > 1000 ? 100 : 0;
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)rng_range(&state, lo, vocab - 1);
}

int workload_typical_context(const workload_config *cfg)
{
    return (cfg->bg_prompt_min + cfg->bg_prompt_max) / 2 +
           (cfg->bg_answer_min + cfg->bg_answer_max) / 4;
}
