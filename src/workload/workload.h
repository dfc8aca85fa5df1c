/* workload — what the experiment sends, as a pure description plus its arrival plan.
 *
 * Background users: closed loop. Each of `users` users sends a prompt with an answer
 * (ignore_eos, max_tokens), and starts its next request the moment an answer ends. Prompt
 * and answer lengths are drawn from the distributions prompt_len and answer_len (uniform
 * 32..128 and 256..1024 by default) by a hash of (seed, user, request index), so draws never
 * depend on timing and restarts never synchronise. Users start at t = 0. With turns > 1 a
 * user's requests are the turns of conversations (each prompt the history so far plus the
 * drawn message; workload_conv_next), with think_time_ns between an answer and the next.
 * Open-loop background (docs/guide/traces.md): requests arrive on their own schedule, whatever
 * is still running: at request_rate per second (gamma inter-arrival times of shape
 * `burstiness`, 1 = Poisson, the rate ramped up linearly over ramp_up_ns), or at the times a
 * trace file gives (Azure, BurstGPT, Mooncake, plain JSONL; trace.h). Each open-loop request
 * is a stream of its own (user id users + its index in the plan). With max_concurrency an
 * arrival waits for one of that many slots. Rate arrivals draw their lengths from the same
 * distributions (seed, arrival index); trace rows carry their own.
 * Injector: open loop on an absolute schedule. One prompt of `prompt_tokens` tokens at
 * t = inject_at, inject_at + inject_every, ... while t < duration; a late or slow
 * injection never delays the next one. It composes with every background source. */
#ifndef STALLSCOPE_WORKLOAD_H
#define STALLSCOPE_WORKLOAD_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "workload/trace.h"

#define WORKLOAD_MAX_INJECTIONS 100000
/* Open-loop requests of one run at most (24 bytes each in the plan). */
#define WORKLOAD_MAX_ARRIVALS 10000000
#define WORKLOAD_MAX_SHARDS 4096
#define WORKLOAD_MAX_TURNS 10000
/* A trace replayed to its end (until_trace_end) lasts at most this long after its last
 * request's planned send: a server that never finishes it cannot hold the run forever. */
#define WORKLOAD_TRACE_TAIL_NS (600LL * 1000000000LL)
/* --num-prompts without --duration: at most this long after the last planned send (the
 * requests may queue for a --max-concurrency slot long after their planned send). */
#define WORKLOAD_NUM_PROMPTS_TAIL_NS (3600LL * 1000000000LL)

/* Shards (docs/guide/shards.md): one experiment's load split over N processes, each on its
 * own machine if need be. The rule is round-robin: background user u runs in shard
 * u mod N, the injector in shard 0. User ids stay global (user 5 is user 5 in every shard's
 * files and in the merged run), so each shard draws exactly the prompts and answers the
 * single-process run would. Open-loop request i (its index in the whole plan) runs in shard
 * i mod N, and each shard honours its share of max_concurrency (workload_shard_concurrency).
 * count 0 means not sharded: one process runs everything. */
typedef struct workload_shard {
    int index; /* this process's shard, 0 .. count - 1 */
    int count; /* shards in the experiment; 0: not sharded */
} workload_shard;

/* A length distribution (tokens), as --prompt-len / --answer-len spell it:
 *   fixed:N             always N
 *   uniform:A-B         uniform integers in [A, B] (also "A..B", the older flags' form)
 *   lognormal:M,P90[,MAX]  median M and 90th percentile P90 (> M): ln x is normal with
 *                       mu = ln M, sigma = ln(P90 / M) / 1.2816; draws are rounded and kept
 *                       in [1, MAX] (default MAX: the 99.9th percentile, rounded up)
 *   empirical:FILE      a value of FILE, uniformly: one integer per line, or the first field
 *                       of a CSV line (a first line that is not a number is a header);
 *   empirical:FILE@COL  the CSV column named COL in the header
 * Every value is in [1, 2^24]. */
typedef enum {
    WORKLOAD_DIST_UNIFORM = 0,
    WORKLOAD_DIST_FIXED,
    WORKLOAD_DIST_LOGNORMAL,
    WORKLOAD_DIST_EMPIRICAL,
} workload_dist_kind;

#define WORKLOAD_MAX_LEN (1 << 24)

