// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC 2011; Random123's known-answer vectors pass) and the sampler's
// per-token exponential draw built on it. Header-only, for host code (g++)
// and device code (nvcc) alike: both sides compute the same bits, so the CPU
// sampler and the GPU sampler race the same exponentials.
//
// The sampler's randomness is keyed by the request's seed and addressed by
// (step, token id): token t's draw at output position `step` is a pure
// function of (seed, step, t), independent of the batch, of the other
// tokens and of the order in which anything is evaluated.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TROUPE_HOST_DEVICE __host__ __device__
#else
#define TROUPE_HOST_DEVICE
#endif

namespace troupe {

struct philox_block {
  uint32_t v[4];
};

// The high and low 32-bit halves of a * b.
TROUPE_HOST_DEVICE inline void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

// Philox-4x32 with 10 rounds: counter (4 words) and key (2 words) to 4
// random words.
TROUPE_HOST_DEVICE inline philox_block philox4x32_10(philox_block counter, uint32_t key0,
                                                     uint32_t key1) {
  constexpr uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;  // Weyl key increments
  uint32_t* c = counter.v;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += w0;
      key1 += w1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(m0, c[0], hi0, lo0);
    philox_mulhilo(m1, c[2], hi1, lo1);
    const uint32_t next[4] = {hi1 ^ c[1] ^ key0, lo1, hi0 ^ c[3] ^ key1, lo0};
    c[0] = next[0];
    c[1] = next[1];
    c[2] = next[2];
    c[3] = next[3];
  }
  return counter;
}

// The Philox block of the sampler's tokens 4g .. 4g + 3 at output position
// `step` of a request seeded `seed`: counter (g, step low, step high, 0),
// key (seed low, seed high). Token t uses word t % 4 of block t / 4, so one
// call serves four neighbouring tokens (the GPU's race reads them together).
TROUPE_HOST_DEVICE inline philox_block sampling_philox(uint64_t seed, uint64_t step,
                                                       uint32_t group) {
  const philox_block counter = {
      {group, static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0u}};
  return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// A word's top 23 bits as (k + 0.5) * 2^-23: exact in float, in (0, 1),
// never 0 or 1.
TROUPE_HOST_DEVICE inline float sampling_uniform_of(uint32_t word) {
  return (static_cast<float>(word >> 9) + 0.5f) * 0x1p-23f;
}

// E = -log(u): an Exp(1) draw in (6e-8, 16.7). logf is CUDA's on the device
// (<= 1 ulp) and glibc's on the host (< 1 ulp), so the two sides may differ
// in the last bit; the race below tolerates that.
TROUPE_HOST_DEVICE inline float sampling_exponential_of(uint32_t word) {
  return -logf(sampling_uniform_of(word));
}

// Token `token`'s uniform and exponential at (seed, step).
TROUPE_HOST_DEVICE inline float sampling_uniform(uint64_t seed, uint64_t step, uint32_t token) {
  return sampling_uniform_of(sampling_philox(seed, step, token / 4).v[token % 4]);
}
TROUPE_HOST_DEVICE inline float sampling_exponential(uint64_t seed, uint64_t step,
                                                     uint32_t token) {
  return sampling_exponential_of(sampling_philox(seed, step, token / 4).v[token % 4]);
}

// The exponential race (vLLM's sampler): token = argmax over the kept
// tokens of weight / E, weight the token's unnormalized probability
// exp((logit - max) / T) (any common scale gives the same argmax). Since
// weight_i / E_i > c exactly when E_i / weight_i < 1 / c, and E_i / weight_i
// is exponential with rate weight_i, the winner is token i with probability
// weight_i / sum(weight): an exact categorical draw that needs no sort and no
// prefix sum. Ties: lowest id (the caller's reduction).
TROUPE_HOST_DEVICE inline float sampling_race_score(float weight, float exponential) {
  return weight / exponential;
}

}  // namespace troupe
