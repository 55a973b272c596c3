// weight_offload: which decoder layers keep their weights in host memory
// (`cpu_offload_gb`, vLLM's option), so that a model somewhat larger than
// the GPU still serves. An offloaded layer's weights live in one pinned
// host arena; before the layer runs, the arena is copied into a device
// staging buffer (the size of the largest offloaded layer) on the compute
// stream, and the layer reads its weights there (llama_model). Plain
// arithmetic, no backend: the memory plan (`--dry-run`) uses it too.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe {

// Bytes a layer's arena reserves beyond its weights: each tensor starts on
// an offload_alignment boundary (16-byte vector loads), at most this many
// tensors a layer.
constexpr int64_t offload_alignment = 256;
constexpr int64_t offload_max_tensors_per_layer = 32;

struct offload_plan {
  std::vector<bool> offloaded;  // per layer of the stage, in order
  int64_t num_offloaded = 0;
  int64_t host_bytes = 0;     // the offloaded layers' arenas
  int64_t staging_bytes = 0;  // the largest arena (0: nothing offloaded)
};

// Whole layers from the first, as vLLM offloads parameters in order: a
// layer is offloaded while less than `budget_bytes` is (so the budget is
// met or passed by less than one layer; 0: none). `layer_bytes` are the
// layers' weight bytes; arenas add the alignment slack.
offload_plan plan_offload(const std::vector<int64_t>& layer_bytes, int64_t budget_bytes);

// A layer's arena: its weight bytes plus the alignment slack.
int64_t offload_arena_bytes(int64_t layer_bytes);

}  // namespace troupe
