// Paged attention (host API): causal attention of q over a paged KV cache
// that already holds this step's keys and values, for prefill chunks and
// decodes alike (a query token at position p sees keys 0..p of its
// sequence). GQA: query head h reads KV head h / (num_heads / num_kv_heads).
// q and out are [num_tokens, num_heads * head_dim]; the caches are
// [num_slots, num_kv_heads * head_dim]; metadata as in kernels/ops.h
// (query_start_loc [num_seqs + 1], seq_lens [num_seqs], block_tables
// [num_seqs, max_blocks_per_seq]). Device pointers; async on `stream`.
// REQUIRES: head_dim <= 256 and even.
#pragma once

#include <cuda_runtime.h>

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
  const int32_t* token_seq = nullptr;  // [num_tokens]: the sequence of each query token
  int64_t num_tokens = 0;
  int64_t max_blocks_per_seq = 0;
  int64_t block_size = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
};

void paged_attention(element_type t, const paged_attention_args& a, cudaStream_t stream);

}  // namespace troupe::cuda
