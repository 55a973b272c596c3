// Split-KV ("flash-decoding") paged attention for single-token queries, in
// SIMT float32 arithmetic: the kernel for float32 (strict FMAs), head_dim 256
// and rows without 16-byte vectors (FP8 caches: vectors of 8 codes,
// widened to float, k_scale folded into q's factor, v_scale into the
// output's); bf16/f16 with 16-byte rows up to 128
// elements take decode_mma.cuh, which shares this file's grid, splits, warp
// merge (merge_warps_and_store) and split merge (merge_splits_if_last).
//
// One block of 4 warps per (split, KV head chunk, sequence). The block holds
// every query head of its KV head's group (up to GB of them; larger groups
// take several chunks), so each K and V row is read from global memory once
// per group. A split is a contiguous range of the sequence's keys, derived on
// the device from seq_lens and the launch's split count; its warps take turns
// over tiles of keys_per_step * unroll keys.
//
// Within a warp, lanes_per_key lanes share one key row: each loads
// vectors_per_lane vectors of VEC elements (16 bytes in the fast layouts),
// so a warp reads keys_per_step rows at once and issues all loads of a tile
// (K and V, `unroll` steps) before using them; the next tile's block-table
// lookups are issued while those loads are in flight. Scores are reduced
// over the key's lanes with shuffles, then the tile's maximum over the warp
// updates each head's online softmax (running max m and sum l, in the exp2
// domain, and the lanes' slice of the unnormalised output).
//
// The warps are merged through shared memory. With one split the block
// writes the normalised output; with several it writes (m, l, output row) to
// the workspace, and the last split block to finish merges the splits
// (merge_splits_if_last, counting in p.split_counters). A short sequence
// uses fewer splits than the launch has (split_of), each with keys; the
// blocks past them exit at once. Warps without keys in their split write
// m = -inf, l = 0 and a zero row, weighted 0 when the warps merge.
#pragma once

#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda::attention {

constexpr int decode_warps = 4;
constexpr int decode_threads = 32 * decode_warps;
constexpr unsigned full_mask = 0xffffffffu;

// C: the cache's element type (T, or uint8_t for FP8 codes).
template <class C, int DMAX, int VEC, int GB>
struct decode_shape {
  static constexpr int vectors = DMAX / VEC;  // VEC-element vectors in a DMAX-wide row
  static constexpr int lanes_per_key = vectors < 32 ? vectors : 32;
  static constexpr int vectors_per_lane = vectors / lanes_per_key;
  static constexpr int elems = vectors_per_lane * VEC;  // row elements a lane holds
  static constexpr int keys_per_step = 32 / lanes_per_key;
  static constexpr int unroll = GB >= 8 ? 4 : 8;  // key steps per tile: bounds registers
  static constexpr int tile_keys = keys_per_step * unroll;
  static constexpr int words_per_vector = VEC * static_cast<int>(sizeof(C)) / 4;
  static_assert(vectors >= 8 && (vectors & (vectors - 1)) == 0, "vectors: a power of two");
  static_assert(words_per_vector == 1 || words_per_vector == 2 || words_per_vector == 4);
};

// Slots of the keys a lane loads in the tile starting at `tile`; -1 for keys
// at or past key_end (their table entries are never read).
template <int U, int KEYS_PER_STEP>
__device__ __forceinline__ void find_slots(const params& p, const int32_t* table, int tile,
                                           int key_in_step, int key_end, int (&slots)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int key = tile + u * KEYS_PER_STEP + key_in_step;
    slots[u] = key < key_end ? slot_of(p, table, key) : -1;
  }
}

// A decode block's split: keys [begin, end) of its sequence, and how many
// splits the sequence uses. Each split holds at least p.min_split_keys keys
// (both counts rounded up to the kernel's `granule`), so a short sequence
// uses fewer, fuller splits than the launch has (a captured graph's count
// was chosen for max_model_len); the blocks past `used` have nothing to do.
struct split_range {
  int begin, end, used;
};
__device__ __forceinline__ split_range split_of(const params& p, int num_keys, int split,
                                                int granule) {
  const int keys_needed = max(num_keys, 1);
  const int keys = max(ceil_div(ceil_div(keys_needed, p.num_splits), granule),
                       ceil_div(p.min_split_keys, granule)) *
                   granule;
  const int begin = split * keys;
  return {begin, min(num_keys, begin + keys), ceil_div(keys_needed, keys)};
}

