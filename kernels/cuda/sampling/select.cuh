// Block-wide primitives of the GPU sampler: one CUDA block of
// sample_block_threads threads owns one row of logits. Reductions, a scan,
// and a radix select over 32-bit order keys that finds, without sorting,
// the key where a descending walk of the row reaches a target count (top-k)
// or a target weight (top-p).
//
// Every function here is called by all threads of the block (it contains
// __syncthreads) and returns the same value to all of them.
#pragma once

#include <cstdint>

namespace troupe::cuda::sampling_detail {

constexpr int sample_block_threads = 1024;
constexpr int sample_block_warps = sample_block_threads / 32;
constexpr int radix_bins = 2048;  // 11-bit digits: passes over bits 31-21, 20-10, 9-0
constexpr int bins_per_thread = radix_bins / sample_block_threads;
static_assert(bins_per_thread == 2, "the digit scan gives each thread two bins");

using u64 = unsigned long long;  // the type of CUDA's 64-bit atomics and shuffles

// Float to a uint32 whose unsigned order is the float order; -0 and +0 are
// one key (the CPU compares values), NaN is below everything.
__device__ __forceinline__ uint32_t order_key(float x) {
  if (x != x) return 0u;
  const uint32_t b = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// (key, id) packed so that a larger value comes first in (key desc, id asc).
__device__ __forceinline__ u64 pack_key_id(uint32_t key, int32_t id) {
  return (static_cast<u64>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ int32_t packed_id(u64 packed) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(packed));
}

struct block_scratch {
  u64 wide[sample_block_warps];
  float f32[sample_block_warps];
  int i32[sample_block_warps];
};

// The maximum over a block of WARPS warps (every thread gets it), with
// one shared slot a warp.
template <int WARPS>
__device__ __forceinline__ u64 block_max_u64(u64 v, u64 (&wide)[WARPS]) {
  for (int o = 16; o > 0; o /= 2) {
    const u64 other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  if (threadIdx.x % 32 == 0) wide[threadIdx.x / 32] = v;
  __syncthreads();
  v = wide[0];
  for (int w = 1; w < WARPS; ++w) v = wide[w] > v ? wide[w] : v;
  __syncthreads();  // the slots are reused by the next call
  return v;
}

__device__ __forceinline__ u64 block_max_u64(u64 v, block_scratch& s) {
  return block_max_u64(v, s.wide);
}

// Sums in a fixed order (lanes by xor butterfly, then warps in order): the
// result does not depend on timing.
__device__ __forceinline__ u64 block_sum_u64(u64 v, block_scratch& s) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) s.wide[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0;
  for (int w = 0; w < sample_block_warps; ++w) v += s.wide[w];
  __syncthreads();
  return v;
}

__device__ __forceinline__ float block_sum_f32(float v, block_scratch& s) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) s.f32[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0.0f;
  for (int w = 0; w < sample_block_warps; ++w) v += s.f32[w];
  __syncthreads();
  return v;
}

__device__ __forceinline__ float block_max_f32(float v, block_scratch& s) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) s.f32[threadIdx.x / 32] = v;
  __syncthreads();
  v = s.f32[0];
  for (int w = 1; w < sample_block_warps; ++w) v = fmaxf(v, s.f32[w]);
  __syncthreads();
  return v;
}

__device__ __forceinline__ int block_sum_i32(int v, block_scratch& s) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) s.i32[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0;
  for (int w = 0; w < sample_block_warps; ++w) v += s.i32[w];
  __syncthreads();
  return v;
}

// Exclusive prefix sum over the threads in index order.
template <class T>
__device__ __forceinline__ T block_exclusive_scan(T v, T* warp_totals) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T inclusive = v;
  for (int o = 1; o < 32; o *= 2) {
    const T up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  T exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
  if (lane == 0) exclusive = T(0);
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    T w = warp_totals[lane];  // sample_block_warps == 32
    for (int o = 1; o < 32; o *= 2) {
      const T up = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += up;
    }
    warp_totals[lane] = w;
  }
  __syncthreads();
  const T result = warp > 0 ? warp_totals[warp - 1] + exclusive : exclusive;
  __syncthreads();
  return result;
}

// Weights are summed in fixed point (units of 2^-40; a token's weight is
// at most 1 and a row has under 2^18 tokens): integer sums are exact, so the
// walk is monotone and the result does not depend on the order of atomics.
__device__ __forceinline__ u64 fixed_weight(float w) { return __float2ull_rn(w * 0x1p40f); }

struct select_shared {
  int count[radix_bins];
  u64 weight[radix_bins];
  int scan_i32[sample_block_warps];
  u64 scan_u64[sample_block_warps];
  int chosen;
  int last_nonempty;
  // The walk so far, written by the thread owning the chosen bin.
  uint32_t prefix;
  int above_count;
  u64 above_weight;
  int eq_count;
  u64 target_weight;
};

// The cut a select finds: the candidates strictly above `key` hold
// `above_count` tokens and `above_weight`; `eq_count` candidates have
// exactly `key`. found is false when there is no candidate.
struct select_result {
  uint32_t key;
  int above_count;
  u64 above_weight;
  int eq_count;
  u64 target_weight;  // weighted: ceil(fraction * total)
  bool found;
};

