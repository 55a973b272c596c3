#include "actors/worker/logits_processors.h"

#include <algorithm>
#include <limits>
#include <map>

namespace troupe {

void position_biases_for(const sampling_params& p, const std::vector<int64_t>& eos_ids,
                         int64_t index, const int32_t* output, int64_t num_output,
                         position_biases& out) {
  out.ids.clear();
  out.values.clear();
  if (p.logit_bias.empty() && p.min_tokens <= index && p.bad_words_ids.empty()) return;
  constexpr float banned = -std::numeric_limits<float>::infinity();
  std::map<int32_t, float> merged(p.logit_bias.begin(), p.logit_bias.end());
  if (index < p.min_tokens) {
    if (!p.ignore_eos) {
      for (int64_t id : eos_ids) merged[static_cast<int32_t>(id)] = banned;
    }
    for (int32_t id : p.stop_token_ids) merged[id] = banned;
  }
  for (const std::vector<int32_t>& word : p.bad_words_ids) {
    const auto prefix = static_cast<int64_t>(word.size()) - 1;
    if (prefix > num_output) continue;
    if (std::equal(word.begin(), word.end() - 1, output + (num_output - prefix))) {
      merged[word.back()] = banned;
    }
  }
  out.ids.reserve(merged.size());
  out.values.reserve(merged.size());
  for (const auto& [id, value] : merged) {
    out.ids.push_back(id);
    out.values.push_back(value);
  }
}

std::vector<uint32_t> allowed_token_mask(const std::vector<int32_t>& allowed, int64_t vocab) {
  std::vector<uint32_t> mask(static_cast<size_t>((vocab + 31) / 32), 0u);
  for (int32_t id : allowed) {
    if (id >= 0 && id < vocab) mask[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
  }
  return mask;
}

void attach_processors(sampler_row& row, const std::vector<uint32_t>& mask,
                       const position_biases& biases) {
  row.allowed_mask = mask.empty() ? nullptr : mask.data();
  row.num_biases = static_cast<int64_t>(biases.ids.size());
  row.bias_ids = biases.ids.empty() ? nullptr : biases.ids.data();
  row.bias_values = biases.values.empty() ? nullptr : biases.values.data();
}

}  // namespace troupe
