// Paged attention (host API): causal attention of q over a paged KV cache
// that already holds this step's keys and values, for prefill chunks and
// decodes alike: query token i of sequence s sits at position
// seq_lens[s] - query_len(s) + i and sees keys 0..position. GQA: query head h
// reads KV head h / (num_heads / num_kv_heads). q and out are [num_tokens,
// num_heads * head_dim]; the caches are [num_slots, num_kv_heads * head_dim]
// with slot = block_tables[s][key / block_size] * block_size + key %
// block_size (FP8 caches: codes, below); metadata as in kernels/ops.h
// (query_start_loc [num_seqs + 1], seq_lens [num_seqs], block_tables
// [num_seqs, max_blocks_per_seq]). Tokens
// past query_start_loc[num_seqs] (padding) are not written. Device pointers;
// asynchronous on `stream`; no allocation and no host synchronisation (CUDA
// graph capturable).
//
// Two kernels (see attention.cu): sequences with one query token go to the
// split-KV decode kernel (partials in `workspace`, merged by the last split
// block of each KV head to finish, counting in `split_counters`), longer
// queries to the tiled prefill kernel. A mixed batch runs both, each skipping
// the other's sequences.
//
// REQUIRES: head_dim <= 256 and even (FP8 caches: a multiple of 16);
// num_heads % num_kv_heads == 0;
// max_query_len >= every sequence's query length (0: num_tokens is used).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/kernel_dtype.h"

namespace troupe::cuda {

struct paged_attention_args {
  const void* q = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  void* out = nullptr;
  const int32_t* query_start_loc = nullptr;
  const int32_t* seq_lens = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t max_query_len = 0;  // host scalars of the batch (attention_metadata)
  int64_t max_seq_len = 0;    // only steers the split count; 0: taken as the table's capacity
  int64_t max_blocks_per_seq = 0;
  int64_t block_size = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  // kv_cache_dtype fp8: the caches hold float8 e4m3 codes, a key element
  // code * k_scale, a value element code * v_scale (kernels/ops.h). The
  // kernels fold k_scale into the softmax scale and v_scale into the
  // output's normalisation; decodes in 16-bit types multiply in float16 on
  // tensor cores (every e4m3 value is a float16; q is rounded to float16,
  // saturated at +-65504), prefills in the compute type. REQUIRES for FP8:
  // head_dim % 16 == 0 (the decode loads 16 codes at a time), 16-byte
  // aligned caches, q and out.
  bool fp8_cache = false;
  float k_scale = 1.0f, v_scale = 1.0f;
  // Split-KV partials of the decode kernel; without one (or when too small)
  // decodes run with fewer splits, down to one (correct, slower for small
  // batches). See paged_attention_workspace_bytes.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Zero-filled ints (paged_attention_split_counters of them for the batch's
  // num_seqs and num_heads), left zero by every launch: the decode kernel's
  // last split block per (sequence, KV head) counts there and merges the
  // splits. Without them (or too few) decodes run with one split.
  int32_t* split_counters = nullptr;
  int64_t split_counters_count = 0;
  // Splits per sequence for the decode kernel: 0 chooses from the SM count,
  // the batch and max_seq_len; a sequence uses fewer when its splits would
  // hold under 256 keys. A captured CUDA graph freezes the count (the
  // kernel derives each split's key range from the live seq_lens on the
  // device, so any count stays correct as contexts grow).
  int num_splits = 0;
};

void paged_attention(element_type t, const paged_attention_args& a, cudaStream_t stream);

// The split count the decode kernel would use for `a` (1 when it would not
// split): for benchmarks and logs.
int paged_attention_num_splits(element_type t, const paged_attention_args& a);

// (sequence, split) pairs worth reserving on the current device for decode
// batches of up to max_num_seqs sequences: enough for the split heuristic to
// fill the GPU at any batch size (more splits only help small batches).
int64_t paged_attention_workspace_seq_splits(int64_t max_num_seqs);

// Bytes of workspace for `seq_splits` (sequence, split) pairs: per query head
// a float32 output row, running max and sum.
size_t paged_attention_workspace_bytes(int64_t seq_splits, int64_t num_heads, int64_t head_dim);

// Split counters enough for decode batches of up to max_num_seqs sequences.
int64_t paged_attention_split_counters(int64_t max_num_seqs, int64_t num_heads);

}  // namespace troupe::cuda
