#include "kernels/cuda/activation/activation.h"

#include <algorithm>
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda {

namespace {

template <class T>
__global__ void silu_and_mul_kernel(const T* gate_up, int64_t d, T* out) {
  pdl_begin();  // before any global memory access (launch.cuh)
  const int64_t row = blockIdx.x;
  const T* g = gate_up + row * 2 * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float x = to_float(g[j]);
    const float silu = x / (1.0f + __expf(-x));
    out[row * d + j] = from_float<T>(silu * to_float(g[d + j]));
  }
}

// 16-byte vectors, a 2-D grid (column chunks x rows) so that a few rows
// still fill the GPU. Needs d to be a multiple of the vector width.
template <class T>
__global__ void silu_and_mul_vec_kernel(const T* gate_up, int64_t d, T* out) {
  pdl_begin();  // before any global memory access (launch.cuh)
  constexpr int width = vec16<T>::size;
  const int64_t row = blockIdx.y;
  const int64_t j = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * width;
  if (j >= d) return;
  const T* g = gate_up + row * 2 * d;
  const vec16<T> gv = load16(g + j);
  const vec16<T> uv = load16(g + d + j);
  vec16<T> o;
#pragma unroll
  for (int e = 0; e < width; ++e) {
    const float x = to_float(gv.v[e]);
    o.v[e] = from_float<T>(x / (1.0f + __expf(-x)) * to_float(uv.v[e]));
  }
  store16(out + row * d + j, o);
}

// out[row, j] += sigmoid(gate[row]) * x[row, j] (Qwen2-MoE's shared
// expert), in float32, rounded once; a block a row.
template <class T>
__global__ void add_sigmoid_gated_kernel(const T* x, const T* gate, int64_t gate_stride,
                                         int64_t cols, T* out) {
  pdl_begin();  // before any global memory access (launch.cuh)
  const int64_t row = blockIdx.x;
  const float g = to_float(gate[row * gate_stride]);
  const float s = 1.0f / (1.0f + __expf(-g));
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const int64_t i = row * cols + j;
    out[i] = from_float<T>(to_float(out[i]) + s * to_float(x[i]));
  }
}

// The table row of token `id`, or -1 when another rank holds it (ops::embedding).
__device__ __forceinline__ int64_t table_row(int32_t id, int64_t first_row, int64_t rows) {
  const int64_t r = static_cast<int64_t>(id) - first_row;
  return r >= 0 && r < rows ? r : -1;
}

template <class T>
__global__ void embedding_vec_kernel(const int32_t* ids, const T* table, int64_t first_row,
                                     int64_t rows, int64_t cols, T* out) {
  pdl_begin();  // before any global memory access (launch.cuh)
  constexpr int width = vec16<T>::size;
  const int64_t row = blockIdx.y;
  const int64_t j = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * width;
  if (j >= cols) return;
  const int64_t src = table_row(ids[row], first_row, rows);
  vec16<T> v;
  if (src >= 0) {
    v = load16(table + src * cols + j);
  } else {
    for (int e = 0; e < width; ++e) v.v[e] = from_float<T>(0.0f);
  }
  store16(out + row * cols + j, v);
}

template <class T>
__global__ void embedding_kernel(const int32_t* ids, const T* table, int64_t first_row,
                                 int64_t rows, int64_t cols, T* out) {
  pdl_begin();  // before any global memory access (launch.cuh)
  const int64_t row = blockIdx.x;
  const int64_t src = table_row(ids[row], first_row, rows);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    out[row * cols + j] = src >= 0 ? table[src * cols + j] : from_float<T>(0.0f);
  }
}

template <class T>
__global__ void add_bias_kernel(T* out, const T* bias, int64_t cols) {
  pdl_begin();  // before any global memory access (launch.cuh)
  const int64_t row = blockIdx.x;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    out[row * cols + j] = from_float<T>(to_float(out[row * cols + j]) + to_float(bias[j]));
  }
}

template <class T>
__global__ void fill_dummy_kernel(T* out, int64_t n, uint64_t key, float scale, float offset) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = from_float<T>(__fadd_rn(dummy_value(key, i, scale), offset));
  }
}

}  // namespace

void silu_and_mul(element_type t, const void* gate_up, int64_t rows, int64_t d, void* out,
                  cudaStream_t stream) {
  if (rows == 0) return;
  by_element_type(t, [&](auto tag) {
    using T = decltype(tag);
    constexpr int width = vec16<T>::size;
    if (d % width == 0 && rows <= 65535) {
      const int64_t vecs = d / width;
      const dim3 grid(static_cast<unsigned>((vecs + 127) / 128), static_cast<unsigned>(rows));
      launch_pdl(silu_and_mul_vec_kernel<T>, grid, 128, 0, stream,
                 static_cast<const T*>(gate_up), d, static_cast<T*>(out));
      return;
    }
    launch_pdl(silu_and_mul_kernel<T>, static_cast<unsigned>(rows), 256, 0, stream,
        static_cast<const T*>(gate_up), d, static_cast<T*>(out));
  });
  TROUPE_CUDA_CHECK_LAUNCH();
}

void add_sigmoid_gated(element_type t, const void* x, const void* gate, int64_t gate_stride,
                       int64_t rows, int64_t cols, void* out, cudaStream_t stream) {
  if (rows == 0) return;
  by_element_type(t, [&](auto tag) {
    using T = decltype(tag);
    launch_pdl(add_sigmoid_gated_kernel<T>, static_cast<unsigned>(rows), 256, 0, stream,
               static_cast<const T*>(x), static_cast<const T*>(gate), gate_stride, cols,
               static_cast<T*>(out));
  });
  TROUPE_CUDA_CHECK_LAUNCH();
}

void embedding(element_type t, const int32_t* ids, int64_t num_tokens, const void* table,
               int64_t first_row, int64_t rows, int64_t cols, void* out, cudaStream_t stream) {
  if (num_tokens == 0) return;
  by_element_type(t, [&](auto tag) {
    using T = decltype(tag);
    constexpr int width = vec16<T>::size;
    if (cols % width == 0 && num_tokens <= 65535) {
      const int64_t vecs = cols / width;
      const dim3 grid(static_cast<unsigned>((vecs + 127) / 128), static_cast<unsigned>(num_tokens));
      launch_pdl(embedding_vec_kernel<T>, grid, 128, 0, stream, ids,
                 static_cast<const T*>(table), first_row, rows, cols, static_cast<T*>(out));
      return;
    }
    launch_pdl(embedding_kernel<T>, static_cast<unsigned>(num_tokens), 256, 0, stream,
        ids, static_cast<const T*>(table), first_row, rows, cols, static_cast<T*>(out));
  });
  TROUPE_CUDA_CHECK_LAUNCH();
}

void add_bias(element_type t, void* out, const void* bias, int64_t rows, int64_t cols,
              cudaStream_t stream) {
  if (rows == 0) return;
  by_element_type(t, [&](auto tag) {
    using T = decltype(tag);
    launch_pdl(add_bias_kernel<T>, static_cast<unsigned>(rows), 256, 0, stream,
        static_cast<T*>(out), static_cast<const T*>(bias), cols);
  });
  TROUPE_CUDA_CHECK_LAUNCH();
}

void fill_dummy(element_type t, void* out, int64_t n, uint64_t key, float scale, float offset,
                cudaStream_t stream) {
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65536);
  by_element_type(t, [&](auto tag) {
    using T = decltype(tag);
    fill_dummy_kernel<T><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
        static_cast<T*>(out), n, key, scale, offset);
  });
  TROUPE_CUDA_CHECK_LAUNCH();
}

}  // namespace troupe::cuda
