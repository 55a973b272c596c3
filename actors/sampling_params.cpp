#include "actors/sampling_params.h"

#include <cmath>
#include <sstream>

namespace troupe {

namespace {

template <class T>
std::string bad(const char* key, T value, const char* rule) {
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
  return "";
}

}  // namespace troupe
