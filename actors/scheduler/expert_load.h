// The stats line's expert load (log_expert_counts): from two readings of
// a mixture-of-experts model's routing tallies (model/expert_counts.h),
// the tokens each expert was routed in between, per sparse layer and
// summed over the layers, and how uneven that is (max / mean: 1 is a
// perfect spread, E / top_k every token on the same experts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/expert_counts.h"

namespace troupe {

struct expert_load {
  int64_t experts = 0;
  std::vector<int32_t> layers;               // global indices
  std::vector<std::vector<int64_t>> per_layer;  // [layer][expert] tokens routed
  std::vector<int64_t> per_expert;           // summed over the layers
  int64_t routed = 0;                        // summed over layers and experts
  double imbalance = 0;                      // max / mean of per_expert
  double mean_layer_imbalance = 0;           // the layers' max / mean, averaged
  double worst_layer_imbalance = 0;
  int32_t worst_layer = -1;                  // its index (-1: nothing routed)
};

// now - before for each counter, modulo 2^32 (the counters wrap); a
// `before` of other layers or experts (the first reading: empty) counts
// as zeros.
expert_load expert_load_between(const expert_counts& before, const expert_counts& now);

// One line for the log, or "" when nothing was routed:
//   expert load over 5.0 s (48 MoE layers, 128 experts, 9600 token-expert routings):
//   max/mean 1.21 over the layers' sum, per layer 1.45 on average and 2.31
//   at worst (layer 17); tokens per expert: 80 75 ...
std::string expert_load_line(const expert_load& load, double seconds);
// Layer i's counts (for the debug log): "layer 17 (max/mean 2.31): 3 0 ...".
std::string expert_layer_line(const expert_load& load, size_t i);

}  // namespace troupe
