// What the paged-attention kernels receive (by value) and the launchers the
// dispatcher (attention.cu) calls: internal to kernels/cuda/attention.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda::attention {

constexpr int max_splits = 128;  // decode splits per sequence (the split merge's scratch)

struct params {
  const void* q = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  void* out = nullptr;
  const int32_t* query_start_loc = nullptr;
  const int32_t* seq_lens = nullptr;
  const int32_t* block_tables = nullptr;
  // Decode partials, [num_seqs, num_heads, num_splits] rows (num_splits > 1).
  float* partial_out = nullptr;  // rows of head_dim
  float* partial_max = nullptr;  // log2-domain running max; -inf: empty split
  float* partial_sum = nullptr;
  // One int a (sequence, block row y = KV head chunk), zero between
  // launches: the last split block of each counts to the sequence's split
  // count, merges the splits and zeroes its counter again.
  int32_t* split_counters = nullptr;
  int64_t q_row_stride = 0;   // num_heads * head_dim (q and out)
  int64_t kv_row_stride = 0;  // num_kv_heads * head_dim
  int max_blocks_per_seq = 0;
  int block_size = 0;
  int block_shift = -1;  // log2(block_size) when a power of two, else -1
  int num_heads = 0;
  int group = 0;  // num_heads / num_kv_heads
  int head_dim = 0;
  int head_chunks = 1;  // decode: blocks per KV head (query heads split in chunks)
  int num_splits = 1;   // decode: the launch's; a sequence may use fewer
  int min_split_keys = 1;  // decode: keys a split holds at least (split_of)
  // softmax scale * log2(e) (scores live in the exp2 domain), times
  // k_scale for FP8 caches.
  float scale_log2 = 0.0f;
  float v_scale = 1.0f;  // the output's factor: an FP8 cache's v_scale, else 1
  bool preload = false;     // decode: older K/V rows requested before the PDL wait
};

// Head-dimension variants: vectorised rows of 16 bytes (head_dim * element
// size a multiple of 16 and 16-byte aligned tensors) bucketed by the largest
// head_dim they serve, or 2-element words for any even head_dim up to 256.
enum class row_layout { vec16_d64, vec16_d128, vec16_d256, pairs_d256 };

// Which decode kernel: the SIMT one (any type and layout; heads_per_block
// 1, 2, 4 or 8) or the tensor-core one (bf16/f16, vec16_d64 or vec16_d128;
// heads_per_block 8 or 16). FP8 caches (fp8_cache) take the vec16 layouts
// for their DMAX only (head_dim % 16 == 0: attention.h).
struct decode_variant {
  element_type type = element_type::f32;
  bool fp8_cache = false;
  row_layout layout = row_layout::pairs_d256;
  bool tensor_cores = false;
  int heads_per_block = 1;
};

// Decode: one block per (split, KV head chunk, sequence); sequences whose
// query length is not 1 are skipped.
void launch_decode(const decode_variant& v, const params& p, int num_kv_heads, int num_seqs,
                   cudaStream_t stream);
// Resident decode blocks per SM for a variant (cached after the first call).
int decode_blocks_per_sm(const decode_variant& v);
// The FP8-cache variants of the two (decode_fp8.cu), which they call.
void launch_decode_fp8(const decode_variant& v, const params& p, int num_kv_heads, int num_seqs,
                       cudaStream_t stream);
int decode_fp8_blocks_per_sm(const decode_variant& v);

// Prefill: one block per (64-query tile, query head, sequence); sequences
// with fewer than 2 query tokens are skipped.
// fp8_cache: K and V are e4m3 codes (widened into the tile as the compute
// type); vec16 then only speaks of q's rows.
void launch_prefill(element_type t, bool fp8_cache, int head_dim_bucket, bool vec16,
                    const params& p, int max_query_len, int num_seqs, cudaStream_t stream);

}  // namespace troupe::cuda::attention
