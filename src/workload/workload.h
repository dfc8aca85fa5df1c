/* workload — what the experiment sends, as a pure description plus its arrival plan.
 *
 * Background users: closed loop. Each of `users` users sends a short prompt with a long
 * answer (ignore_eos, max_tokens), and starts its next request the moment an answer
 * ends. Prompt and answer lengths are drawn uniformly from [min, max] by a hash of
 * (seed, user, request index), so draws never depend on timing and restarts never
 * synchronise. Users start at t = 0, or spread over `ramp` when it is set.
 * Injector: open loop on an absolute schedule. One prompt of `prompt_tokens` tokens at
 * t = inject_at, inject_at + inject_every, ... while t < duration; a late or slow
 * injection never delays the next one. */
#ifndef STALLSCOPE_WORKLOAD_H
#define STALLSCOPE_WORKLOAD_H
#include <stdbool.h>
#include <stdint.h>

#define WORKLOAD_MAX_INJECTIONS 100000
#define WORKLOAD_MAX_SHARDS 4096

/* Shards (docs/distributed.md): one experiment's load split over N processes, each on its
 * own machine if need be. The rule is round-robin: background user u runs in shard
 * u mod N, the injector in shard 0. User ids stay global (user 5 is user 5 in every shard's
 * files and in the merged run), so each shard draws exactly the prompts and answers the
 * single-process run would. count 0 means not sharded: one process runs everything. */
typedef struct workload_shard {
    int index; /* this process's shard, 0 .. count - 1 */
    int count; /* shards in the experiment; 0: not sharded */
} workload_shard;

typedef struct workload_config {
    int users;
    int64_t duration_ns;
    bool inject;              /* false: the baseline */
    int64_t inject_at_ns;     /* first injection */
    int64_t inject_every_ns;  /* period (the mean gap when inject_poisson) */
    bool inject_poisson;      /* exponential gaps from inject_at instead of a fixed period */
    int prompt_tokens;        /* each injection's prompt */
    int inject_max_tokens;    /* each injection's answer */
    int bg_prompt_min, bg_prompt_max; /* background prompt tokens */
    int bg_answer_min, bg_answer_max; /* background answer tokens */
    uint64_t seed;
    workload_shard shard;     /* which users and injections this process runs */
} workload_config;

typedef struct workload_bg_request {
    int prompt_tokens;
    int max_tokens;
} workload_bg_request;

/* The lesson: 32 users, 8,000-token prompts at 5, 15, 25, 35 s, 40 s. */
void workload_default(workload_config *cfg);
/* Apply a named preset over cfg: "lesson" (the default) or "lesson-1s" (every 1 s from
 * 0.5 s, the run where p99 moves). -1 with err listing presets when unknown. */
int workload_preset(workload_config *cfg, const char *name, char *err);
/* Check every field: positive users and duration, positive period, min <= max ... */
int workload_check(const workload_config *cfg, char *err);

/* Whether this process runs background user `user` (0 .. users - 1), and the injector. */
bool workload_shard_has_user(const workload_config *cfg, int user);
bool workload_shard_has_injector(const workload_config *cfg);
/* Background users shard `index` runs (the whole workload's users when not sharded). */
int workload_shard_users(const workload_config *cfg, int index);

/* Planned injection send times (ns from t = 0), ascending; returns the count (0 when
 * !inject), at most max. */
int workload_injection_times(const workload_config *cfg, int64_t *out, int max);
/* The context a background request typically holds mid-answer: a middling prompt plus half
 * a middling answer (what the cost model's spike arithmetic assumes for every decode). */
int workload_typical_context(const workload_config *cfg);
/* The k-th request of background user `user` (both from 0). */
workload_bg_request workload_bg(const workload_config *cfg, int user, int64_t k);
/* Prompt token ids for a request, deterministic and unique per (seed, kind, index) so no
 * prefix cache can hide a prefill: fills ids[0..n). */
void workload_prompt_ids(const workload_config *cfg, int is_inject, int64_t index, int32_t *ids,
                         int n, int vocab);

#endif