typedef struct workload_dist {
    int kind;       /* workload_dist_kind */
    int a, b;       /* fixed: a; uniform: [a, b]; lognormal: median a, p90 b */
    int max;        /* lognormal: draws above are max; empirical: the file's largest (loaded) */
    char file[256]; /* empirical: FILE[@COL] */
} workload_dist;

/* Parse "fixed:N", "uniform:A-B", "lognormal:M,P90[,MAX]", "empirical:FILE[@COL]" (also a
 * bare "A..B" or "N": uniform, fixed). 0, or -1 with err. An empirical file is not read
 * here (workload_plan_build and workload_dist_load do). */
int workload_dist_parse(const char *text, workload_dist *out, char *err);
/* The text workload_dist_parse reads back to the same distribution. */
void workload_dist_format(const workload_dist *d, char *buf, size_t size);
/* The largest value d can draw (empirical: its max, once loaded; else 0), and its median
 * (empirical: 0 until loaded; the typical-context arithmetic). */
int workload_dist_max(const workload_dist *d);
int workload_dist_median(const workload_dist *d);
/* One draw from d with *state (rng). values/n_values: the empirical table (NULL, 0 else). */
int workload_dist_draw(const workload_dist *d, const int32_t *values, int64_t n_values,
                       uint64_t *state);
/* Read an empirical distribution's file: its values (malloc'ed), their count, and d->max.
 * 0, or -1 with err "FILE:LINE: why". */
int workload_dist_load(workload_dist *d, int32_t **values, int64_t *n_values, char *err);

/* One gamma variate of shape k and mean 1 (k = 1: exponential), from *state. */
double workload_gamma_unit(double shape, uint64_t *state);

typedef struct workload_config {
    int users;
    int64_t duration_ns;
    bool inject;              /* false: the baseline */
    bool no_inject;           /* --no-inject: no injector in either run (no baseline needed) */
    int64_t inject_at_ns;     /* first injection */
    int64_t inject_every_ns;  /* period (the mean gap when inject_poisson) */
    bool inject_poisson;      /* exponential gaps from inject_at instead of a fixed period */
    int prompt_tokens;        /* each injection's prompt */
    int inject_max_tokens;    /* each injection's answer */
    workload_dist prompt_len; /* background prompt tokens (closed users and rate arrivals) */
    workload_dist answer_len; /* background answer tokens */
    uint64_t seed;
    /* open loop at a rate (0: none) */
    double request_rate;      /* requests per second once ramped up */
    double burstiness;        /* gamma shape of the inter-arrival times; 1: Poisson */
    int64_t ramp_up_ns;       /* the rate grows linearly from 0 over this (0: at once) */
    int max_concurrency;      /* open-loop requests in flight at most (0: no limit) */
    /* open loop from a trace file ("" none) */
    char trace[512];
    int trace_format;         /* trace_format; TRACE_AUTO sniffs the first line */
    double speedup;           /* trace time / run time (2: twice as fast) */
    int64_t trace_from_ns, trace_to_ns; /* the window of trace time, re-based to 0 (to 0: end) */
    bool trace_loop;          /* repeat the (windowed) trace until duration */
    /* The run ends once every open-loop request (of the trace, or of --num-prompts) has been
     * sent and has finished (the runners stop there; duration_ns is then only its cap):
     * --trace without --duration, and --num-prompts (experiment_resolve sets both). */
    bool until_trace_end;
    bool skip_bad_rows;       /* skip and count bad rows instead of failing on the first */
    int64_t max_requests;     /* open-loop requests at most (0: no cap) */
    /* --tokenizer FILE: the target's tokenizer.json, counting a JSONL trace's "prompt"
     * texts as the target does (tokenizer.h; "": one token per 4 bytes) */
    char tokenizer[512];
    /* --synthetic-prompts: a JSONL trace's "prompt" texts are counted, not sent: each
     * request gets a made-up prompt of that length (unique, so no prefix cache shortens it) */
    bool synthetic_prompts;
    /* --num-prompts (vllm bench serve's): exactly this many open-loop requests, the run
     * ending once every one has finished (until_trace_end; 0: none). Drawn at request_rate,
     * or all at t = 0 without one (vLLM's --request-rate inf; max_concurrency then meters
     * them), or a trace's first rows. */
    int64_t num_prompts;
    workload_shard shard;     /* which users and injections this process runs */
    /* Shared prefixes (docs/guide/traces.md, "Shared prefixes"): every background
     * request starts with the same system_prompt_tokens tokens (0: none); each closed user
     * holds conversations of `turns` turns (1: single-turn requests), turn t's prompt the
     * system prompt, the earlier turns' messages and answers, and its own message; it waits
     * think_time_ns after each answer before its next request (0: at once). */
    int system_prompt_tokens;
    int turns;
    int64_t think_time_ns;
    /* A conversation ends early when its next prompt + answer would exceed max_context (the
     * server's max_model_len), or its next prompt max_prompt (the token budget of a policy
     * that prefills a prompt in one step). Set by experiment_resolve (0: no bound); not
     * flags. */
    int max_context;
    int max_prompt;
} workload_config;

