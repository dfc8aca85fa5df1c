/* rng — small deterministic random numbers (splitmix64). Pure functions of their seed, so
 * a value drawn for (seed, user, request) is the same whatever order the draws happen in. */
#ifndef STALLSCOPE_RNG_H
#define STALLSCOPE_RNG_H
#include <stdint.h>

/* One splitmix64 step: advances *state, returns 64 random bits. */
uint64_t rng_next(uint64_t *state);
/* Mix several keys into one seed. */
uint64_t rng_hash3(uint64_t a, uint64_t b, uint64_t c);
/* Uniform double in [0, 1). */
double rng_uniform(uint64_t *state);
/* Uniform integer in [lo, hi] (inclusive). */
int64_t rng_range(uint64_t *state, int64_t lo, int64_t hi);
/* Put a[0..n) in a random order (Fisher-Yates, from the end). */
void rng_shuffle_i32(uint64_t *state, int32_t *a, int64_t n);

#endif
