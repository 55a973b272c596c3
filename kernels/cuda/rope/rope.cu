#include <algorithm>

#include "kernels/cuda/cache/kv_codes.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/rope/rope.h"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda {

namespace {

// Grid y = token; x chunks the (head, pair) items of q then k.
template <class T>
__global__ void rope_kernel(T* q, int q_heads, T* k, int k_heads, int head_dim,
                            const int32_t* positions, const float* cos_table,
                            const float* sin_table) {
  pdl_begin();  // before any global memory access (launch.cuh)
  const int64_t token = blockIdx.y;
  const int half = head_dim / 2;
  const float* c = cos_table + static_cast<int64_t>(positions[token]) * half;
  const float* s = sin_table + static_cast<int64_t>(positions[token]) * half;
  const int pairs = (q_heads + k_heads) * half;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < pairs; i += gridDim.x * blockDim.x) {
    const int head = i / half;
    const int j = i % half;
    T* x = head < q_heads ? q + (token * q_heads + head) * head_dim
                          : k + (token * k_heads + (head - q_heads)) * head_dim;
    const float2 r = rotate_pair(to_float(x[j]), to_float(x[j + half]), c[j], s[j]);
    x[j] = from_float<T>(r.x);
    x[j + half] = from_float<T>(r.y);
  }
}

// One warp per (token, head): lane l holds the pairs (j, j + half) for j =
// l, l + 32, ... < half (at most 4 for head_dim <= 256).
constexpr int heads_per_block = 4;
constexpr int max_pairs_per_lane = 4;

template <class T>
__global__ void qkv_rope_cache_kernel(const T* qkv, int q_heads, int kv_heads, int head_dim,
                                      const T* q_norm, const T* k_norm, float eps,
                                      const int32_t* positions, const float* cos_table,
                                      const float* sin_table, const int32_t* slots, T* q_out,
                                      kv_dest cache) {
  const int64_t token = blockIdx.y;
  const int head = blockIdx.x * heads_per_block + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int total = q_heads + 2 * kv_heads;
  const int half = head_dim / 2;
  const bool is_q = head < q_heads, is_v = head >= q_heads + kv_heads;
  // Positions and slots (host-uploaded metadata), the cos/sin tables and the
  // q/k norm weights are written by no kernel: read before the wait
  // (launch.cuh), they land while the product ahead finishes.
  const T* norm = is_q ? q_norm : k_norm;
  float c[max_pairs_per_lane], s[max_pairs_per_lane], n1[max_pairs_per_lane],
      n2[max_pairs_per_lane];
  int64_t slot = 0;
  if (head < total) {
    if (!is_q) slot = slots[token];
    if (!is_v) {
      const int64_t pos = positions[token];
#pragma unroll
      for (int i = 0; i < max_pairs_per_lane; ++i) {
        const int j = lane + 32 * i;
        c[i] = j < half ? cos_table[pos * half + j] : 0.0f;
        s[i] = j < half ? sin_table[pos * half + j] : 0.0f;
        n1[i] = norm != nullptr && j < half ? to_float(norm[j]) : 0.0f;
        n2[i] = norm != nullptr && j < half ? to_float(norm[j + half]) : 0.0f;
      }
    }
  }
  pdl_begin();  // before reading qkv or writing anything (launch.cuh)
  if (head >= total || (!is_q && slot < 0)) return;
  // Row element j goes to q_out[q_row + j] or into the cache at kv_row + j.
  const int64_t q_row = (token * q_heads + head) * head_dim;
  const int kv_head = is_v ? head - q_heads - kv_heads : head - q_heads;
  const int64_t kv_row = (slot * kv_heads + kv_head) * head_dim;
  auto store = [&](int j, T x) {
    if (is_q) {
      q_out[q_row + j] = x;
    } else {
      store_kv(cache, is_v, kv_row + j, x);
    }
  };
  const T* src = qkv + (token * total + head) * head_dim;
  float x1[max_pairs_per_lane], x2[max_pairs_per_lane];
#pragma unroll
  for (int i = 0; i < max_pairs_per_lane; ++i) {
    const int j = lane + 32 * i;
    x1[i] = j < half ? to_float(src[j]) : 0.0f;
    x2[i] = j < half ? to_float(src[j + half]) : 0.0f;
  }
  if (is_v) {
#pragma unroll
    for (int i = 0; i < max_pairs_per_lane; ++i) {
      const int j = lane + 32 * i;
      if (j < half) {
        store(j, src[j]);
        store(j + half, src[j + half]);
      }
    }
    return;
  }
  if (norm != nullptr) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < max_pairs_per_lane; ++i) sum += x1[i] * x1[i] + x2[i] * x2[i];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const float inv = rsqrtf(sum / static_cast<float>(head_dim) + eps);
