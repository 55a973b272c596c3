// Paged attention dispatch: which kernels run, with how many decode splits.
//
// Sequences with one query token (decodes) go to a split-KV decode kernel:
// one block per (split, KV head, sequence) reading each K/V row once for the
// whole query-head group, on tensor cores for bf16/f16 with 16-byte rows up
// to head_dim 128 (decode_mma.cuh), else with SIMT float32 arithmetic
// (decode.cuh: float32, head_dim 256, odd layouts); FP8 caches the same way,
// their codes widened in registers (to float16 for the tensor cores).
// Longer queries (prefill chunks, speculative verification) go to the
// tiled prefill kernel (prefill.cuh). A
// batch whose max_query_len is 1 launches the decode kernel alone; any other
// batch launches both, each kernel skipping the other's sequences at once.
//
// Split heuristic (decodes): the grid without splits has num_seqs *
// num_kv_heads * head_chunks blocks; the GPU holds SMs * (resident decode
// blocks per SM, from the occupancy API) at once. As FlashAttention-2's
// num_splits_heuristic: the smallest split count whose wave efficiency
// (waves / ceil(waves): a last, partial wave leaves SMs idle) is within 90%
// of the best, keeping at least min_keys_per_split keys per split, at most
// max_splits, and no more than the workspace holds. Mixed batches decode
// with one split (their decodes are many). The SM count is queried once per
// device and cached. TROUPE_DECODE_SPLITS=N forces N splits on decode-only
// batches (for comparisons). The count is the launch's (a captured graph's
// is chosen for max_model_len): each sequence uses as many of them as hold
// min_keys_per_split keys or more, and the last of its split blocks to
// finish merges them (decode.cuh, no second kernel).
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "common/check.h"
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/attention/attention_params.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda {

namespace {

using attention::row_layout;

// Keys a split holds at least: splitting 256 keys (batch 1, bf16, H200)
// was slower than one split (attention_bench: 10.2 us against 11.8 in two
// splits and 11.6 in four), the merge costing more than the shorter walk.
constexpr int64_t min_keys_per_split = 256;
constexpr int max_cached_devices = 64;

int element_size(element_type t) { return t == element_type::f32 ? 4 : 2; }

int sm_count() {
  static std::array<std::atomic<int>, max_cached_devices> cached{};
  int device = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&device));
  if (device < max_cached_devices) {
    const int n = cached[static_cast<size_t>(device)].load(std::memory_order_relaxed);
    if (n > 0) return n;
  }
  int n = 0;
  TROUPE_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  if (device < max_cached_devices) {
    cached[static_cast<size_t>(device)].store(n, std::memory_order_relaxed);
  }
  return n;
}

// 16-byte vector loads need head_dim * element size % 16 == 0 and aligned
// tensors (cudaMalloc'd buffers and whole-row views are).
bool vec16_rows(element_type t, const paged_attention_args& a) {
  const auto bits = reinterpret_cast<uintptr_t>(a.q) | reinterpret_cast<uintptr_t>(a.k_cache) |
                    reinterpret_cast<uintptr_t>(a.v_cache) | reinterpret_cast<uintptr_t>(a.out);
  return bits % 16 == 0 && (a.head_dim * element_size(t)) % 16 == 0;
}

// FP8 caches: rows of 16-code (16-byte) pieces, q and out in 16-byte
// chunks (decode_mma_layout.cuh).
bool fp8_rows(const paged_attention_args& a) {
  const auto bits = reinterpret_cast<uintptr_t>(a.k_cache) | reinterpret_cast<uintptr_t>(a.v_cache) |
                    reinterpret_cast<uintptr_t>(a.q) | reinterpret_cast<uintptr_t>(a.out);
  return a.head_dim % 16 == 0 && bits % 16 == 0;
}

int head_dim_bucket(int64_t head_dim) { return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : 256; }

struct decode_plan {
  attention::decode_variant variant;
  int head_chunks = 1;
  int num_splits = 1;
};