// After the warps of a decode block stored their online-softmax state
// (s_max, s_sum: [warp][head row]; s_out: [warp][head row][dim], each
// relative to its warp's max): merges them and writes the block's result,
// the normalised output rows when the sequence uses one split (`used`),
// else this split's partials.
template <class T, int ROWS, int DMAX>
__device__ __forceinline__ void merge_warps_and_store(
    const params& p, const float (&s_max)[decode_warps][ROWS],
    const float (&s_sum)[decode_warps][ROWS], const float (&s_out)[decode_warps][ROWS][DMAX],
    int seq, int token, int first_head, int heads_here, int split, int used) {
  const int n = heads_here * p.head_dim;
  for (int idx = threadIdx.x; idx < n; idx += decode_threads) {
    const int g = idx / p.head_dim;
    const int d = idx - g * p.head_dim;
    float block_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < decode_warps; ++w) block_max = fmaxf(block_max, s_max[w][g]);
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < decode_warps; ++w) {
      const float mw = s_max[w][g];
      const float weight = mw == -INFINITY ? 0.0f : exp2f(mw - block_max);  // idle warps: 0
      sum += s_sum[w][g] * weight;
      o += s_out[w][g][d] * weight;
    }
    const int head = first_head + g;
    if (used == 1) {
      T* out = static_cast<T*>(p.out) + static_cast<int64_t>(token) * p.q_row_stride +
               static_cast<int64_t>(head) * p.head_dim;
      out[d] = from_float<T>(sum > 0.0f ? o / sum * p.v_scale : 0.0f);
    } else {
      const int64_t r = (static_cast<int64_t>(seq) * p.num_heads + head) * p.num_splits + split;
      p.partial_out[r * p.head_dim + d] = o;
      if (d == 0) {
        p.partial_max[r] = block_max;
        p.partial_sum[r] = sum;
      }
    }
  }
}

// Merges the first `splits` splits of query heads first_head .. first_head +
// heads - 1 of sequence `seq` (each split's partials relative to its own
// max; empty ones, m = -inf, weigh 0) into their normalised output rows, with
// the whole block. `scratch`: 2 * heads * splits floats of shared memory.
// Every load of a phase is independent of the others (the partials are
// read from L2, __ldcg: other blocks of the same launch may have written
// them).
template <class T>
__device__ __forceinline__ void merge_splits(const params& p, int seq, int token, int first_head,
                                             int heads, int splits, float* scratch) {
  const int n = heads * splits;
  float* s_weight = scratch;   // [head][split]: the max, then the weight
  float* s_sum = scratch + n;  // [head][split]: l; [head][0] ends as the total
  // Partial rows (seq * num_heads + head) * num_splits + split.
  auto row = [&](int g, int s) {
    return (static_cast<int64_t>(seq) * p.num_heads + first_head + g) * p.num_splits + s;
  };
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t r = row(i / splits, i % splits);
    s_weight[i] = __ldcg(p.partial_max + r);
    s_sum[i] = __ldcg(p.partial_sum + r);
  }
  __syncthreads();
  if (threadIdx.x < heads) {
    float* w = s_weight + threadIdx.x * splits;
    float* l = s_sum + threadIdx.x * splits;
    float mx = -INFINITY;
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, w[s]);
    float total = 0.0f;
    for (int s = 0; s < splits; ++s) {
      w[s] = w[s] == -INFINITY ? 0.0f : exp2f(w[s] - mx);
      total += w[s] * l[s];
    }
    l[0] = total;
  }
  __syncthreads();
  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(token) * p.q_row_stride +
           static_cast<int64_t>(first_head) * p.head_dim;
  // Each thread merges VEC consecutive dims of one head (16-byte loads when
  // head_dim allows), its splits' loads unrolled so that several are in
  // flight at once.
  auto merge = [&](auto vec) {
    constexpr int VEC = decltype(vec)::value;
    const int per_head = p.head_dim / VEC;
    for (int idx = threadIdx.x; idx < heads * per_head; idx += blockDim.x) {
      const int g = idx / per_head;
      const int d = (idx - g * per_head) * VEC;
      const float* w = s_weight + g * splits;
      const float* rows = p.partial_out + row(g, 0) * p.head_dim + d;
      float o[VEC] = {};
#pragma unroll 8
      for (int s = 0; s < splits; ++s) {
        const float* r = rows + static_cast<int64_t>(s) * p.head_dim;
        if constexpr (VEC == 4) {
          const float4 v = __ldcg(reinterpret_cast<const float4*>(r));
          o[0] += w[s] * v.x;
          o[1] += w[s] * v.y;
          o[2] += w[s] * v.z;
          o[3] += w[s] * v.w;
        } else {
          o[0] += w[s] * __ldcg(r);
        }
      }
      const float total = s_sum[g * splits];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        out[g * p.head_dim + d + e] =
            from_float<T>(total > 0.0f ? o[e] / total * p.v_scale : 0.0f);
      }
    }
  };
  if (p.head_dim % 4 == 0) {
    merge(std::integral_constant<int, 4>{});
  } else {
    merge(std::integral_constant<int, 1>{});
  }
}

