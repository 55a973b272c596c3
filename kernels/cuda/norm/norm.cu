#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/norm/norm.h"

namespace troupe::cuda {

namespace {

constexpr int threads_per_row = 256;

// One block per row segment of `cols` elements starting at x + row * stride.
template <class T, bool add_residual>
__global__ void rms_norm_kernel(T* residual, const T* x, const T* w, float eps, int64_t cols,
                                int64_t row_stride, int64_t segment_stride, int segments,
                                T* out) {
  const int64_t row = blockIdx.x / segments;
  const int64_t seg = blockIdx.x % segments;
  const int64_t base = row * row_stride + seg * segment_stride;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = to_float(x[base + j]);
    if constexpr (add_residual) {
      v += to_float(residual[base + j]);
      residual[base + j] = from_float<T>(v);
    }
    sum += v * v;
  }
  const float inv = rsqrtf(block_sum(sum) / static_cast<float>(cols) + eps);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    // Re-read what this thread wrote (residual) or read (x): same element.
    const float v = add_residual ? to_float(residual[base + j]) : to_float(x[base + j]);
    out[base + j] = from_float<T>(v * inv * to_float(w[j]));
  }
}

template <class T, bool add_residual>
void launch(void* residual, const void* x, const void* w, float eps, int64_t rows, int64_t cols,
            int64_t row_stride, int64_t segment_stride, int segments, void* out,
            cudaStream_t stream) {
  if (rows == 0) return;
  rms_norm_kernel<T, add_residual><<<static_cast<unsigned>(rows * segments), threads_per_row, 0,
                                     stream>>>(
      static_cast<T*>(residual), static_cast<const T*>(x), static_cast<const T*>(w), eps, cols,
      row_stride, segment_stride, segments, static_cast<T*>(out));
  TROUPE_CUDA_CHECK_LAUNCH();
}

template <bool add_residual>
void dispatch(element_type t, void* residual, const void* x, const void* w, float eps,
              int64_t rows, int64_t cols, int64_t row_stride, int64_t segment_stride,
              int segments, void* out, cudaStream_t stream) {
  switch (t) {
    case element_type::f32:
      return launch<float, add_residual>(residual, x, w, eps, rows, cols, row_stride,
                                         segment_stride, segments, out, stream);
    case element_type::bf16:
      return launch<__nv_bfloat16, add_residual>(residual, x, w, eps, rows, cols, row_stride,
                                                 segment_stride, segments, out, stream);
    case element_type::f16:
      return launch<__half, add_residual>(residual, x, w, eps, rows, cols, row_stride,
                                          segment_stride, segments, out, stream);
  }
}

}  // namespace

void rms_norm(element_type t, const void* x, const void* w, float eps, int64_t rows, int64_t cols,
              void* out, cudaStream_t stream) {
  dispatch<false>(t, nullptr, x, w, eps, rows, cols, cols, 0, 1, out, stream);
}

void add_rms_norm(element_type t, void* residual, const void* x, const void* w, float eps,
                  int64_t rows, int64_t cols, void* out, cudaStream_t stream) {
  dispatch<true>(t, residual, x, w, eps, rows, cols, cols, 0, 1, out, stream);
}

void head_rms_norm(element_type t, void* x, const void* w, float eps, int64_t rows,
                   int64_t cols, int64_t head_dim, cudaStream_t stream) {
  dispatch<false>(t, nullptr, x, w, eps, rows, head_dim, cols, head_dim,
                  static_cast<int>(cols / head_dim), x, stream);
}

}  // namespace troupe::cuda