// TROUPE_DECODE_SPLITS=N (comparisons): decode-only batches with N splits
// (at most the workspace's) instead of the heuristic's.
int forced_decode_splits() {
  static const int n = [] {
    const char* v = std::getenv("TROUPE_DECODE_SPLITS");
    return v == nullptr ? 0 : std::max(0, std::atoi(v));
  }();
  return n;
}

int choose_splits(int64_t blocks, int64_t slots, int64_t limit) {
  if (limit <= 1) return 1;
  std::array<double, attention::max_splits + 1> efficiency{};
  double best = 0.0;
  for (int64_t s = 1; s <= limit; ++s) {
    const double waves = static_cast<double>(blocks * s) / static_cast<double>(slots);
    efficiency[static_cast<size_t>(s)] = waves / std::ceil(waves);
    best = std::max(best, efficiency[static_cast<size_t>(s)]);
  }
  for (int64_t s = 1; s <= limit; ++s) {
    if (efficiency[static_cast<size_t>(s)] >= 0.9 * best) return static_cast<int>(s);
  }
  return 1;
}

decode_plan plan_decode(element_type t, const paged_attention_args& a) {
  decode_plan plan;
  attention::decode_variant& v = plan.variant;
  v.type = t;
  v.fp8_cache = a.fp8_cache;
  if (a.fp8_cache ? fp8_rows(a) : vec16_rows(t, a)) {
    const int bucket = head_dim_bucket(a.head_dim);
    v.layout = bucket == 64    ? row_layout::vec16_d64
               : bucket == 128 ? row_layout::vec16_d128
                               : row_layout::vec16_d256;
    v.tensor_cores = t != element_type::f32 && bucket <= 128;
  }
  const int64_t group = a.num_heads / a.num_kv_heads;
  if (v.tensor_cores) {
    v.heads_per_block = group <= 8 ? 8 : 16;
  } else {
    v.heads_per_block = group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
  }
  plan.head_chunks = static_cast<int>((group + v.heads_per_block - 1) / v.heads_per_block);

  const int64_t row_bytes = a.num_heads * (a.head_dim + 2) * static_cast<int64_t>(sizeof(float));
  const int64_t by_workspace =
      a.workspace == nullptr ? 0
                             : static_cast<int64_t>(a.workspace_bytes) / (a.num_seqs * row_bytes);
  int64_t splits = 1;
  if (a.num_splits > 0) {
    splits = a.num_splits;
  } else if (a.max_query_len == 1 && forced_decode_splits() > 0) {
    splits = forced_decode_splits();
  } else if (a.max_query_len == 1) {
    const int64_t max_seq_len =
        a.max_seq_len > 0 ? a.max_seq_len : a.max_blocks_per_seq * a.block_size;
    const int64_t limit = std::min<int64_t>(
        {attention::max_splits, (max_seq_len + min_keys_per_split - 1) / min_keys_per_split,
         by_workspace});
    const int64_t blocks = a.num_seqs * a.num_kv_heads * plan.head_chunks;
    const int64_t slots =
        static_cast<int64_t>(sm_count()) * attention::decode_blocks_per_sm(plan.variant);
    splits = choose_splits(blocks, slots, limit);
  }
  // Splits need the workspace and a split counter for each decode block row.
  const bool counters =
      a.split_counters != nullptr &&
      a.num_seqs * a.num_kv_heads * plan.head_chunks <= a.split_counters_count;
  if (!counters) splits = 1;
  splits = std::min<int64_t>({splits, attention::max_splits, std::max<int64_t>(by_workspace, 1)});
  plan.num_splits = static_cast<int>(std::max<int64_t>(splits, 1));
  return plan;
}

void check_args(const paged_attention_args& a) {
  TROUPE_CHECK(a.head_dim > 0 && a.head_dim <= 256 && a.head_dim % 2 == 0);
  TROUPE_CHECK(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0);
  TROUPE_CHECK(a.block_size > 0 && a.max_blocks_per_seq > 0);
  TROUPE_CHECK(a.num_seqs <= 65535 && a.num_heads <= 65535);
  TROUPE_CHECK_MSG(!a.fp8_cache || fp8_rows(a),
                   "FP8 KV cache attention needs head_dim % 16 == 0 and 16-byte aligned rows");
}

}  // namespace