// Called by every thread of a decode block after merge_warps_and_store: when
// the sequence uses several splits, the block that stores the last of its
// (sequence, KV head chunk) merges that chunk's heads over all splits (as the CUDA
// samples' threadFenceReduction: each block's partials are made visible
// device-wide before it counts itself, and the last one to count reads
// them all) and zeroes the counter for the next launch. `scratch`: the
// warps' merge buffer, free again (2 * heads * num_splits floats fit:
// num_splits <= max_splits <= 2 * DMAX).
template <class T>
__device__ __forceinline__ void merge_splits_if_last(const params& p, int seq, int token,
                                                     int first_head, int heads_here, int used,
                                                     float* scratch) {
  if (used == 1) return;
  __shared__ bool s_last;
  __threadfence();  // this thread's partials before the block counts itself
  __syncthreads();  // (and every thread is done with the merge buffer)
  if (threadIdx.x == 0) {
    int32_t* counter = p.split_counters + static_cast<int64_t>(seq) * gridDim.y + blockIdx.y;
    s_last = atomicAdd(counter, 1) == used - 1;
    if (s_last) *counter = 0;  // every split has counted
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  merge_splits<T>(p, seq, token, first_head, heads_here, used, scratch);
}

// T: q's and the output's type; C: the cache's (T, or uint8_t: FP8 codes,
// VEC 8 of them a vector).
template <class T, class C, int DMAX, int VEC, int GB>
__global__ void __launch_bounds__(decode_threads) decode_kernel(params p) {
  pdl_begin();  // before any global memory access (launch.cuh)
  using shape = decode_shape<C, DMAX, VEC, GB>;
  constexpr int U = shape::unroll;
  constexpr int LPK = shape::lanes_per_key;
  constexpr int VPL = shape::vectors_per_lane;
  constexpr int E = shape::elems;
  constexpr int KPS = shape::keys_per_step;
  constexpr int WPV = shape::words_per_vector;

  const int seq = blockIdx.z;
  const int token = p.query_start_loc[seq];
  if (p.query_start_loc[seq + 1] - token != 1) return;  // the prefill kernel's sequence
  const int kv_head = blockIdx.y / p.head_chunks;
  const int chunk = blockIdx.y - kv_head * p.head_chunks;
  const int first_head = kv_head * p.group + chunk * GB;
  const int heads_here = min(GB, p.group - chunk * GB);
  const int num_keys = p.seq_lens[seq];  // the query sits at num_keys - 1 and sees them all
  const int split = blockIdx.x;
  const split_range range = split_of(p, num_keys, split, shape::tile_keys);
  if (split >= range.used) return;
  const int key_begin = range.begin, key_end = range.end;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int key_lane = lane % LPK;     // which vectors of the row this lane loads
  const int key_in_step = lane / LPK;  // which key of a step
  const int row_vectors = p.head_dim / VEC;

  // This lane's slice of each query head, pre-scaled into the exp2 domain.
  float q[GB][E];
  const T* q_row = static_cast<const T*>(p.q) + static_cast<int64_t>(token) * p.q_row_stride;
#pragma unroll
  for (int g = 0; g < GB; ++g) {
#pragma unroll
    for (int v = 0; v < VPL; ++v) {
      const int j = key_lane + v * LPK;
      const bool valid = g < heads_here && j < row_vectors;
      const T* src = q_row + (first_head + g) * p.head_dim + j * VEC;
      if constexpr (std::is_same_v<C, T>) {
        words<WPV> w;
        if (valid) {
          load_words(src, w);
        } else {
          zero_words(w);
        }
        unpack<T>(w, &q[g][v * VEC]);
      } else {  // (q's vectors are not the cache's: element by element, once)
#pragma unroll
        for (int i = 0; i < VEC; ++i) q[g][v * VEC + i] = valid ? to_float(src[i]) : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < VEC; ++i) q[g][v * VEC + i] *= p.scale_log2;
    }
  }

  float m[GB], l[GB], acc[GB][E];
#pragma unroll
  for (int g = 0; g < GB; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
  }

  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const C* k_head = static_cast<const C*>(p.k_cache) + static_cast<int64_t>(kv_head) * p.head_dim;
  const C* v_head = static_cast<const C*>(p.v_cache) + static_cast<int64_t>(kv_head) * p.head_dim;
  constexpr int tile_stride = decode_warps * shape::tile_keys;
  int tile = key_begin + warp * shape::tile_keys;
  int slots[U];
  find_slots<U, KPS>(p, table, tile, key_in_step, key_end, slots);
  // `tile < key_end` is warp-uniform, and so are all shuffles below.
  for (; tile < key_end; tile += tile_stride) {
    words<WPV> kw[U][VPL], vw[U][VPL];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t row = static_cast<int64_t>(slots[u]) * p.kv_row_stride;
#pragma unroll
      for (int v = 0; v < VPL; ++v) {
        const int j = key_lane + v * LPK;
        if (slots[u] >= 0 && j < row_vectors) {
          load_words(k_head + row + j * VEC, kw[u][v]);
          load_words(v_head + row + j * VEC, vw[u][v]);
        } else {
          zero_words(kw[u][v]);
          zero_words(vw[u][v]);
        }
      }
    }
    find_slots<U, KPS>(p, table, tile + tile_stride, key_in_step, key_end, slots);

    float s[U][GB];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[E];
#pragma unroll
      for (int v = 0; v < VPL; ++v) unpack<C>(kw[u][v], &kf[v * VEC]);
      const bool valid = tile + u * KPS + key_in_step < key_end;
#pragma unroll
      for (int g = 0; g < GB; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) dot = fmaf(q[g][e], kf[e], dot);
#pragma unroll
        for (int offset = LPK / 2; offset > 0; offset /= 2) {
          dot += __shfl_xor_sync(full_mask, dot, offset);
        }
        s[u][g] = valid ? dot : -INFINITY;
      }
    }
    // The tile's first key (u = 0 of the lanes with key_in_step 0) is valid,
    // so every head's tile maximum, and with it m, is finite from here on.
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      float tile_max = s[0][g];
#pragma unroll
      for (int u = 1; u < U; ++u) tile_max = fmaxf(tile_max, s[u][g]);
