#include "actors/scheduler/expert_load.h"

#include <algorithm>

#include <fmt/format.h>

namespace troupe {

namespace {

// max / mean of the counts (0 when they sum to 0).
double max_over_mean(const std::vector<int64_t>& counts) {
  int64_t sum = 0, max = 0;
  for (int64_t c : counts) {
    sum += c;
    max = std::max(max, c);
  }
  return sum > 0 ? static_cast<double>(max) * static_cast<double>(counts.size()) / static_cast<double>(sum)
                 : 0.0;
}

std::string joined(const std::vector<int64_t>& counts) {
  std::string out;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (e > 0) out += ' ';
    out += std::to_string(counts[e]);
  }
  return out;
}

}  // namespace

expert_load expert_load_between(const expert_counts& before, const expert_counts& now) {
  expert_load load;
  load.experts = now.experts;
  load.layers = now.layers;
  const bool same = before.experts == now.experts && before.layers == now.layers &&
                    before.counts.size() == now.counts.size();
  const auto experts = static_cast<size_t>(now.experts);
  load.per_expert.assign(experts, 0);
  double layer_sum = 0;
  int64_t active_layers = 0;
  for (size_t l = 0; l < now.layers.size(); ++l) {
    std::vector<int64_t> row(experts);
    for (size_t e = 0; e < experts; ++e) {
      const size_t i = l * experts + e;
      const uint32_t delta = now.counts[i] - (same ? before.counts[i] : 0u);  // modulo 2^32
      row[e] = delta;
      load.per_expert[e] += delta;
      load.routed += delta;
    }
    const double imbalance = max_over_mean(row);
    if (imbalance > 0) {
      layer_sum += imbalance;
      ++active_layers;
      if (imbalance > load.worst_layer_imbalance) {
        load.worst_layer_imbalance = imbalance;
        load.worst_layer = now.layers[l];
      }
    }
    load.per_layer.push_back(std::move(row));
  }
  load.imbalance = max_over_mean(load.per_expert);
  load.mean_layer_imbalance = active_layers > 0 ? layer_sum / static_cast<double>(active_layers) : 0.0;
  return load;
}

std::string expert_load_line(const expert_load& load, double seconds) {
  if (load.routed == 0) return "";
  return fmt::format(
      "expert load over {:.1f} s ({} MoE layers, {} experts, {} token-expert routings): max/mean {:.2f} over the "
      "layers' sum, per layer {:.2f} on average and {:.2f} at worst (layer {}); tokens per expert: {}",
      seconds, load.layers.size(), load.experts, load.routed, load.imbalance, load.mean_layer_imbalance,
      load.worst_layer_imbalance, load.worst_layer, joined(load.per_expert));
}

std::string expert_layer_line(const expert_load& load, size_t i) {
  return fmt::format("layer {} (max/mean {:.2f}): {}", load.layers[i], max_over_mean(load.per_layer[i]),
                     joined(load.per_layer[i]));
}

}  // namespace troupe
