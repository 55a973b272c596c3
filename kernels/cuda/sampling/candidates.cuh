// The GPU sampler's candidates: the block's shared memory, cuts of the
// (key desc, id asc) order, the two places tokens are read from (the whole
// row, or a short list in shared memory of the only tokens that can
// matter), the cheap bounds that decide which tokens those are, and the
// tie-breaking by lowest id at a cut. Device code for sampling.cu; every
// function is called by all threads of the block.
#pragma once

#include <cstdint>

#include "kernels/cuda/sampling/sampling.h"
#include "kernels/cuda/sampling/select.cuh"

namespace troupe::cuda::sampling_detail {

constexpr int list_capacity = 2048;  // candidates kept in shared memory

struct kernel_shared {
  select_shared select;
  block_scratch reduce;
  uint32_t thread_keys[sample_block_threads];
  float list_values[list_capacity];
  int32_t list_ids[list_capacity];
  int list_count;
  int top_count;
  u64 top[max_sample_logprobs];
};

// A prefix of the (key desc, id asc) order: tokens above `key`, and those at
// `key` with id <= max_id.
struct order_cut {
  bool active = false;
  uint32_t key = 0;
  uint32_t max_id = 0xffffffffu;
  __device__ bool keeps(uint32_t k, int64_t id) const {
    return !active || k > key || (k == key && static_cast<uint32_t>(id) <= max_id);
  }
};

// Where the cuts read tokens from: the whole row, or the list in shared
// memory of the only tokens that can matter.
struct row_source {
  const float* x;
  int64_t n;  // = vocab
  __device__ float value(int64_t i) const { return x[i]; }
  __device__ int32_t id(int64_t i) const { return static_cast<int32_t>(i); }
  __device__ int64_t vocab() const { return n; }
};
struct list_source {
  const float* values;
  const int32_t* ids;
  int64_t n;
  int64_t vocab_size;
  __device__ float value(int64_t i) const { return values[i]; }
  __device__ int32_t id(int64_t i) const { return ids[i]; }
  __device__ int64_t vocab() const { return vocab_size; }
};

__device__ __forceinline__ bool any_token(int64_t, uint32_t, float&) { return true; }

// A lower bound on the key of the k-th best token: the k-th best of the
// threads' own best keys (k distinct tokens are at least that good); 0 (no
// bound) when k exceeds the block. Every thread passes its own best key.
__device__ inline uint32_t kth_key_bound(uint32_t thread_best, int k, kernel_shared& sh) {
  if (k > sample_block_threads) return 0u;
  sh.thread_keys[threadIdx.x] = thread_best;
  __syncthreads();
  auto thread_max = [&](int64_t i, uint32_t& key) {
    key = sh.thread_keys[i];
    return true;
  };
  return radix_select<false>(sample_block_threads, 0u, 0xffffffffu, thread_max, any_token, k,
                             0.0f, 0, sh.select)
      .key;
}

// Copies the row's tokens with keep(i, value) into the shared list and
// returns how many there are (above list_capacity the list is incomplete
// and the caller works on the row instead).
template <class Keep>
__device__ int compact(const float* x, int64_t n, Keep keep, kernel_shared& sh) {
  if (threadIdx.x == 0) sh.list_count = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += sample_block_threads) {
    const float v = x[i];
    if (!keep(i, v)) continue;
    const int slot = atomicAdd(&sh.list_count, 1);
    if (slot < list_capacity) {
      sh.list_values[slot] = v;
      sh.list_ids[slot] = static_cast<int32_t>(i);
    }
  }
  __syncthreads();
  const int count = sh.list_count;
  __syncthreads();
  return count;
}

// Among the candidates at `key` (those accept(i, key, w) takes), keep the
// `need` lowest ids.
template <class Source, class Accept>
__device__ order_cut cut_at(const Source& src, uint32_t key, int need, int eq_count,
                            Accept accept, select_shared& s) {
  order_cut cut;
  cut.active = true;
  cut.key = key;
  if (need >= eq_count) return cut;
  auto id_key_of = [&](int64_t i, uint32_t& id_key) {
    if (order_key(src.value(i)) != key) return false;
    id_key = 0xffffffffu - static_cast<uint32_t>(src.id(i));  // larger = lower id = first
    return true;
  };
  auto tied = [&](int64_t i, uint32_t, float& w) { return accept(i, key, w); };
  const uint32_t lowest = 0xffffffffu - static_cast<uint32_t>(src.vocab() - 1);
  const select_result r =
      radix_select<false>(src.n, lowest, 0xffffffffu, id_key_of, tied, need, 0.0f, 0, s);
  cut.max_id = 0xffffffffu - r.key;
  return cut;
}

}  // namespace troupe::cuda::sampling_detail