typedef struct workload_bg_request {
    int prompt_tokens;
    int max_tokens;
} workload_bg_request;

/* The lesson: 32 users, 8,000-token prompts at 5, 15, 25, 35 s, 40 s. */
void workload_default(workload_config *cfg);
/* Apply a named preset over cfg: "lesson" (the default), "lesson-1s" (every 1 s from
 * 0.5 s, the run where p99 moves), "chat" or "summarization" (open loop at 2 and 1
 * requests/s, 60 s, no closed users, lognormal lengths of Sarathi-Serve's two workloads:
 * docs/guide/traces.md; the injector stays). -1 with err listing presets when unknown. */
int workload_preset(workload_config *cfg, const char *name, char *err);
/* Check every field: users and duration, the injector's period, the distributions, the
 * rate, burstiness and trace options (a rate and a trace together, or a trace option
 * without --trace, are refused), the shard. 0, or -1 with err. Files are not read here
 * (workload_plan_build does). */
int workload_check(const workload_config *cfg, char *err);

/* Whether injections are planned: inject and not no_inject. */
bool workload_injects(const workload_config *cfg);
/* Whether the workload has open-loop requests (a rate, a trace or --num-prompts). */
bool workload_open_loop(const workload_config *cfg);
/* Whether its open-loop requests are drawn from the distributions (a rate, or --num-prompts
 * without a trace), not read from a trace. */
bool workload_drawn_arrivals(const workload_config *cfg);
/* The open-loop requests planned at most: num_prompts, else max_requests (0: no cap). */
int64_t workload_request_cap(const workload_config *cfg);

/* Whether this process runs background user `user` (0 .. users - 1), and the injector. */
bool workload_shard_has_user(const workload_config *cfg, int user);
bool workload_shard_has_injector(const workload_config *cfg);
/* Background users shard `index` runs (the whole workload's users when not sharded). */
int workload_shard_users(const workload_config *cfg, int index);
/* The users figure a run's analysis is given: this shard's closed users, or 0 when the
 * workload has open-loop requests (streams of their own: the analysis counts the distinct
 * streams it sees). One rule for the run's summary and `report`'s rewrite of it. */
int workload_analysis_users(const workload_config *cfg);
/* Whether this process runs open-loop request `index` (its place in the whole plan):
 * index mod N == the shard's index. */
bool workload_shard_has_arrival(const workload_config *cfg, int64_t index);
/* The max_concurrency share of shard `index` (0: no limit): the limit split round-robin,
 * at least 1 per shard. */
int workload_shard_concurrency(const workload_config *cfg, int index);

/* Planned injection send times (ns from t = 0), ascending; returns the count (0 when
 * !workload_injects), at most max. */
int workload_injection_times(const workload_config *cfg, int64_t *out, int max);
/* The context a background request typically holds mid-answer: a middling prompt plus half
 * a middling answer (what the cost model's spike arithmetic assumes for every decode). */
int workload_typical_context(const workload_config *cfg);
/* The k-th request of background user `user` (both from 0); the distributions must not be
 * empirical (use workload_plan_bg). */
workload_bg_request workload_bg(const workload_config *cfg, int user, int64_t k);

/* ---- the arrival plan --------------------------------------------------------------------- */

/* One open-loop request. */
typedef struct workload_arrival {
    int64_t t_ns;          /* planned send, from t = 0 */
    int32_t prompt_tokens;
    int32_t max_tokens;
    int32_t line;          /* its trace row's line (0: drawn at a rate) */
    int32_t text_len;      /* its trace row's prompt text, in the plan's texts (0: none; a
                            * prompt of prompt_tokens made-up tokens is sent) */
    int64_t text_off;
    int32_t n_hash_ids;    /* its Mooncake row's hash_ids (int64 each, in the plan's texts at
                            * hash_off; 0: none) */
    int64_t hash_off;
} workload_arrival;

