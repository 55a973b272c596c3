// sampling_params: what one request asks of generation, with vLLM's names
// and defaults. Validated at the edge (validate_sampling_params) before a
// request enters the engine; inside, the values are trusted.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "grammar/constraint.h"

namespace troupe {

struct sampling_params {
  int32_t n = 1;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;  // 0 or -1: off
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  bool has_seed = false;  // seed is meaningful only when set
  int64_t seed = 0;
  int32_t max_tokens = 16;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings (need a tokenizer)
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  int32_t logprobs = -1;         // -1: none; k: chosen token plus top k
  int32_t prompt_logprobs = -1;  // -1: none; k: each prompt token plus top k
  // Logits processors (vLLM's), applied to the logits before the penalties:
  // logit_bias adds its value to its token's logit (OpenAI's -100..100;
  // sorted by token, each once); min_tokens bans EOS and stop_token_ids
  // (and stop strings do not match) until that many tokens are out;
  // bad_words_ids bans a word's last token where the output ends with the
  // rest of it (one-token words always; the edges tokenize vLLM's
  // bad_words); allowed_token_ids, when not empty, bans every other token.
  std::vector<std::pair<int32_t, float>> logit_bias;
  int32_t min_tokens = 0;
  std::vector<std::vector<int32_t>> bad_words_ids;
  std::vector<int32_t> allowed_token_ids;
  // Structured outputs: the output is a string of this grammar (JSON
  // Schema, regex, choice, EBNF); tokens it refuses are masked, and EOS
  // only where it may end (docs/structured_outputs.md).
  output_constraint structured;
  // Request-level, not sampling: under scheduling_policy priority, lower
  // values are scheduled first and preempted last (vLLM's meaning).
  int64_t priority = 0;
  // Request-level: the LoRA adapter it runs with (lora_registry's id), 0 for
  // the base model. Set by the edges from the adapter's name.
  int64_t lora_id = 0;
};

// Whether any penalty is on (the sampler then counts the output so far).
inline bool has_penalties(const sampling_params& p) {
  return p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || p.repetition_penalty != 1.0f;
}

// Whether the sampler needs the request's output so far on the host (the
// penalties count it; a bad word of several tokens looks at its end; a
// constraint's matcher reads each token): a step planned before the
// previous one's token is known samples the request's row only once that
// token is back (model_runner::sample_deferred).
inline bool needs_output_history(const sampling_params& p) {
  if (has_penalties(p) || is_constrained(p.structured)) return true;
  for (const auto& w : p.bad_words_ids) {
    if (w.size() > 1) return true;
  }
  return false;
}

// Whether any logits processor is on (logit_bias, min_tokens, bad words,
// allowed_token_ids).
inline bool has_logits_processors(const sampling_params& p) {
  return !p.logit_bias.empty() || p.min_tokens > 0 || !p.bad_words_ids.empty() ||
         !p.allowed_token_ids.empty();
}

// "" when valid, else the problem ("temperature: -1 must be >= 0").
std::string validate_sampling_params(const sampling_params& p, int64_t vocab_size);

}  // namespace troupe