#pragma unroll
    for (int i = 0; i < max_pairs_per_lane; ++i) {
      x1[i] = to_float(from_float<T>(x1[i] * inv * n1[i]));
      x2[i] = to_float(from_float<T>(x2[i] * inv * n2[i]));
    }
  }
#pragma unroll
  for (int i = 0; i < max_pairs_per_lane; ++i) {
    const int j = lane + 32 * i;
    if (j < half) {
      const float2 r = rotate_pair(x1[i], x2[i], c[i], s[i]);
      store(j, from_float<T>(r.x));
      store(j + half, from_float<T>(r.y));
    }
  }
}

}  // namespace

void qkv_rope_cache(element_type t, const void* qkv, int64_t num_tokens, int64_t q_heads,
                    int64_t kv_heads, int64_t head_dim, const void* q_norm, const void* k_norm,
                    float eps, const int32_t* positions, const float* cos_table,
                    const float* sin_table, const int32_t* slot_mapping, void* q_out,
                    const kv_dest& cache, cudaStream_t stream) {
  const int64_t total = q_heads + 2 * kv_heads;
  const dim3 block(32 * heads_per_block);
  auto go = [&](auto tag) {
    using T = decltype(tag);
    // Grid y is the token (at most 65,535 a launch).
    for (int64_t first = 0; first < num_tokens; first += 65535) {
      const int64_t n = std::min<int64_t>(65535, num_tokens - first);
      const dim3 grid(static_cast<unsigned>((total + heads_per_block - 1) / heads_per_block),
                      static_cast<unsigned>(n));
      launch_pdl(qkv_rope_cache_kernel<T>, grid, block, 0, stream,
          static_cast<const T*>(qkv) + first * total * head_dim, static_cast<int>(q_heads),
          static_cast<int>(kv_heads), static_cast<int>(head_dim), static_cast<const T*>(q_norm),
          static_cast<const T*>(k_norm), eps, positions + first, cos_table, sin_table,
          slot_mapping + first, static_cast<T*>(q_out) + first * q_heads * head_dim,
          cache);
      TROUPE_CUDA_CHECK_LAUNCH();
    }
  };
  switch (t) {
    case element_type::f32: go(float{}); break;
    case element_type::bf16: go(__nv_bfloat16{}); break;
    case element_type::f16: go(__half{}); break;
  }
}

void rope(element_type t, void* q, int64_t q_heads, void* k, int64_t k_heads, int64_t head_dim,
          const int32_t* positions, int64_t num_tokens, const float* cos_table,
          const float* sin_table, cudaStream_t stream) {
  // Blocks of 128 (head, pair) items: y = token (at most 65,535 a launch),
  // x = item chunk.
  const int64_t pairs = (q_heads + k_heads) * (head_dim / 2);
  auto go = [&](auto tag) {
    using T = decltype(tag);
    for (int64_t first = 0; first < num_tokens; first += 65535) {
      const int64_t n = std::min<int64_t>(65535, num_tokens - first);
      const dim3 grid(static_cast<unsigned>((pairs + 127) / 128), static_cast<unsigned>(n));
      launch_pdl(rope_kernel<T>, grid, 128, 0, stream,
          static_cast<T*>(q) + first * q_heads * head_dim, static_cast<int>(q_heads),
          static_cast<T*>(k) + first * k_heads * head_dim, static_cast<int>(k_heads),
          static_cast<int>(head_dim), positions + first, cos_table, sin_table);
      TROUPE_CUDA_CHECK_LAUNCH();
    }
  };
  switch (t) {
    case element_type::f32: go(float{}); break;
    case element_type::bf16: go(__nv_bfloat16{}); break;
    case element_type::f16: go(__half{}); break;
  }
}

}  // namespace troupe::cuda
