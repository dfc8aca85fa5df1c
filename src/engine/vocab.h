/* vocab — the emulated model's words and tokenizer (executor emulate).
 *
 * Output: the emulated model writes readable English words. Token w (0 <= w < VOCAB_WORDS)
 * is " " + word w (a leading space, as Llama's tokenizer marks word starts); VOCAB_EOS is
 * the end-of-sequence token, whose text is empty. The k-th token (k from 0) of an answer
 * with sampling seed s is word (rng_hash3(s, k, VOCAB_SALT) mod VOCAB_WORDS): a pure
 * function of (seed, position), so preemption and recompute never change an answer.
 *
 * End of sequence: unless the request sets ignore_eos, the answer is L words and then EOS
 * (the EOS token counts as a completion token, as vLLM counts it), where
 *     L = max(min_tokens, 16 + rng_hash3(s, 0, VOCAB_EOS_SALT) mod 241),
 * so answers end on their own after 16..256 words unless max_tokens comes first.
 *
 * Input: a text prompt counts one token per piece of up to 4 bytes of each
 * whitespace-separated word: a word of n bytes is ceil(n / 4) tokens; whitespace (space,
 * \t, \n, \v, \f, \r) is free. ("The quick brownish fox" = 1 + 2 + 2 + 1 = 6 tokens.) An
 * English text averages about 4 bytes per token with real BPE tokenizers, so lengths come
 * out near a real tokenizer's. Token-id prompts are counted exactly elsewhere. */
#ifndef STALLSCOPE_VOCAB_H
#define STALLSCOPE_VOCAB_H
#include <stddef.h>
#include <stdint.h>

#define VOCAB_WORDS 256
#define VOCAB_EOS VOCAB_WORDS
#define VOCAB_PIECE_BYTES 4

/* Text of a token (" word", "" for EOS and ids out of range); never NULL, static. */
const char *vocab_text(int32_t token, size_t *len);
/* The word at answer position k for seed s. */
int32_t vocab_word(uint64_t seed, int64_t position);
/* Completion tokens before EOS (L above). */
int64_t vocab_eos_position(uint64_t seed, int min_tokens);
/* Tokens of a text prompt by the rule above. When ids is non-NULL, the first max_ids
 * pieces also get an id (a hash of the piece's bytes modulo vocab_size) for executors that
 * want ids. */
int64_t vocab_tokenize(const char *text, size_t len, int32_t *ids, int64_t max_ids,
                       int32_t vocab_size);

#endif
