// moe.h's routing, sorting, decode products and combine (the grouped GEMMs
// are in moe_gemm.cu). Every kernel calls pdl_begin() before it touches
// global memory (launch.cuh).
#include "kernels/cuda/moe/moe.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>

#include "common/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe/moe_common.cuh"

namespace troupe::cuda {

int64_t moe_max_tiles(int64_t slots, int64_t experts) {
  // Each nonempty expert's last tile may be partial: at most one more tile
  // per expert than the slots fill, and no more experts than slots.
  return (slots + moe_tile - 1) / moe_tile + (experts < slots ? experts : slots);
}

int64_t moe_index_ints(int64_t slots, int64_t experts) {
  return (experts + 1) + slots + 2 * moe_max_tiles(slots, experts) + 1;
}

moe_index moe_index_at(int32_t* ints, int64_t slots, int64_t experts) {
  const int64_t tiles = moe_max_tiles(slots, experts);
  moe_index m;
  m.offsets = ints;
  m.sorted = m.offsets + experts + 1;
  m.tile_expert = m.sorted + slots;
  m.tile_begin = m.tile_expert + tiles;
  m.num_tiles = m.tile_begin + tiles;
  return m;
}

bool moe_gemv_supported(int64_t hidden, int64_t inter) { return hidden % 8 == 0 && inter % 8 == 0; }

namespace {

constexpr int route_warps = 4;
constexpr int per_lane = moe_max_experts / 32;

// A warp a token: softmax over the experts (non-finite logits count as
// -inf; all of them so: equal probabilities, as the CPU reference), then
// top_k rounds of a warp argmax (equal probabilities: the lower expert).
template <class T>
__global__ void __launch_bounds__(route_warps * 32)
    moe_route_kernel(const T* __restrict__ logits, int64_t n, int experts, int top_k,
                     bool renormalize, int32_t* __restrict__ ids, float* __restrict__ weights,
                     uint32_t* __restrict__ counts, const int32_t* __restrict__ count_if) {
  pdl_begin();
  const int lane = threadIdx.x % 32;
  const int64_t t = int64_t(blockIdx.x) * route_warps + threadIdx.x / 32;
  if (t >= n) return;
  float p[per_lane];
  float max = -INFINITY;
#pragma unroll
  for (int i = 0; i < per_lane; ++i) {
    const int e = lane + 32 * i;
    float v = -INFINITY;
    if (e < experts) {
      v = to_float(logits[t * experts + e]);
      if (!isfinite(v)) v = -INFINITY;
    }
    p[i] = v;
    max = fmaxf(max, v);
  }
  for (int o = 16; o > 0; o /= 2) max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, o));
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < per_lane; ++i) {
    p[i] = p[i] == -INFINITY ? 0.0f : expf(p[i] - max);
    sum += p[i];
  }
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
  for (int i = 0; i < per_lane; ++i) {
    // -1: not an expert, or already chosen.
    p[i] = lane + 32 * i < experts ? (sum > 0.0f ? p[i] / sum : 1.0f / static_cast<float>(experts))
                                   : -1.0f;
  }
  float mine = 0.0f, chosen = 0.0f;
  int my_id = 0;
  for (int j = 0; j < top_k; ++j) {
    float best = -1.0f;
    int best_e = INT_MAX;
#pragma unroll
    for (int i = 0; i < per_lane; ++i) {
      if (p[i] > best) {  // strictly: a lane's lower expert wins a tie
        best = p[i];
        best_e = lane + 32 * i;
      }
    }
    for (int o = 16; o > 0; o /= 2) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) {
        best = ob;
        best_e = oe;
      }
    }
#pragma unroll
    for (int i = 0; i < per_lane; ++i) {
      if (lane + 32 * i == best_e) p[i] = -1.0f;
    }
    if (lane == j) {
      mine = best;
      my_id = best_e;
    }
    chosen += best;
  }
  if (lane < top_k) {
    ids[t * top_k + lane] = my_id;
    weights[t * top_k + lane] = renormalize ? mine / chosen : mine;
    if (counts != nullptr && (count_if == nullptr || count_if[t] >= 0)) atomicAdd(counts + my_id, 1u);
  }
}

