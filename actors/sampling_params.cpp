#include "actors/sampling_params.h"

#include "grammar/constraint_cache.h"

#include <cmath>
#include <sstream>

namespace troupe {

namespace {

template <class T>
std::string bad(const char* key, T value, const std::string& rule) {
  std::ostringstream os;
  os << key << ": " << value << " " << rule;
  return os.str();
}

}  // namespace

std::string validate_sampling_params(const sampling_params& p, int64_t vocab_size) {
  if (p.n < 1) return bad("n", p.n, "must be >= 1");
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return bad("temperature", p.temperature, "must be >= 0");
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p", p.top_p, "must be in (0, 1]");
  if (p.top_k < -1) return bad("top_k", p.top_k, "must be -1 (off), 0 (off) or >= 1");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p", p.min_p, "must be in [0, 1]");
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return bad("presence_penalty", p.presence_penalty, "must be in [-2, 2]");
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return bad("frequency_penalty", p.frequency_penalty, "must be in [-2, 2]");
  }
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return bad("repetition_penalty", p.repetition_penalty, "must be > 0");
  }
  if (p.max_tokens < 1) return bad("max_tokens", p.max_tokens, "must be >= 1");
  if (p.logprobs < -1 || p.logprobs > 20) return bad("logprobs", p.logprobs, "must be in 0..20");
  if (p.prompt_logprobs < -1 || p.prompt_logprobs > 20) {
    return bad("prompt_logprobs", p.prompt_logprobs, "must be in 0..20");
  }
  for (int32_t id : p.stop_token_ids) {
    if (id < 0 || id >= vocab_size) return bad("stop_token_ids", id, "is not a token id of this model");
  }
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto& [id, bias] = p.logit_bias[i];
    if (id < 0 || id >= vocab_size) return bad("logit_bias", id, "is not a token id of this model");
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return bad("logit_bias", bias, "must be in [-100, 100] (token " + std::to_string(id) + ")");
    }
    if (i > 0 && p.logit_bias[i - 1].first >= id) return "logit_bias: tokens must be sorted and unique";
  }
  if (p.min_tokens < 0) return bad("min_tokens", p.min_tokens, "must be >= 0");
  if (p.min_tokens > p.max_tokens) {
    return bad("min_tokens", p.min_tokens,
               "must be <= max_tokens (" + std::to_string(p.max_tokens) + ")");
  }
  for (const auto& word : p.bad_words_ids) {
    if (word.empty()) return "bad_words: a word has no tokens";
    for (int32_t id : word) {
      if (id < 0 || id >= vocab_size) return bad("bad_words", id, "is not a token id of this model");
    }
  }
  for (int32_t id : p.allowed_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return bad("allowed_token_ids", id, "is not a token id of this model");
    }
  }
  if (is_constrained(p.structured)) {
    auto compiled = grammar::compile_constraint(p.structured);
    if (!compiled) return "structured output: " + compiled.error_message();
  }
  return "";
}

}  // namespace troupe
