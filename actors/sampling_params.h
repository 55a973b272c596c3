// sampling_params: what one request asks of generation, with vLLM's names
// and defaults. Validated at the edge (validate_sampling_params) before a
// request enters the engine; inside, the values are trusted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// "" when valid, else the problem ("temperature: -1 must be >= 0").
std::string validate_sampling_params(const sampling_params& p, int64_t vocab_size);

}  // namespace troupe
