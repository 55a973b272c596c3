// CPU sampler: turns one row of logits into a token and its logprobs, as
// vLLM defines the parameters:
//   logprobs are of the raw model distribution (log_softmax of the logits,
//   before penalties and temperature);
//   penalties: repetition over prompt + output tokens (divide positive logits,
//   multiply negative ones), frequency and presence over output tokens;
//   temperature < 1e-5 is greedy (argmax, lowest id on ties); otherwise
//   logits / temperature -> softmax -> min_p -> top_k -> top_p, then one
//   uniform draw from a counter-based generator keyed by (seed, step), so a
//   request's tokens depend only on its own seed and position, never on what
//   else is in the batch or on preemption.
// Stateless and thread-safe; rows may be sampled concurrently.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe {

struct sampler_row {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;  // 0 or -1: off
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
  uint64_t step = 0;  // index of the output token being sampled
  const int32_t* prompt_ids = nullptr;
  int64_t num_prompt_ids = 0;
  const int32_t* output_ids = nullptr;
  int64_t num_output_ids = 0;
  int32_t num_logprobs = -1;  // -1: none; k >= 0: the chosen token plus the top k
};

struct token_logprobs {
  int32_t token_id = -1;
  float logprob = 0.0f;
  int32_t rank = 0;  // 1 + the number of tokens with a higher logit (vLLM's rank)
  std::vector<int32_t> top_ids;      // best first
  std::vector<float> top_logprobs;
};

struct sample_result {
  int32_t token_id = -1;
  token_logprobs logprobs;  // filled when num_logprobs >= 0
};

// REQUIRES: vocab >= 1; logits has vocab entries.
sample_result sample_row(const float* logits, int64_t vocab, const sampler_row& row);

// log_softmax of logits, then the entry for token_id and the top k (k may be 0).
token_logprobs logprobs_of(const float* logits, int64_t vocab, int32_t token_id, int32_t k);

// The uniform in [0, 1) the sampler draws for (seed, step): a Philox-like
// counter-based hash, the same function the GPU sampler uses.
double sampler_uniform(uint64_t seed, uint64_t step);

}  // namespace troupe