int paged_attention_num_splits(element_type t, const paged_attention_args& a) {
  if (a.num_tokens == 0 || a.num_seqs == 0) return 1;
  check_args(a);
  paged_attention_args b = a;
  if (b.max_query_len <= 0) b.max_query_len = b.num_tokens;
  return plan_decode(t, b).num_splits;
}

void paged_attention(element_type t, const paged_attention_args& args, cudaStream_t stream) {
  if (args.num_tokens == 0 || args.num_seqs == 0) return;
  check_args(args);
  paged_attention_args a = args;
  if (a.max_query_len <= 0) a.max_query_len = a.num_tokens;
  const decode_plan plan = plan_decode(t, a);

  attention::params p;
  p.q = a.q;
  p.k_cache = a.k_cache;
  p.v_cache = a.v_cache;
  p.out = a.out;
  p.query_start_loc = a.query_start_loc;
  p.seq_lens = a.seq_lens;
  p.block_tables = a.block_tables;
  p.q_row_stride = a.num_heads * a.head_dim;
  p.kv_row_stride = a.num_kv_heads * a.head_dim;
  p.max_blocks_per_seq = static_cast<int>(a.max_blocks_per_seq);
  p.block_size = static_cast<int>(a.block_size);
  p.block_shift = (a.block_size & (a.block_size - 1)) == 0
                      ? static_cast<int>(std::lround(std::log2(static_cast<double>(a.block_size))))
                      : -1;
  p.num_heads = static_cast<int>(a.num_heads);
  p.group = static_cast<int>(a.num_heads / a.num_kv_heads);
  p.head_dim = static_cast<int>(a.head_dim);
  p.head_chunks = plan.head_chunks;
  p.num_splits = plan.num_splits;
  p.min_split_keys = static_cast<int>(min_keys_per_split);
  p.preload = preload_enabled();
  p.scale_log2 = a.scale * 1.4426950408889634f;  // log2(e)
  if (a.fp8_cache) {
    p.scale_log2 *= a.k_scale;
    p.v_scale = a.v_scale;
  }
  if (plan.num_splits > 1) {
    const int64_t rows = a.num_seqs * a.num_heads * plan.num_splits;
    p.partial_out = static_cast<float*>(a.workspace);
    p.partial_max = p.partial_out + rows * a.head_dim;
    p.partial_sum = p.partial_max + rows;
    p.split_counters = a.split_counters;
  }
  const int num_seqs = static_cast<int>(a.num_seqs);
  const int num_kv_heads = static_cast<int>(a.num_kv_heads);

  attention::launch_decode(plan.variant, p, num_kv_heads, num_seqs, stream);
  if (a.max_query_len > 1) {
    attention::launch_prefill(t, a.fp8_cache, head_dim_bucket(a.head_dim), vec16_rows(t, a), p,
                              static_cast<int>(a.max_query_len), num_seqs, stream);
  }
}

int64_t paged_attention_workspace_seq_splits(int64_t max_num_seqs) {
  // Splits only pay while the grid is short of the GPU's resident blocks
  // (a few per SM), so num_seqs * splits stays near that.
  return std::min<int64_t>(max_num_seqs * attention::max_splits, 8 * int64_t{sm_count()});
}

size_t paged_attention_workspace_bytes(int64_t seq_splits, int64_t num_heads, int64_t head_dim) {
  return static_cast<size_t>(seq_splits * num_heads * (head_dim + 2)) * sizeof(float);
}

int64_t paged_attention_split_counters(int64_t max_num_seqs, int64_t num_heads) {
  return max_num_seqs * num_heads;  // num_kv_heads * head_chunks <= num_heads
}

}  // namespace troupe::cuda
