#include "model/weight_offload.h"

#include <algorithm>

namespace troupe {

int64_t offload_arena_bytes(int64_t layer_bytes) {
  return layer_bytes + offload_alignment * offload_max_tensors_per_layer;
}

offload_plan plan_offload(const std::vector<int64_t>& layer_bytes, int64_t budget_bytes) {
  offload_plan p;
  p.offloaded.assign(layer_bytes.size(), false);
  int64_t weights = 0;
  for (size_t i = 0; i < layer_bytes.size() && weights < budget_bytes; ++i) {
    p.offloaded[i] = true;
    ++p.num_offloaded;
    weights += layer_bytes[i];
    const int64_t arena = offload_arena_bytes(layer_bytes[i]);
    p.host_bytes += arena;
    p.staging_bytes = std::max(p.staging_bytes, arena);
  }
  return p;
}

}  // namespace troupe