#pragma unroll
      for (int offset = LPK; offset < 32; offset *= 2) {
        tile_max = fmaxf(tile_max, __shfl_xor_sync(full_mask, tile_max, offset));
      }
      const float new_max = fmaxf(m[g], tile_max);
      const float correction = exp2f(m[g] - new_max);  // 0 while m is -inf
      m[g] = new_max;
      l[g] *= correction;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] *= correction;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[E];
#pragma unroll
      for (int v = 0; v < VPL; ++v) unpack<C>(vw[u][v], &vf[v * VEC]);
#pragma unroll
      for (int g = 0; g < GB; ++g) {
        const float prob = exp2f(s[u][g] - m[g]);  // 0 for masked keys
        l[g] += prob;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] = fmaf(prob, vf[e], acc[g][e]);
      }
    }
  }
  // The warp's key groups share m: their sums and output slices just add.
#pragma unroll
  for (int offset = LPK; offset < 32; offset *= 2) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      l[g] += __shfl_xor_sync(full_mask, l[g], offset);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] += __shfl_xor_sync(full_mask, acc[g][e], offset);
    }
  }

  // Merge the warps.
  __shared__ float s_max[decode_warps][GB];
  __shared__ float s_sum[decode_warps][GB];
  __shared__ float s_out[decode_warps][GB][DMAX];
  static_assert(2 * max_splits <= decode_warps * DMAX, "s_out holds the split merge's scratch");
  if (key_in_step == 0) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
#pragma unroll
      for (int v = 0; v < VPL; ++v) {
        const int j = key_lane + v * LPK;
        if (j < row_vectors) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) s_out[warp][g][j * VEC + i] = acc[g][v * VEC + i];
        }
      }
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
      s_max[warp][g] = m[g];
      s_sum[warp][g] = l[g];
    }
  }
  __syncthreads();
  merge_warps_and_store<T, GB, DMAX>(p, s_max, s_sum, s_out, seq, token, first_head, heads_here,
                                     split, range.used);
  merge_splits_if_last<T>(p, seq, token, first_head, heads_here, range.used, &s_out[0][0][0]);
}

}  // namespace troupe::cuda::attention