// One block: counts per expert in shared memory, the offsets and tiles
// (thread 0, in expert order), then each slot's place in its expert's run
// (an order within a run that varies from launch to launch changes no
// value: each slot's outputs are its own sums).
__global__ void __launch_bounds__(1024) moe_sort_kernel(const int32_t* __restrict__ ids,
                                                        int64_t slots, int experts, moe_index m) {
  pdl_begin();
  __shared__ int counts[moe_max_experts];
  __shared__ int cursor[moe_max_experts];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int64_t s = threadIdx.x; s < slots; s += blockDim.x) atomicAdd(&counts[ids[s]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int offset = 0, tiles = 0;
    for (int e = 0; e < experts; ++e) {
      m.offsets[e] = offset;
      cursor[e] = offset;
      for (int b = 0; b < counts[e]; b += moe_tile) {
        m.tile_expert[tiles] = e;
        m.tile_begin[tiles] = offset + b;
        ++tiles;
      }
      offset += counts[e];
    }
    m.offsets[experts] = offset;
    *m.num_tiles = tiles;
  }
  __syncthreads();
  for (int64_t s = threadIdx.x; s < slots; s += blockDim.x) {
    m.sorted[atomicAdd(&cursor[ids[s]], 1)] = static_cast<int32_t>(s);
  }
}

constexpr int gemv_threads = 256;

// Sum over the block (gemv_threads threads); thread 0 gets it.
__device__ __forceinline__ float block_total(float v, float (&partial)[gemv_threads / 32]) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0.0f;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 0; w < gemv_threads / 32; ++w) v += partial[w];
  }
  return v;
}

// The gate/up product of slot blockIdx.y, act column blockIdx.x: the
// block's threads split k (16-byte pieces, the block's 256 consecutive
// pieces at a time) over gate row r and up row inter + r of the slot's
// expert times x[slot / top_k], then SiLU-and-mul (act [slots, inter]).
// A block a row pair keeps every thread's walk short (k of 2048 bf16 is
// one piece per thread), so that many blocks' loads are in flight at once.
template <class T>
__global__ void __launch_bounds__(gemv_threads)
    moe_gemv_up_kernel(const T* __restrict__ x, const int32_t* __restrict__ ids, int top_k,
                       const T* __restrict__ w, int64_t inter, int64_t k, T* __restrict__ act) {
  pdl_begin();
  __shared__ float partial[2][gemv_threads / 32];
  constexpr int V = vec16<T>::size;
  const int64_t slot = blockIdx.y, r = blockIdx.x;
  const int64_t e = ids[slot];
  const T* xr = x + (slot / top_k) * k;
  const T* w0 = w + (e * 2 * inter + r) * k;
  const T* w1 = w0 + inter * k;
  const int pieces = static_cast<int>(k / V);
  float a0 = 0.0f, a1 = 0.0f;
  for (int q = threadIdx.x; q < pieces; q += gemv_threads) {
    const vec16<T> g = load16_stream(w0 + q * V), u = load16_stream(w1 + q * V), xv = load16(xr + q * V);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float xf = to_float(xv.v[v]);
      a0 = fmaf(to_float(g.v[v]), xf, a0);
      a1 = fmaf(to_float(u.v[v]), xf, a1);
    }
  }
  a0 = block_total(a0, partial[0]);
  a1 = block_total(a1, partial[1]);
  if (threadIdx.x == 0) act[slot * inter + r] = silu_mul<T>(a0, a1);
}

// The down product and the weighted sum of token blockIdx.y, output column
// blockIdx.x: the block's threads split the pieces of all the token's
// top_k slots (row r of each slot's expert times its act row, scaled by
// the slot's weight), walked as one sequence; out[t, r] rounded once.
template <class T>
__global__ void __launch_bounds__(gemv_threads)
    moe_gemv_down_sum_kernel(const T* __restrict__ act, const int32_t* __restrict__ ids,
                             const float* __restrict__ weights, int top_k, const T* __restrict__ w,
                             int64_t hidden, int64_t inter, T* __restrict__ out, int64_t out_stride) {
  pdl_begin();
  __shared__ float partial[gemv_threads / 32];
  __shared__ const T* rows[moe_max_top_k];
  __shared__ float scale[moe_max_top_k];
  constexpr int V = vec16<T>::size;
  const int64_t t = blockIdx.y, r = blockIdx.x;
  if (threadIdx.x < top_k) {
    const int64_t slot = t * top_k + threadIdx.x;
    rows[threadIdx.x] = w + (ids[slot] * hidden + r) * inter;
    scale[threadIdx.x] = weights[slot];
  }
  __syncthreads();
  const T* a = act + t * top_k * inter;
  const int per_slot = static_cast<int>(inter / V), pieces = per_slot * top_k;
  float acc = 0.0f;
  for (int q = threadIdx.x; q < pieces; q += gemv_threads) {
    const int j = q / per_slot, off = (q - j * per_slot) * V;
    const vec16<T> wv = load16_stream(rows[j] + off), av = load16(a + j * inter + off);
    float dot = 0.0f;
#pragma unroll
    for (int v = 0; v < V; ++v) dot = fmaf(to_float(wv.v[v]), to_float(av.v[v]), dot);
    acc = fmaf(scale[j], dot, acc);
  }
  acc = block_total(acc, partial);
  if (threadIdx.x == 0) out[t * out_stride + r] = from_float<T>(acc);
}

