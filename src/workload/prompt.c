/* prompt — a request's prompt as segments whose ids are a function of the segment alone
 * (workload.h, "a prompt's content"): shared system prompts, conversations whose turns
 * resend the history, Mooncake blocks named by hash_ids. */
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "workload/workload.h"

int workload_prompt_add(workload_prompt *p, uint64_t stream, uint64_t index, int32_t tokens)
{
    if (tokens <= 0)
        return 0;
    if (p->n_segs == p->cap_segs) {
        int cap = p->cap_segs ? p->cap_segs * 2 : 8;
        workload_segment *grown = realloc(p->segs, (size_t)cap * sizeof *grown);
        if (!grown)
            return -1;
        p->segs = grown;
        p->cap_segs = cap;
    }
    p->segs[p->n_segs++] = (workload_segment){.stream = stream, .index = index, .tokens = tokens};
    p->tokens += tokens;
    return 0;
}

void workload_prompt_reset(workload_prompt *p)
{
    p->n_segs = 0;
    p->tokens = 0;
}

void workload_prompt_free(workload_prompt *p)
{
    free(p->segs);
    memset(p, 0, sizeof *p);
}

bool workload_prompt_shared(const workload_prompt *p)
{
    return !(p->n_segs == 1 && (p->segs[0].stream == WORKLOAD_SEG_UNIQUE ||
                                p->segs[0].stream == WORKLOAD_SEG_INJECT));
}

void workload_segment_ids(const workload_config *cfg, const workload_segment *seg,
                          uint64_t index_salt, int32_t *ids, int n, int vocab)
{
    uint64_t state = rng_hash3(cfg->seed, seg->stream, seg->index ^ index_salt);
    /* Keep away from id 0..99, which servers often reserve for special tokens. */
    int lo = vocab > 1000 ? 100 : 0;
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)rng_range(&state, lo, vocab - 1);
}

void workload_prompt_ids(const workload_config *cfg, int is_inject, int64_t index, int32_t *ids,
                         int n, int vocab)
{
    const workload_segment seg = {
        .stream = is_inject ? WORKLOAD_SEG_INJECT : WORKLOAD_SEG_UNIQUE,
        .index = (uint64_t)index, .tokens = n};
    workload_segment_ids(cfg, &seg, 0, ids, n, vocab);
}

void workload_prompt_fill(const workload_config *cfg, const workload_prompt *p,
                          uint64_t index_salt, int32_t *ids, int vocab)
{
    int64_t off = 0;
    for (int i = 0; i < p->n_segs; i++) {
        workload_segment_ids(cfg, &p->segs[i], index_salt, ids + off, p->segs[i].tokens, vocab);
        off += p->segs[i].tokens;
    }
}

bool workload_shares_prefixes(const workload_config *cfg)
{
    return cfg->system_prompt_tokens > 0 || cfg->turns > 1;
}

void workload_conv_free(workload_conv *c)
{
    workload_prompt_free(&c->history);
}

int workload_conv_next(const workload_plan *plan, const workload_config *cfg, workload_conv *c,
                       int user, int64_t k, workload_bg_request *req, workload_prompt *prompt)
{
    const workload_bg_request turn = workload_plan_bg(plan, cfg, user, k);
    workload_prompt_reset(prompt);
    *req = turn;
    if (!workload_shares_prefixes(cfg))
        return workload_prompt_add(prompt, WORKLOAD_SEG_UNIQUE,
                                   ((uint64_t)user << 24) | ((uint64_t)k & 0xffffff),
                                   turn.prompt_tokens);
    const int64_t sys = cfg->system_prompt_tokens;
    const int turns = cfg->turns > 1 ? cfg->turns : 1;
    /* A new conversation after the last turn, or when the history would overflow the
     * context (a conversation's first turn is never refused here: sim_check_plan and the
     * server judge a single turn as they judge any request). */
    const int64_t next_prompt = sys + c->history.tokens + turn.prompt_tokens;
    const bool too_long =
        (cfg->max_context > 0 && next_prompt + turn.max_tokens > cfg->max_context) ||
        (cfg->max_prompt > 0 && next_prompt > cfg->max_prompt);
    if (c->turn > 0 && (c->turn >= turns || too_long)) {
        c->conversation++;
        c->turn = 0;
        workload_prompt_reset(&c->history);
    }
    /* Messages and answers are named by (user, conversation, turn): equal in every process
     * that draws the same conversation, and in no other conversation. */
    const uint64_t id = rng_hash3((uint64_t)user + 1, (uint64_t)c->conversation, (uint64_t)c->turn);
    if (workload_prompt_add(prompt, WORKLOAD_SEG_SYSTEM, 0, (int32_t)sys) != 0)
        return -1;
    for (int i = 0; i < c->history.n_segs; i++) {
        const workload_segment *s = &c->history.segs[i];
        if (workload_prompt_add(prompt, s->stream, s->index, s->tokens) != 0)
            return -1;
    }
    if (workload_prompt_add(prompt, WORKLOAD_SEG_MESSAGE, id, turn.prompt_tokens) != 0 ||
        workload_prompt_add(&c->history, WORKLOAD_SEG_MESSAGE, id, turn.prompt_tokens) != 0 ||
        workload_prompt_add(&c->history, WORKLOAD_SEG_ANSWER, id, turn.max_tokens) != 0)
        return -1;
    c->turn++;
    req->prompt_tokens = (int)prompt->tokens;
    return 0;
}

int workload_arrival_prompt(const workload_plan *plan, const workload_config *cfg,
                            int64_t index, workload_prompt *prompt)
{
    const workload_arrival *a = &plan->arrivals[index];
    const uint64_t own = (uint64_t)workload_arrival_user(cfg, index) << 24;
    workload_prompt_reset(prompt);
    /* A trace's own prompt text is sent as it is: no system prompt before it. */
    if (a->text_len == 0 &&
        workload_prompt_add(prompt, WORKLOAD_SEG_SYSTEM, 0, cfg->system_prompt_tokens) != 0)
        return -1;
    /* Mooncake: block j of the row's prompt is hash_ids[j]'s; the rest is the row's own. */
    int64_t left = a->prompt_tokens;
    for (int32_t j = 0; j < a->n_hash_ids && left > 0; j++) {
        int64_t id;
        memcpy(&id, plan->texts.data + a->hash_off + (size_t)j * sizeof id, sizeof id);
        const int32_t n = left < WORKLOAD_MOONCAKE_BLOCK ? (int32_t)left : WORKLOAD_MOONCAKE_BLOCK;
        /* A last partial block is the row's own: another row's longer block would not
         * start the same way in a real trace either. */
        if (n < WORKLOAD_MOONCAKE_BLOCK)
            break;
        if (workload_prompt_add(prompt, WORKLOAD_SEG_BLOCK, (uint64_t)id, n) != 0)
            return -1;
        left -= n;
    }
    return workload_prompt_add(prompt, WORKLOAD_SEG_UNIQUE, own, (int32_t)left);
}
