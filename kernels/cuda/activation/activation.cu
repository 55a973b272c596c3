#include "kernels/cuda/activation/activation.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"

namespace troupe::cuda {

namespace {

template <class T>
__global__ void silu_and_mul_kernel(const T* gate_up, int64_t d, T* out) {
  const int64_t row = blockIdx.x;
  const T* g = gate_up + row * 2 * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float x = to_float(g[j]);
    const float silu = x / (1.0f + __expf(-x));
    out[row * d + j] = from_float<T>(silu * to_float(g[d + j]));
  }
}

template <class T>
__global__ void embedding_kernel(const int32_t* ids, const T* table, int64_t cols, T* out) {
  const int64_t row = blockIdx.x;
  const T* src = table + static_cast<int64_t>(ids[row]) * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) out[row * cols + j] = src[j];
}

template <class T>
__global__ void add_bias_kernel(T* out, const T* bias, int64_t cols) {
  const int64_t row = blockIdx.x;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    out[row * cols + j] = from_float<T>(to_float(out[row * cols + j]) + to_float(bias[j]));
  }
}

template <class F>
void by_type(element_type t, F&& f) {
  switch (t) {
    case element_type::f32: return f(float{});
    case element_type::bf16: return f(__nv_bfloat16{});
    case element_type::f16: return f(__half{});
  }
}

}  // namespace

void silu_and_mul(element_type t, const void* gate_up, int64_t rows, int64_t d, void* out,
                  cudaStream_t stream) {
  if (rows == 0) return;
  by_type(t, [&](auto tag) {
    using T = decltype(tag);
    silu_and_mul_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(
        static_cast<const T*>(gate_up), d, static_cast<T*>(out));
  });
  TROUPE_CUDA_CHECK_LAUNCH();
}

void embedding(element_type t, const int32_t* ids, int64_t num_tokens, const void* table,
               int64_t cols, void* out, cudaStream_t stream) {
  if (num_tokens == 0) return;
  by_type(t, [&](auto tag) {
    using T = decltype(tag);
    embedding_kernel<T><<<static_cast<unsigned>(num_tokens), 256, 0, stream>>>(
        ids, static_cast<const T*>(table), cols, static_cast<T*>(out));
  });
  TROUPE_CUDA_CHECK_LAUNCH();
}

void add_bias(element_type t, void* out, const void* bias, int64_t rows, int64_t cols,
              cudaStream_t stream) {
  if (rows == 0) return;
  by_type(t, [&](auto tag) {
    using T = decltype(tag);
    add_bias_kernel<T><<<static_cast<unsigned>(rows), 256, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(bias), cols);
  });
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace troupe::cuda
