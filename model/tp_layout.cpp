#include "model/tp_layout.h"

#include <algorithm>

namespace troupe {

namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

int64_t count_padding(const std::vector<int64_t>& head_of) {
  return std::count(head_of.begin(), head_of.end(), int64_t{-1});
}

}  // namespace

std::vector<shard_run> tp_layout::head_runs(const std::vector<int64_t>& head_of,
                                            int64_t head_dim) {
  std::vector<shard_run> runs;
  for (size_t j = 0; j < head_of.size(); ++j) {
    if (head_of[j] < 0) continue;
    const int64_t dst = static_cast<int64_t>(j) * head_dim, src = head_of[j] * head_dim;
    if (!runs.empty() && runs.back().dst + runs.back().count == dst &&
        runs.back().src + runs.back().count == src) {
      runs.back().count += head_dim;
    } else {
      runs.push_back({dst, src, head_dim});
    }
  }
  return runs;
}

namespace {

// The run of a rank's `local` rows from global row `begin`, of `real`
// rows in all (the rest padding).
std::vector<shard_run> padded_run(int64_t real, int64_t begin, int64_t local) {
  const int64_t count = std::clamp<int64_t>(real - begin, 0, local);
  if (count == 0) return {};
  return {{0, begin, count}};
}

}  // namespace

std::vector<shard_run> tp_layout::intermediate_runs(int64_t intermediate_size) const {
  return padded_run(intermediate_size, intermediate_begin, intermediate);
}

std::vector<shard_run> tp_layout::expert_intermediate_runs(int64_t moe_intermediate_size) const {
  return padded_run(moe_intermediate_size, expert_intermediate_begin, expert_intermediate);
}

std::vector<shard_run> tp_layout::shared_intermediate_runs(int64_t shared_intermediate_size) const {
  return padded_run(shared_intermediate_size, shared_intermediate_begin, shared_intermediate);
}

bool tp_layout::padded(const model_config& model) const {
  return count_padding(q_head_of) > 0 || count_padding(kv_head_of) > 0 ||
         intermediate * size != model.intermediate_size ||
         expert_intermediate * size != model.moe.intermediate * (model.moe.num_experts > 0 ? 1 : 0) ||
         shared_intermediate * size != model.moe.shared_intermediate;
}

result<tp_layout> make_tp_layout(const model_config& model, int size, int rank) {
  if (size < 1) return make_error("tensor_parallel_size must be at least 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size) {
    return make_error("tensor-parallel rank " + std::to_string(rank) + " is outside 0.." +
                      std::to_string(size - 1));
  }
  const int64_t h = model.num_attention_heads, k = model.num_key_value_heads;
  if (h <= 0 || k <= 0 || h % k != 0) {
    return make_error("tensor parallelism needs num_attention_heads (" + std::to_string(h) +
                      ") a multiple of num_key_value_heads (" + std::to_string(k) + ")");
  }
  const int64_t t = size, group = h / k;
  // The KV heads after padding, and how many ranks hold each.
  int64_t padded_kv = k, replicas = 1;
  if (k % t != 0 && t % k == 0) {
    replicas = t / k;
  } else if (k % t != 0 && k > t) {
    padded_kv = round_up(k, t);
  } else if (k % t != 0) {
    while (t % padded_kv != 0) ++padded_kv;  // the smallest divisor of t above k
    replicas = t / padded_kv;
  }
  tp_layout l;
  l.size = size;
  l.rank = rank;
  l.kv_replicas = replicas;
  const int64_t q_per_kv = round_up(group, replicas) / replicas;  // local query heads a KV head
  if (replicas == 1) {
    l.kv_heads = padded_kv / t;
    for (int64_t j = 0; j < l.kv_heads; ++j) {
      const int64_t kv = rank * l.kv_heads + j;
      l.kv_head_of.push_back(kv < k ? kv : -1);
      for (int64_t i = 0; i < group; ++i) l.q_head_of.push_back(kv < k ? kv * group + i : -1);
    }
  } else {
    l.kv_heads = 1;
    const int64_t kv = rank / replicas, part = rank % replicas;
    l.kv_head_of.push_back(kv < k ? kv : -1);
    for (int64_t i = 0; i < q_per_kv; ++i) {
      const int64_t in_group = part * q_per_kv + i;
      l.q_head_of.push_back(kv < k && in_group < group ? kv * group + in_group : -1);
    }
  }
  l.q_heads = static_cast<int64_t>(l.q_head_of.size());
  l.intermediate = round_up(model.intermediate_size, t) / t;
  l.intermediate_begin = rank * l.intermediate;
  if (model.moe.num_experts > 0) {
    l.expert_intermediate = round_up(model.moe.intermediate, t) / t;
    l.expert_intermediate_begin = rank * l.expert_intermediate;
    l.shared_intermediate = round_up(model.moe.shared_intermediate, t) / t;
    l.shared_intermediate_begin = rank * l.shared_intermediate;
  }
  l.vocab_parallel = t > 1 && model.vocab_size % t == 0;
  l.vocab = l.vocab_parallel ? model.vocab_size / t : model.vocab_size;
  l.vocab_begin = l.vocab_parallel ? rank * l.vocab : 0;
  return l;
}

std::string describe(const tp_layout& l, const model_config& model) {
  std::string s = "rank " + std::to_string(l.rank) + "/" + std::to_string(l.size) + ": " +
                  std::to_string(l.q_heads) + " query heads";
  if (const int64_t pad = count_padding(l.q_head_of); pad > 0) {
    s += " (" + std::to_string(pad) + " padding)";
  }
  s += ", " + std::to_string(l.kv_heads) + " of " + std::to_string(model.num_key_value_heads) +
       " KV heads";
  if (const int64_t pad = count_padding(l.kv_head_of); pad > 0) {
    s += " (" + std::to_string(pad) + " padding)";
  }
  if (l.kv_replicas > 1) s += " (each on " + std::to_string(l.kv_replicas) + " ranks)";
  s += ", intermediate " + std::to_string(l.intermediate) + " of " +
       std::to_string(model.intermediate_size);
  if (model.moe.num_experts > 0) {
    s += ", each expert's " + std::to_string(l.expert_intermediate) + " of " +
         std::to_string(model.moe.intermediate);
  }
  if (model.moe.shared_intermediate > 0) {
    s += ", the shared expert's " + std::to_string(l.shared_intermediate) + " of " +
         std::to_string(model.moe.shared_intermediate);
  }
  if (l.vocab_parallel) {
    s += ", vocabulary rows " + std::to_string(l.vocab_begin) + ".." +
         std::to_string(l.vocab_begin + l.vocab - 1);
  } else {
    s += ", vocabulary replicated";
  }
  return s;
}

std::vector<int> unpadded_tp_sizes(const model_config& model, int limit) {
  std::vector<int> sizes;
  for (int t = 1; t <= limit; ++t) {
    bool padded = false;
    for (int r = 0; r < t && !padded; ++r) {
      auto l = make_tp_layout(model, t, r);
      padded = !l || l->padded(model);
    }
    if (!padded) sizes.push_back(t);
  }
  return sizes;
}

stage_layers pipeline_stage_layers(int64_t num_layers, int stages, int stage) {
  std::vector<int64_t> sizes(static_cast<size_t>(stages), num_layers / stages);
  for (int64_t i = 2; i < num_layers % stages + 2; ++i) ++sizes[static_cast<size_t>(stages - i)];
  stage_layers l;
  for (int s = 0; s < stage; ++s) l.begin += sizes[static_cast<size_t>(s)];
  l.end = l.begin + sizes[static_cast<size_t>(stage)];
  return l;
}

}  // namespace troupe
