// GPU sampler (host API): the CPU sampler's semantics (kernels/cpu/sampler.h)
// on float32 logits in device memory, so the worker downloads n sampled
// tokens and their logprobs (~180 bytes a row) instead of n full-vocabulary
// rows.
//
// Per row, one CUDA block of 1024 threads:
//   logits processors (the allowed-token mask, then the biases) and
//   penalties (repetition over prompt + output ids, frequency and presence
//   over output ids), bit-exact with the CPU's float arithmetic, into a
//   scratch copy of the row; greedy (temperature < 1e-5, or top_k == 1):
//   argmax, lowest id on ties, one pass; sampled: min_p / top_k / top_p
//   cuts found by radix select (no sort), usually over a short candidate
//   list in shared memory, then the exponential race of kernels/philox.h
//   over the kept set; logprobs of the raw logits (log_softmax before
//   penalties and temperature): the chosen token's, its rank, the top k.
// The kept set and the race are the CPU's up to float rounding: the GPU
// computes weights in float and sums them in fixed point where the CPU uses
// double, so a token lying exactly at a min_p / top_p boundary (within
// ~1e-6 relative), or two race scores within a few float ulps, may resolve
// differently. Greedy tokens, penalties, top_k cuts, tie-breaking and the
// Philox draws are exact. Results do not depend on timing (integer sums,
// order-free reductions): the same inputs give the same tokens.
// All pointers are device memory; launches are asynchronous on `stream`; no
// allocation, no host synchronisation (CUDA-graph capturable).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace troupe::cuda {

constexpr int max_sample_logprobs = 20;

// One row's parameters, as sampler_row (an array of n in device memory).
struct sample_params {
  float temperature = 1.0f;  // < 1e-5: greedy
  float top_p = 1.0f;        // >= 1: off
  int32_t top_k = 0;         // <= 0: off
  float min_p = 0.0f;        // <= 0: off (values above 1 act as 1)
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  int32_t num_logprobs = -1;  // -1: none; 0..20: the chosen token plus the top k
  uint64_t seed = 0;
  uint64_t step = 0;  // index of the output token being sampled
  int32_t logits_row = 0;  // the row of `logits` to read (parallel-sampling
                           // siblings share their parent's)
  int32_t forced_token = -1;  // >= 0: no sampling, this token's logprobs
                              // (prompt logprobs)
  // The ids to penalize: penalty_ids[prompt_begin, prompt_begin +
  // num_prompt_ids) (repetition only) and [output_begin, output_begin +
  // num_output_ids) (all three penalties; repeated ids counted).
  int32_t prompt_begin = 0;
  int32_t num_prompt_ids = 0;
  int32_t output_begin = 0;
  int32_t num_output_ids = 0;  // < 2^22
  // Logits processors (sampler_row's), also in the ids array: the allowed
  // mask's ceil(vocab / 32) words at mask_begin (-1: none; bit t % 32 of
  // word t / 32 allows token t), and num_biases (token, float bits of its
  // bias) pairs at bias_begin, tokens ascending and unique.
  int32_t mask_begin = -1;
  int32_t bias_begin = 0;
  int32_t num_biases = 0;
};

// What comes back per row (all fields written whenever `outputs` is given;
// the logprob fields are meaningful when num_logprobs >= 0).
struct sample_output {
  int32_t token_id;
  int32_t rank;  // 1 + the number of tokens with a larger raw logit
  float logprob;
  int32_t num_top;  // min(num_logprobs, 20, vocab), 0 without logprobs
  int32_t top_ids[max_sample_logprobs];  // best first, ties by lowest id
  float top_logprobs[max_sample_logprobs];
};

// Scratch bytes sample() needs for up to n rows of `vocab` logits (one
// float copy of each penalized row).
size_t sample_scratch_bytes(int64_t n, int64_t vocab);

// Samples n rows. logits is [rows, vocab] row-major (rows > every
// params[i].logits_row) and is not modified. token_ids (n) and outputs (n)
// may each be null.
// REQUIRES: 1 <= vocab < 2^31; scratch holds sample_scratch_bytes(n, vocab);
// penalty ids, bias tokens and forced tokens are in [0, vocab).
void sample(const float* logits, int64_t vocab, const sample_params* params,
            const int32_t* penalty_ids, int64_t n, void* scratch, int32_t* token_ids,
            sample_output* outputs, cudaStream_t stream);

}  // namespace troupe::cuda