// Radix select over the candidates of a row, in descending key order.
// Candidates are the tokens i with key_of(i, key) true and key in [key_lo,
// key_hi] (a cheap test) and accept(i, key, weight) true (the full test,
// which, when weighted, also sets the weight in [0, 1]).
//   count mode (weighted = false): the key of the target_count-th candidate
//     (1-based); fewer candidates: the lowest key.
//   weighted mode: the key at which the descending cumulative weight first
//     reaches fraction * total, total = total_weight when non-zero (the
//     candidates may then be a pruned subset whose complement lies below
//     the target), else the candidates' own sum. If the walk falls short of
//     the target: the lowest key (every candidate is above or at it).
// Radix over key - key_lo, 11 bits a pass from the span's top bit: a narrow
// span takes fewer passes, and its first digit spreads the candidates over
// many bins (few atomics collide). Each pass histograms only the candidates
// that share the digits chosen so far; accept runs only for those.
template <bool weighted, class KeyOf, class Accept>
__device__ select_result radix_select(int64_t n, uint32_t key_lo, uint32_t key_hi, KeyOf key_of,
                                      Accept accept, int target_count, float fraction,
                                      u64 total_weight, select_shared& s) {
  const int t = threadIdx.x;
  if (t == 0) {
    s.prefix = 0;
    s.above_count = 0;
    s.above_weight = 0;
    s.eq_count = 0;
    s.target_weight = 0;
  }
  const uint32_t span = key_hi - key_lo;
  int bits = span == 0 ? 0 : 32 - __clz(span);  // bits of key - key_lo still to choose
  uint32_t prefix_mask = 0;
  bool first = true;
  do {
    const int shift = bits > 11 ? bits - 11 : 0;
    const uint32_t digit_mask = (1u << (bits - shift)) - 1u;
    for (int b = t; b < radix_bins; b += sample_block_threads) {
      s.count[b] = 0;
      if (weighted) s.weight[b] = 0;
    }
    if (t == 0) {
      s.chosen = radix_bins;
      s.last_nonempty = -1;
    }
    __syncthreads();
    const uint32_t prefix = s.prefix;
    for (int64_t i = t; i < n; i += sample_block_threads) {
      uint32_t key;
      float w = 0.0f;
      if (!key_of(i, key) || key < key_lo || key > key_hi) continue;
      const uint32_t offset = key - key_lo;
      if ((offset & prefix_mask) != prefix || !accept(i, key, w)) continue;
      const uint32_t digit = (offset >> shift) & digit_mask;
      atomicAdd(&s.count[digit], 1);
      if (weighted) atomicAdd(&s.weight[digit], fixed_weight(w));
    }
    __syncthreads();
    // Bins in descending digit order: thread t owns positions 2t and 2t + 1.
    const int d0 = radix_bins - 1 - 2 * t, d1 = d0 - 1;
    const int c0 = s.count[d0], c1 = s.count[d1];
    const int c_before = block_exclusive_scan(c0 + c1, s.scan_i32);
    u64 w0 = 0, w1 = 0, w_before = 0;
    if (weighted) {
      w0 = s.weight[d0];
      w1 = s.weight[d1];
      w_before = block_exclusive_scan(w0 + w1, s.scan_u64);
      if (first && t == sample_block_threads - 1) {
        const u64 total = total_weight != 0 ? total_weight : w_before + w0 + w1;
        s.target_weight = static_cast<u64>(ceil(static_cast<double>(fraction) * total));
      }
      __syncthreads();
    }
    const int above_count = s.above_count;
    const u64 above_weight = s.above_weight, target_weight = s.target_weight;
    // The first non-empty bin whose cumulative value reaches the target.
    auto reaches = [&](int cum, u64 wcum) {
      return weighted ? above_weight + wcum >= target_weight : above_count + cum >= target_count;
    };
    if (c0 > 0) {
      atomicMax(&s.last_nonempty, 2 * t);
      if (reaches(c_before + c0, w_before + w0)) atomicMin(&s.chosen, 2 * t);
    }
    if (c1 > 0) {
      atomicMax(&s.last_nonempty, 2 * t + 1);
      if (reaches(c_before + c0 + c1, w_before + w0 + w1)) atomicMin(&s.chosen, 2 * t + 1);
    }
    __syncthreads();
    const int chosen = s.chosen < radix_bins ? s.chosen : s.last_nonempty;
    if (chosen < 0) {  // no candidate at all (only possible in the first pass)
      __syncthreads();
      return select_result{0u, 0, 0, 0, 0, false};
    }
    if (chosen / 2 == t) {
      const bool second = chosen % 2 == 1;
      const uint32_t digit = static_cast<uint32_t>(second ? d1 : d0);
      s.prefix = prefix | (digit << shift);
      s.above_count = above_count + c_before + (second ? c0 : 0);
      s.above_weight = above_weight + w_before + (second ? w0 : 0);
      s.eq_count = second ? c1 : c0;
    }
    prefix_mask |= digit_mask << shift;
    bits = shift;
    first = false;
    __syncthreads();
  } while (bits > 0);
  const select_result r{key_lo + s.prefix, s.above_count, s.above_weight, s.eq_count,
                        s.target_weight, true};
  __syncthreads();
  return r;
}

}  // namespace troupe::cuda::sampling_detail
