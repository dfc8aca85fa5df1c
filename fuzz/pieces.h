/* pieces — how the fuzz harnesses cut one input into the reads a socket might deliver. */
#ifndef STALLSCOPE_FUZZ_PIECES_H
#define STALLSCOPE_FUZZ_PIECES_H
#include <stddef.h>
#include <stdint.h>

enum { PIECES_WHOLE, PIECES_BYTEWISE, PIECES_RANDOM };

/* The size of the next piece when `left` bytes remain: all of them, one, or a
 * pseudo-random 1..max_random drawn from *state (seed it with pieces_seed). */
static inline size_t pieces_next(int mode, uint32_t *state, size_t left, size_t max_random)
{
    if (mode == PIECES_BYTEWISE)
        return 1;
    if (mode == PIECES_WHOLE)
        return left;
    *state = *state * 1103515245u + 12345u;
    const size_t piece = 1 + (*state >> 16) % max_random;
    return piece < left ? piece : left;
}

static inline uint32_t pieces_seed(uint32_t seed)
{
    return seed * 2654435761u + 1;
}

#endif
