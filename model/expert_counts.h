// Per-expert routing tallies of a mixture-of-experts model: how many
// tokens each sparse layer routed to each expert since the model was
// loaded (llama_model::expert_counts). The scheduler's stats line shows
// their change over each interval (log_expert_counts; docs/moe.md).
#pragma once

#include <cstdint>
#include <vector>

namespace troupe {

struct expert_counts {
  int64_t experts = 0;            // per layer
  std::vector<int32_t> layers;    // the sparse layers counted (global indices)
  std::vector<uint32_t> counts;   // [layers.size() * experts]: uint32 counters that wrap

  // Appends another pipeline stage's layers (same experts, or none).
  void append(const expert_counts& other) {
    if (other.layers.empty()) return;
    experts = other.experts;
    layers.insert(layers.end(), other.layers.begin(), other.layers.end());
    counts.insert(counts.end(), other.counts.begin(), other.counts.end());
  }
};

}  // namespace troupe
