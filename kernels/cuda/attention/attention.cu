// One CUDA block per (query token, query head). Its warps split the visible
// keys; each warp keeps an online softmax (running max, sum, and its lanes'
// slice of the output) and the warps are merged at the end. A first,
// correctness-first kernel: the split-KV decode kernel and the tiled
// prefill kernel replace it for speed.
#include <cfloat>

#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"

namespace troupe::cuda {

namespace {

constexpr int warps_per_block = 4;
constexpr int max_dims_per_lane = 8;  // head_dim <= 256

template <class T>
__global__ void paged_attention_kernel(paged_attention_args a) {
  const int64_t token = blockIdx.x / a.num_heads;
  const int head = static_cast<int>(blockIdx.x % a.num_heads);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int seq = a.token_seq[token];
  const int64_t query_len = a.query_start_loc[seq + 1] - a.query_start_loc[seq];
  const int64_t num_keys = a.seq_lens[seq] - query_len + (token - a.query_start_loc[seq]) + 1;
  const int kv_head = head / static_cast<int>(a.num_heads / a.num_kv_heads);
  const int64_t kv_cols = a.num_kv_heads * a.head_dim;
  const int dims = static_cast<int>((a.head_dim + 31) / 32);
  const T* q = static_cast<const T*>(a.q) + (token * a.num_heads + head) * a.head_dim;
  float qv[max_dims_per_lane], acc[max_dims_per_lane];
  for (int i = 0; i < dims; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < a.head_dim ? to_float(q[d]) * a.scale : 0.0f;
    acc[i] = 0.0f;
  }
  float running_max = -FLT_MAX, running_sum = 0.0f;
  const int32_t* table = a.block_tables + seq * a.max_blocks_per_seq;
  for (int64_t t = warp; t < num_keys; t += warps_per_block) {
    const int64_t slot = static_cast<int64_t>(table[t / a.block_size]) * a.block_size + t % a.block_size;
    const T* key = static_cast<const T*>(a.k_cache) + slot * kv_cols + kv_head * a.head_dim;
    float partial = 0.0f;
    for (int i = 0; i < dims; ++i) {
      const int d = lane + 32 * i;
      if (d < a.head_dim) partial += qv[i] * to_float(key[d]);
    }
    for (int offset = 16; offset > 0; offset /= 2) partial += __shfl_xor_sync(0xffffffffu, partial, offset);
    const float new_max = fmaxf(running_max, partial);
    const float correction = __expf(running_max - new_max);
    const float p = __expf(partial - new_max);
    running_sum = running_sum * correction + p;
    const T* val = static_cast<const T*>(a.v_cache) + slot * kv_cols + kv_head * a.head_dim;
    for (int i = 0; i < dims; ++i) {
      const int d = lane + 32 * i;
      acc[i] = acc[i] * correction + (d < a.head_dim ? p * to_float(val[d]) : 0.0f);
    }
    running_max = new_max;
  }
  // Merge the warps' partial softmaxes.
  __shared__ float s_max[warps_per_block], s_sum[warps_per_block];
  __shared__ float s_acc[warps_per_block][32 * max_dims_per_lane];
  if (lane == 0) {
    s_max[warp] = running_max;
    s_sum[warp] = running_sum;
  }
  for (int i = 0; i < dims; ++i) s_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  float global_max = -FLT_MAX;
  for (int w = 0; w < warps_per_block; ++w) global_max = fmaxf(global_max, s_max[w]);
  float total = 0.0f;
  for (int w = 0; w < warps_per_block; ++w) total += s_sum[w] * __expf(s_max[w] - global_max);
  T* out = static_cast<T*>(a.out) + (token * a.num_heads + head) * a.head_dim;
  for (int i = 0; i < dims; ++i) {
    const int d = lane + 32 * i;
    if (d >= a.head_dim) continue;
    float v = 0.0f;
    for (int w = 0; w < warps_per_block; ++w) v += s_acc[w][d] * __expf(s_max[w] - global_max);
    out[d] = from_float<T>(total > 0.0f ? v / total : 0.0f);
  }
}

}  // namespace

void paged_attention(element_type t, const paged_attention_args& a, cudaStream_t stream) {
  if (a.num_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(a.num_tokens * a.num_heads));
  const dim3 block(32 * warps_per_block);
  switch (t) {
    case element_type::f32: paged_attention_kernel<float><<<grid, block, 0, stream>>>(a); break;
    case element_type::bf16: paged_attention_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(a); break;
    case element_type::f16: paged_attention_kernel<__half><<<grid, block, 0, stream>>>(a); break;
  }
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace troupe::cuda
