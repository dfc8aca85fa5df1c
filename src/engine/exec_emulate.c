#include "engine/exec_emulate.h"

#include <stdlib.h>

#include "common/clock.h"
#include "common/err.h"
#include "engine/vocab.h"

typedef struct emulate_state {
    cost_params cost;
    cost_seq *seqs; /* the batch in the cost model's terms, reused every step */
    int cap_seqs;
} emulate_state;

static int emulate_step(exec *x, const sched_batch *batch, const exec_seq *const *seqs,
                        int64_t step_start_ns, int32_t *tokens, int64_t *modeled_ns, char *err)
{
    emulate_state *st = x->state;
    if (batch->n_items > st->cap_seqs) {
        int cap = st->cap_seqs ? st->cap_seqs : 64;
        while (cap < batch->n_items)
            cap *= 2;
        cost_seq *grown = realloc(st->seqs, (size_t)cap * sizeof *grown);
        if (!grown)
            return err_set(err, "out of memory for a batch of %d", batch->n_items);
        st->seqs = grown;
        st->cap_seqs = cap;
    }
    for (int i = 0; i < batch->n_items; i++) {
        const sched_item *item = &batch->items[i];
        st->seqs[i] = (cost_seq){item->new_tokens, item->context, item->samples};
        if (!item->samples)
            continue;
        const exec_seq *seq = seqs[i];
        const int64_t position = item->req->generated;
        /* EOS exactly at the drawn position; min_tokens is folded into that position, so
         * EOS is never sampled early (vLLM masks EOS below min_tokens the same way). */
        if (!seq->ignore_eos && position == vocab_eos_position(seq->seed, seq->min_tokens))
            tokens[i] = VOCAB_EOS;
        else
            tokens[i] = vocab_word(seq->seed, position);
    }
    const int64_t duration_ns = cost_step_cells_ns(&st->cost, st->seqs, batch->n_items,
                                                      batch->occupied_cells, NULL);
    *modeled_ns = duration_ns;
    const int64_t deadline_ns = step_start_ns + duration_ns;
    clock_sleep_until_ns(deadline_ns);
    const int64_t late_ns = clock_now_ns() - deadline_ns;
    x->late_ns = late_ns > 0 ? late_ns : 0;
    return 0;
}

static const char *emulate_token_text(const exec *x, int32_t token, size_t *len)
{
    (void)x;
    return vocab_text(token, len);
}

static bool emulate_is_eos(const exec *x, int32_t token)
{
    (void)x;
    return token == VOCAB_EOS;
}

static int64_t emulate_tokenize(const exec *x, const char *text, size_t len, int32_t *ids,
                                int64_t max_ids)
{
    return vocab_tokenize(text, len, ids, max_ids, x->vocab_size);
}

static void emulate_destroy(exec *x)
{
    if (!x)
        return;
    emulate_state *st = x->state;
    if (st)
        free(st->seqs);
    free(st);
    free(x);
}

exec *exec_emulate_create(const cost_params *cost, char *err)
{
    exec *x = calloc(1, sizeof *x);
    emulate_state *st = calloc(1, sizeof *st);
    if (!x || !st) {
        free(x);
        free(st);
        err_set(err, "out of memory creating the emulate executor");
        return NULL;
    }
    st->cost = *cost;
    x->name = "emulate";
    x->state = st;
    x->paced = true;
    x->vocab_size = cost->arch.vocab > 0 ? cost->arch.vocab : VOCAB_WORDS + 1;
    x->step = emulate_step;
    x->token_text = emulate_token_text;
    x->is_eos = emulate_is_eos;
    x->tokenize = emulate_tokenize;
    x->destroy = emulate_destroy;
    return x;
}
