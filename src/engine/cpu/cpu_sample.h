/* cpu_sample — the next token from a row of logits: greedy or seeded temperature sampling.
 *
 * The random draw for completion position k of a request with seed s is a pure function of
 * (s, k), as vocab.h's words are: the same request gives the same answer whatever it was
 * batched with, and a preempted request recomputed from scratch continues identically. */
#ifndef STALLSCOPE_CPU_SAMPLE_H
#define STALLSCOPE_CPU_SAMPLE_H
#include <stdint.h>

/* temperature 0: the argmax (lowest index among equals). Otherwise softmax(logits / T) and
 * one draw. banned >= 0 is never returned (EOS before min_tokens or with ignore_eos).
 * logits is scratch: it is modified. With AVX-512 or AVX2 the weights use the vector exp and the
 * draw walks 256-token chunk sums first (a decode step samples 32 x 32,000 logits: scalar
 * exp alone would cost ~10 ms). */
int32_t cpu_sample(float *logits, int vocab_size, double temperature, uint64_t seed,
                   int64_t position, int32_t banned);
/* The same with plain loops and double-precision exp: the reference. The two draw the same
 * token except when the draw lands within float rounding of a boundary. */
int32_t cpu_sample_naive(float *logits, int vocab_size, double temperature, uint64_t seed,
                         int64_t position, int32_t banned);

#endif
