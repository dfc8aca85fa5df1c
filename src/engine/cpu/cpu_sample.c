#include "engine/cpu/cpu_sample.h"

#include <math.h>
#include <stdlib.h>

#include "common/rng.h"
#include "engine/cpu/cpu_kernels.h"

#define CPU_SAMPLE_SALT 0x73616d706c65ULL /* "sample" */

/* The uniform draw in [0, 1) of completion position `position`. */
static double draw(uint64_t seed, int64_t position)
{
    uint64_t state = rng_hash3(seed, (uint64_t)position, CPU_SAMPLE_SALT);
    return rng_uniform(&state);
}

int32_t cpu_sample_naive(float *logits, int vocab_size, double temperature, uint64_t seed,
                         int64_t position, int32_t banned)
{
    if (banned >= 0 && banned < vocab_size)
        logits[banned] = -INFINITY;
    const int best = cpu_argmax(logits, vocab_size);
    if (!(temperature > 0))
        return best;
    /* p_i ~ exp((l_i - l_max) / T), drawn by inverse CDF over the unnormalised weights. */
    const double max_logit = logits[best];
    double sum = 0;
    for (int i = 0; i < vocab_size; i++) {
        const float p = (float)exp((logits[i] - max_logit) / temperature);
        logits[i] = p;
        sum += p;
    }
    const double target = draw(seed, position) * sum;
    double cumulative = 0;
    for (int i = 0; i < vocab_size; i++) {
        cumulative += logits[i];
        if (cumulative > target && logits[i] > 0)
            return i;
    }
    return best; /* rounding left target at the very end */
}

/* The first index holding the maximum. */
static int first_index_of(const float *x, int n, float value)
{
    for (int i = 0; i < n; i++)
        if (x[i] == value)
            return i;
    return 0;
}

int32_t cpu_sample(float *logits, int vocab_size, double temperature, uint64_t seed,
                   int64_t position, int32_t banned)
{
    const cpu_isa isa = cpu_isa_active();
    if (isa == CPU_ISA_PORTABLE)
        return cpu_sample_naive(logits, vocab_size, temperature, seed, position, banned);
    if (banned >= 0 && banned < vocab_size)
        logits[banned] = -INFINITY;
    const float max = isa == CPU_ISA_AVX512 ? cpu_max_avx512(logits, vocab_size)
                                            : cpu_max_avx2(logits, vocab_size);
    const int best = first_index_of(logits, vocab_size, max);
    if (!(temperature > 0) || !isfinite(max))
        return best;
    const int n_chunks = (vocab_size + CPU_SAMPLE_CHUNK - 1) / CPU_SAMPLE_CHUNK;
    double stack_sums[256];
    double *sums = n_chunks <= 256 ? stack_sums : malloc(sizeof *sums * (size_t)n_chunks);
    if (!sums)
        return cpu_sample_naive(logits, vocab_size, temperature, seed, position, -1);
    const float inv_t = (float)(1.0 / temperature);
    double total = isa == CPU_ISA_AVX512 ? cpu_exp_weights_avx512(logits, vocab_size, max, inv_t, sums)
                                         : cpu_exp_weights_avx2(logits, vocab_size, max, inv_t, sums);
    if (banned >= 0 && banned < vocab_size) { /* AVX-512's exp2 floors at 2^-127: make it exactly 0 */
        sums[banned / CPU_SAMPLE_CHUNK] -= logits[banned];
        total -= logits[banned];
        logits[banned] = 0;
    }
    const double target = draw(seed, position) * total;
    double cumulative = 0;
    int token = best;
    for (int c = 0; c < n_chunks; c++) {
        if (cumulative + sums[c] <= target) {
            cumulative += sums[c];
            continue;
        }
        const int hi = (c + 1) * CPU_SAMPLE_CHUNK < vocab_size ? (c + 1) * CPU_SAMPLE_CHUNK : vocab_size;
        for (int i = c * CPU_SAMPLE_CHUNK; i < hi; i++) {
            cumulative += logits[i];
            if (cumulative > target && logits[i] > 0) {
                token = i;
                break;
            }
        }
        break;
    }
    if (sums != stack_sums)
        free(sums);
    return token;
}