constexpr int combine_threads = 256;

template <class T>
__global__ void __launch_bounds__(combine_threads)
    moe_combine_kernel(const T* __restrict__ y, const float* __restrict__ weights, int top_k,
                       int64_t hidden, T* __restrict__ out, int64_t out_stride) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int64_t c = int64_t(blockIdx.y) * combine_threads + threadIdx.x;
  if (c >= hidden) return;
  float sum = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    sum = fmaf(weights[t * top_k + j], to_float(y[(t * top_k + j) * hidden + c]), sum);
  }
  out[t * out_stride + c] = from_float<T>(sum);
}

}  // namespace

void moe_route(element_type t, const void* logits, int64_t n, int experts, int top_k,
               bool renormalize, int32_t* ids, float* weights, cudaStream_t stream,
               uint32_t* counts, const int32_t* count_if) {
  TROUPE_CHECK(experts >= 1 && experts <= moe_max_experts && top_k >= 1 &&
               top_k <= moe_max_top_k && top_k <= experts);
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>((n + route_warps - 1) / route_warps));
  with_element(t, [&](auto tag) {
    using T = decltype(tag);
    launch_pdl(moe_route_kernel<T>, grid, dim3(route_warps * 32), 0, stream,
               static_cast<const T*>(logits), n, experts, top_k, renormalize, ids, weights, counts,
               count_if);
  });
}

void moe_sort(const int32_t* ids, int64_t slots, int experts, const moe_index& index,
              cudaStream_t stream) {
  TROUPE_CHECK(experts >= 1 && experts <= moe_max_experts);
  launch_pdl(moe_sort_kernel, dim3(1), dim3(1024), 0, stream, ids, slots, experts, index);
}

void moe_gemv_up(element_type t, const void* x, const int32_t* ids, int64_t slots, int top_k,
                 const void* gate_up, int64_t inter, int64_t hidden, void* act,
                 cudaStream_t stream) {
  TROUPE_CHECK(moe_gemv_supported(hidden, inter) && slots <= 65535);
  if (slots == 0) return;
  const dim3 grid(static_cast<unsigned>(inter), static_cast<unsigned>(slots));
  with_element(t, [&](auto tag) {
    using T = decltype(tag);
    launch_pdl(moe_gemv_up_kernel<T>, grid, dim3(gemv_threads), 0, stream,
               static_cast<const T*>(x), ids, top_k, static_cast<const T*>(gate_up), inter, hidden,
               static_cast<T*>(act));
  });
}

void moe_gemv_down_sum(element_type t, const void* act, const int32_t* ids, const float* weights,
                       int64_t n, int top_k, const void* down, int64_t hidden, int64_t inter,
                       void* out, int64_t out_stride, cudaStream_t stream) {
  TROUPE_CHECK(moe_gemv_supported(hidden, inter) && n <= 65535 && top_k >= 1 && top_k <= moe_max_top_k);
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>(hidden), static_cast<unsigned>(n));
  with_element(t, [&](auto tag) {
    using T = decltype(tag);
    launch_pdl(moe_gemv_down_sum_kernel<T>, grid, dim3(gemv_threads), 0, stream,
               static_cast<const T*>(act), ids, weights, top_k, static_cast<const T*>(down), hidden,
               inter, static_cast<T*>(out), out_stride);
  });
}

void moe_combine(element_type t, const void* y, const float* weights, int64_t n, int top_k,
                 int64_t hidden, void* out, int64_t out_stride, cudaStream_t stream) {
  if (n == 0) return;
  const dim3 grid(static_cast<unsigned>(n),
                  static_cast<unsigned>((hidden + combine_threads - 1) / combine_threads));
  with_element(t, [&](auto tag) {
    using T = decltype(tag);
    launch_pdl(moe_combine_kernel<T>, grid, dim3(combine_threads), 0, stream,
               static_cast<const T*>(y), weights, top_k, hidden, static_cast<T*>(out), out_stride);
  });
}

}  // namespace troupe::cuda
