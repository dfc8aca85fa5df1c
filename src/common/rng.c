#include "common/rng.h"

uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t rng_hash3(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t s = a;
    uint64_t h = rng_next(&s);
    s = h ^ b;
    h = rng_next(&s);
    s = h ^ c;
    return rng_next(&s);
}

double rng_uniform(uint64_t *state) { return (double)(rng_next(state) >> 11) * 0x1.0p-53; }

int64_t rng_range(uint64_t *state, int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return lo;
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(rng_next(state) % span);
}

void rng_shuffle_i32(uint64_t *state, int32_t *a, int64_t n)
{
    for (int64_t i = n - 1; i > 0; i--) {
        const int64_t j = (int64_t)(rng_next(state) % (uint64_t)(i + 1));
        const int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}
