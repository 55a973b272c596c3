// CPU sampler: turns one row of logits into a token and its logprobs, as
// vLLM defines the parameters:
//   logprobs are of the raw model distribution (log_softmax of the logits,
//   before the logits processors, penalties and temperature);
//   logits processors first (vLLM's order): tokens outside allowed_mask
//   are banned (-inf), then each bias is added to its token's logit (a
//   bias of -inf bans it); a row where they ban every token is sampled as
//   if they were off (a position always has a token);
//   penalties: repetition over prompt + output tokens (divide positive logits,
//   multiply negative ones), frequency and presence over output tokens;
//   temperature < 1e-5 is greedy (argmax, lowest id on ties); otherwise
//   logits / temperature -> softmax -> min_p -> top_k -> top_p define the
//   kept set: the first `keep` tokens in (probability desc, id asc) order.
//   The draw is vLLM's exponential race over the kept set: token = argmax of
//   weight_i / E_i (weight_i = exp((logit_i - max) / T) as float, E_i =
//   -log(u_i), u_i the Philox draw of (seed, step, token i): kernels/philox.h;
//   ties: lowest id). So a request's tokens depend only on its own seed and
//   position, never on what else is in the batch or on preemption, and the
//   GPU sampler (kernels/cuda/sampling) draws the same token from the same
//   Philox bits without sorting.
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
  // Logits processors: bit t % 32 of allowed_mask[t / 32] allows token t
  // (null: every token); bias_values[j] is added to token bias_ids[j]'s
  // logit (ids sorted ascending, each once).
  const uint32_t* allowed_mask = nullptr;
  const int32_t* bias_ids = nullptr;
  const float* bias_values = nullptr;
  int64_t num_biases = 0;
};

inline bool has_logits_processors(const sampler_row& row) {
  return row.allowed_mask != nullptr || row.num_biases > 0;
}

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

// The tokens a sampled (temperature >= 1e-5) row may draw, best first: the
// kept set after penalties, temperature and the min_p / top_k / top_p
// filters, with each token's race weight (float(exp((logit - max) / T)),
// penalized logits) — what sample_row races over. For tests and tools.
struct sampler_candidate_set {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
// REQUIRES: vocab >= 1; row.temperature >= 1e-5.
sampler_candidate_set sampler_candidates(const float* logits, int64_t vocab,
                                         const sampler_row& row);

}  // namespace troupe
