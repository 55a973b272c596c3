// cuda_ops' mixture-of-experts MLP (ops::moe_mlp; the kernels and their
// rules are in kernels/cuda/moe/moe.h, docs/moe.md has the design): route,
// then for a few slots the decode GEMVs (only the chosen experts' weights
// read; the down product sums the slots itself), otherwise the sort, the
// grouped GEMMs and the weighted sum.
// Nothing here synchronises or allocates (reserve_moe did), so decode
// steps capture into CUDA graphs.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_impl.h"
#include "kernels/cuda/moe/moe.h"

namespace troupe {

static_assert(cuda::moe_tile == moe_tile_slots, "ops.h's moe_scratch_bytes counts the kernels' tiles");
static_assert(cuda::moe_max_experts == moe_max_experts && cuda::moe_max_top_k == moe_max_top_k,
              "the model checks ops.h's limits");

namespace {

// The scratch's parts for `slots` slots (the buffer is sized for the
// reserved shape's; each part 256-byte aligned, as moe_scratch_bytes counts).
struct moe_parts {
  void* act;
  void* y;
  float* weights;
  int32_t* ids;
  int32_t* index;
};

moe_parts carve(void* data, const moe_shape& reserved, dtype type) {
  const int64_t slots = reserved.max_tokens * reserved.top_k;
  const auto element = static_cast<int64_t>(dtype_size(type));
  char* p = static_cast<char*>(data);
  auto take = [&](int64_t bytes) {
    char* at = p;
    p += (bytes + 255) / 256 * 256;
    return at;
  };
  moe_parts parts;
  parts.act = take(slots * reserved.inter * element);
  parts.y = take(slots * reserved.hidden * element);
  parts.weights = reinterpret_cast<float*>(take(slots * 4));
  parts.ids = reinterpret_cast<int32_t*>(take(slots * 4));
  parts.index = reinterpret_cast<int32_t*>(p);
  return parts;
}

// Whether a step of n tokens runs the decode GEMVs: they read each slot's
// expert on its own (at about 2.9 TB/s on the H100), the grouped GEMMs each
// chosen expert once (at about 1.8 TB/s so far; docs/moe.md), so the GEMVs
// win while the slots are fewer than 1.6 times the distinct experts n
// tokens are expected to choose, E (1 - (1 - k/E)^n) (uniform routing).
// `forced` >= 0 (TROUPE_MOE_GEMV_SLOTS): up to that many slots instead.
bool runs_gemv(int64_t n, int64_t experts, int64_t top_k, int64_t forced) {
  const int64_t slots = n * top_k;
  if (slots > 65535) return false;  // the GEMVs' grid has a block row a slot
  if (forced >= 0) return slots <= forced;
  const double e = static_cast<double>(experts);
  const double distinct = e * (1.0 - std::pow(1.0 - static_cast<double>(top_k) / e, static_cast<double>(n)));
  return static_cast<double>(slots) <= 1.6 * distinct;
}

}  // namespace

void cuda_ops::reserve_moe(const moe_shape& shape, dtype type) {
  impl::moe_scratch& m = impl_->moe;
  TROUPE_CHECK(shape.num_experts >= 1 && shape.num_experts <= cuda::moe_max_experts);
  TROUPE_CHECK(shape.top_k >= 1 && shape.top_k <= cuda::moe_max_top_k && shape.top_k <= shape.num_experts);
  // Called once by a model at load; a second call (tests: another shape)
  // allocates anew and keeps the old buffer until the object goes (graphs
  // captured with it may still run), which the memory plan does not count.
  if (m.data != nullptr) TROUPE_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  void* data = nullptr;
  TROUPE_CUDA_CHECK(cudaMalloc(&data, static_cast<size_t>(moe_scratch_bytes(shape, type))));
  impl_->device_buffers.push_back(data);
  m = {shape, type, data};
}

void cuda_ops::moe_mlp(const tensor& x, const tensor& router_logits, const tensor& gate_up,
                       const tensor& down, int64_t num_experts, int64_t top_k, bool renormalize,
                       const tensor& out, const moe_counts& counts) {
  const int64_t n = x.rows, h = x.cols, inter = down.cols;
  TROUPE_CHECK(x.type == gate_up.type && x.type == down.type && x.type == out.type &&
               x.type == router_logits.type);
  TROUPE_CHECK(gate_up.rows == num_experts * 2 * inter && gate_up.cols == h && down.rows == num_experts * h);
  TROUPE_CHECK(router_logits.rows >= n && router_logits.cols == num_experts && out.cols == h && out.rows >= n);
  const impl::moe_scratch& m = impl_->moe;
  TROUPE_CHECK_MSG(m.data != nullptr && m.type == x.type && n <= m.shape.max_tokens &&
                       num_experts == m.shape.num_experts && top_k == m.shape.top_k &&
                       inter == m.shape.inter && h == m.shape.hidden,
                   "moe_mlp beyond the shape reserve_moe reserved");
  if (n == 0) return;
  const cuda::element_type t = element_of(x.type);
  cudaStream_t stream = impl_->stream;
  const moe_parts parts = carve(m.data, m.shape, m.type);
  const int64_t slots = n * top_k;
  const int experts = static_cast<int>(num_experts), k = static_cast<int>(top_k);
  const bool gemv = runs_gemv(n, num_experts, top_k, impl_->moe_gemv_slots) && !impl_->rows_consistent &&
                    cuda::moe_gemv_supported(h, inter);
  // Bytes: the experts' weights a step can read at most (one a slot, every
  // expert at most; a step reads those its tokens chose).
  const double weight_bytes = static_cast<double>(gate_up.numel() + down.numel()) * dtype_size(x.type) *
                              static_cast<double>(std::min(num_experts, slots)) / static_cast<double>(num_experts);
  op_scope scope(
      *impl_,
      [&] { return std::string(gemv ? "moe_mlp (GEMV) " : "moe_mlp (grouped) ") + std::to_string(n) + " tokens"; },
      weight_bytes);
  cuda::moe_route(t, router_logits.data, n, experts, k, renormalize, parts.ids, parts.weights, stream,
                  reinterpret_cast<uint32_t*>(counts.counts), counts.token_slots);
  if (gemv) {
    cuda::moe_gemv_up(t, x.data, parts.ids, slots, k, gate_up.data, inter, h, parts.act, stream);
    cuda::moe_gemv_down_sum(t, parts.act, parts.ids, parts.weights, n, k, down.data, h, inter, out.data,
                            out.cols, stream);
    return;
  }
  const cuda::moe_index index = cuda::moe_index_at(parts.index, slots, num_experts);
  const int64_t tiles = cuda::moe_max_tiles(slots, num_experts);
  cuda::moe_sort(parts.ids, slots, experts, index, stream);
  cuda::moe_gemm_up(t, x.data, k, index, tiles, gate_up.data, inter, h, parts.act, stream);
  cuda::moe_gemm_down(t, parts.act, index, tiles, down.data, h, inter, parts.y, stream);
  cuda::moe_combine(t, parts.y, parts.weights, n, k, h, out.data, out.cols, stream);
}

}  // namespace troupe