/* What a trace gave and what became of its rows (workload_plan_build). */
typedef struct workload_trace_stats {
    int format;            /* trace_format the file was read as */
    int64_t lines;         /* data lines (no header, no blank lines) */
    int64_t rows;          /* rows read well */
    int64_t bad;           /* bad rows skipped (--skip-bad-rows) */
    int64_t failed;        /* failed requests in the trace (BurstGPT: Response tokens 0), skipped */
    int64_t outside;       /* rows outside --from/--to */
    int64_t after_end;     /* rows (or looped copies) planned at or after --duration */
    int64_t capped;        /* arrivals dropped by --max-requests */
    int64_t loops;         /* passes over the trace (--loop) */
    char first_bad[ERR_LEN]; /* the first bad row skipped: "FILE:LINE: why" */
} workload_trace_stats;

/* Everything a run sends besides the closed users' own draws: the open-loop arrivals of the
 * whole run (all shards: arrival i is the same request in every shard), sorted by time, and
 * the empirical tables of the distributions. Built once per run from the configuration; the
 * same configuration always builds the same plan. */
typedef struct workload_plan {
    workload_arrival *arrivals;
    int64_t n_arrivals;
    workload_dist prompt_len, answer_len;   /* the configuration's, empirical ones loaded */
    int32_t *prompt_values, *answer_values; /* empirical tables (NULL otherwise) */
    int64_t n_prompt_values, n_answer_values;
    workload_trace_stats trace;
    bool has_trace;
    buf texts;                              /* the trace's prompt texts (workload_arrival) */
} workload_plan;

/* Build cfg's plan: load the empirical files and the trace, draw the rate's arrivals. The
 * trace's rows are windowed (--from/--to, re-based to 0), scaled (--speedup), repeated
 * (--loop), cut at the duration and capped (--max-requests); a bad row is an error
 * ("FILE:LINE: why") unless skip_bad_rows, and so is a trace that plans no request at all
 * (every row outside --from/--to, or at or after the duration). 0, or -1 with err. */
int workload_plan_build(const workload_config *cfg, workload_plan *plan, char *err);
void workload_plan_free(workload_plan *plan);
/* --trace or --num-prompts without --duration: replay the whole (windowed) trace, or send
 * all num_prompts requests. Checks cfg (--loop without --num-prompts and --shard need a
 * duration), plans every request, and sets until_trace_end and duration_ns = the last
 * request's planned send + WORKLOAD_TRACE_TAIL_NS (WORKLOAD_NUM_PROMPTS_TAIL_NS with
 * num_prompts: the cap; the runners stop when the last request has finished). 0, or -1
 * with err. */
int workload_until_end(workload_config *cfg, char *err);
/* workload_bg with the plan's empirical tables. */
workload_bg_request workload_plan_bg(const workload_plan *plan, const workload_config *cfg,
                                     int user, int64_t k);
/* The request with the longest prompt, and the one with the longest prompt + answer, that
 * the plan or the distributions can make (for the checks against the engine): line is the
 * arrival's trace line, 0 for the distributions' worst case (their two maxima). Zeroed when
 * there is no background request at all. */
void workload_plan_largest(const workload_plan *plan, const workload_config *cfg,
                           workload_arrival *longest_prompt, workload_arrival *longest_total);
/* The stream (token-log user id) of open-loop request `index`: users + index. */
int32_t workload_arrival_user(const workload_config *cfg, int64_t index);
/* One line on what the plan holds, for the run's notes: "open loop: 2,400 requests at
 * 4 req/s (Poisson) ..." or the trace's counts. */
void workload_plan_describe(const workload_plan *plan, const workload_config *cfg, char *buf,
                            size_t size);
/* Prompt token ids for a request, deterministic and unique per (seed, kind, index) so no
 * prefix cache can hide a prefill: fills ids[0..n). (One WORKLOAD_SEG_UNIQUE or
 * WORKLOAD_SEG_INJECT segment of workload_segment_ids.) */
void workload_prompt_ids(const workload_config *cfg, int is_inject, int64_t index, int32_t *ids,
                         int n, int vocab);

