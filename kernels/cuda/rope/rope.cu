#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/rope/rope.h"

namespace troupe::cuda {

namespace {

// One block per token; threads walk the (head, pair) grid of q then k.
template <class T>
__global__ void rope_kernel(T* q, int q_heads, T* k, int k_heads, int head_dim,
                            const int32_t* positions, const float* cos_table,
                            const float* sin_table) {
  const int64_t token = blockIdx.x;
  const int half = head_dim / 2;
  const float* c = cos_table + static_cast<int64_t>(positions[token]) * half;
  const float* s = sin_table + static_cast<int64_t>(positions[token]) * half;
  const int pairs = (q_heads + k_heads) * half;
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int head = i / half;
    const int j = i % half;
    T* x = head < q_heads ? q + (token * q_heads + head) * head_dim
                          : k + (token * k_heads + (head - q_heads)) * head_dim;
    const float x1 = to_float(x[j]);
    const float x2 = to_float(x[j + half]);
    x[j] = from_float<T>(x1 * c[j] - x2 * s[j]);
    x[j + half] = from_float<T>(x2 * c[j] + x1 * s[j]);
  }
}

}  // namespace

void rope(element_type t, void* q, int64_t q_heads, void* k, int64_t k_heads, int64_t head_dim,
          const int32_t* positions, int64_t num_tokens, const float* cos_table,
          const float* sin_table, cudaStream_t stream) {
  if (num_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(num_tokens));
  switch (t) {
    case element_type::f32:
      rope_kernel<float><<<grid, 128, 0, stream>>>(
          static_cast<float*>(q), static_cast<int>(q_heads), static_cast<float*>(k),
          static_cast<int>(k_heads), static_cast<int>(head_dim), positions, cos_table, sin_table);
      break;
    case element_type::bf16:
      rope_kernel<__nv_bfloat16><<<grid, 128, 0, stream>>>(
          static_cast<__nv_bfloat16*>(q), static_cast<int>(q_heads),
          static_cast<__nv_bfloat16*>(k), static_cast<int>(k_heads), static_cast<int>(head_dim),
          positions, cos_table, sin_table);
      break;
    case element_type::f16:
      rope_kernel<__half><<<grid, 128, 0, stream>>>(
          static_cast<__half*>(q), static_cast<int>(q_heads), static_cast<__half*>(k),
          static_cast<int>(k_heads), static_cast<int>(head_dim), positions, cos_table, sin_table);
      break;
  }
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace troupe::cuda