/* ---- a prompt's content (src/workload/prompt.c) ------------------------------------------
 * A prompt is a sequence of segments; a segment's ids are a function of (seed, stream,
 * index) alone, so the same segment has the same ids in every request and every process
 * (the simulator's block hashes and the live client's token ids agree). A prompt without a
 * shared segment is one UNIQUE segment: today's ids, unique per request. */
enum {
    WORKLOAD_SEG_UNIQUE = 0xb9,       /* a background request's own tokens */
    WORKLOAD_SEG_INJECT = 0x1a7ec7,   /* an injection's */
    WORKLOAD_SEG_SYSTEM = 0x5157e3,   /* the system prompt (index 0) */
    WORKLOAD_SEG_MESSAGE = 0x3e55a6e, /* a conversation turn's message */
    WORKLOAD_SEG_ANSWER = 0xa45e3,    /* a conversation turn's answer, sent back */
    WORKLOAD_SEG_BLOCK = 0x3c0cace,   /* a Mooncake hash_id's 512-token block */
};
/* Mooncake's block: hash_ids[j] names prompt tokens [512 j, 512 (j + 1)). */
#define WORKLOAD_MOONCAKE_BLOCK 512

typedef struct workload_segment {
    uint64_t stream; /* WORKLOAD_SEG_* */
    uint64_t index;  /* which one of the stream */
    int32_t tokens;
} workload_segment;

typedef struct workload_prompt {
    workload_segment *segs; /* malloc'ed; workload_prompt_free */
    int n_segs, cap_segs;
    int64_t tokens;         /* the segments' sum */
} workload_prompt;

/* Append a segment (tokens > 0; 0 appends nothing). 0, or -1 out of memory. */
int workload_prompt_add(workload_prompt *p, uint64_t stream, uint64_t index, int32_t tokens);
void workload_prompt_reset(workload_prompt *p);
void workload_prompt_free(workload_prompt *p);
/* Whether another request may share a segment of p (anything but one unique segment). */
bool workload_prompt_shared(const workload_prompt *p);
/* A segment's first n ids (n may differ from its tokens: a text prompt's words), in
 * [100, vocab) for vocab > 1000 (servers reserve low ids for special tokens), else [0, vocab).
 * index_salt is xor-ed into the index (the live client's per-run salt; 0 in the simulator). */
void workload_segment_ids(const workload_config *cfg, const workload_segment *seg,
                          uint64_t index_salt, int32_t *ids, int n, int vocab);
/* All of p's ids, ids[0 .. p->tokens). */
void workload_prompt_fill(const workload_config *cfg, const workload_prompt *p,
                          uint64_t index_salt, int32_t *ids, int vocab);

/* Whether closed users' prompts share content (a system prompt or more than one turn). */
bool workload_shares_prefixes(const workload_config *cfg);

/* A closed user's conversation (turns, system prompt): the caller keeps one per user,
 * zeroed to start, and asks it for the user's requests in order. */
typedef struct workload_conv {
    int64_t conversation; /* the user's conversations so far */
    int turn;             /* turns done in the current one */
    workload_prompt history; /* its earlier messages and answers */
} workload_conv;

/* The user's k-th request (k counts up from 0): its lengths (prompt_tokens the whole
 * prompt: system prompt + history + message) and its content in *prompt (reset first).
 * The message and answer lengths are workload_plan_bg's draws; the turn joins the history
 * (message, then answer). A conversation ends after cfg->turns turns, or before a turn
 * whose prompt + answer would exceed cfg->max_context or whose prompt cfg->max_prompt.
 * Unique ids (the index (user << 24) | k, as before conversations) when
 * !workload_shares_prefixes. 0, or -1 out of memory. */
int workload_conv_next(const workload_plan *plan, const workload_config *cfg, workload_conv *c,
                       int user, int64_t k, workload_bg_request *req, workload_prompt *prompt);
void workload_conv_free(workload_conv *c);
/* Open-loop request `index` of the plan: the system prompt (not before a trace row's own
 * text, sent as it is), its Mooncake blocks (hash_ids[j] the ids of its tokens
 * [512 j, 512 (j + 1)); a last partial block is its own) and its own tokens. 0, or -1 out
 * of memory. */
int workload_arrival_prompt(const workload_plan *plan, const workload_config *cfg,
                            int64_t index, workload_prompt *prompt);

#endif
