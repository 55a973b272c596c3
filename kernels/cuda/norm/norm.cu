#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/norm/norm.h"
#include "kernels/cuda/launch.cuh"

namespace troupe::cuda {

namespace {

constexpr int threads_per_row = 256;

// One block per row segment of `cols` elements starting at x + row * stride.
template <class T, bool add_residual>
__global__ void rms_norm_kernel(T* residual, const T* x, const T* w, float eps, int64_t cols,
                                int64_t row_stride, int64_t segment_stride, int segments,
                                T* out) {
  pdl_begin();  // before any global memory access (launch.cuh)
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

// The fast path: every thread holds up to max_vecs 16-byte vectors of its
// row segment in registers (one read of x and residual, one write of each),
// threads = the segment's vectors / max_vecs rounded up to a warp. Needs
// cols and the strides to be multiples of the vector width (16 bytes).
constexpr int max_vecs = 4;

template <class T, bool add_residual>
__global__ void rms_norm_vec_kernel(T* residual, const T* x, const T* w, float eps, int64_t cols,
                                    int64_t row_stride, int64_t segment_stride, int segments,
                                    T* out) {
  constexpr int width = vec16<T>::size;
  const int64_t row = blockIdx.x / segments;
  const int64_t seg = blockIdx.x % segments;
  const int64_t base = row * row_stride + seg * segment_stride;
  const int vecs = static_cast<int>(cols / width);
  // The norm's weights are written by no kernel: requested before the wait
  // (launch.cuh), they land while the kernel ahead finishes.
  vec16<T> wv[max_vecs];
#pragma unroll
  for (int i = 0; i < max_vecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v < vecs) wv[i] = load16(w + int64_t(v) * width);
  }
  pdl_begin();  // before reading x or the residual (launch.cuh)
  vec16<T> held[max_vecs];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < max_vecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v >= vecs) break;
    held[i] = load16(x + base + int64_t(v) * width);
    if constexpr (add_residual) {
      vec16<T> r = load16(residual + base + int64_t(v) * width);
#pragma unroll
      for (int e = 0; e < width; ++e) {
        // The sum is rounded to T, as the scalar path and the CPU store it.
        r.v[e] = from_float<T>(to_float(held[i].v[e]) + to_float(r.v[e]));
      }
      store16(residual + base + int64_t(v) * width, r);
      held[i] = r;
    }
#pragma unroll
    for (int e = 0; e < width; ++e) {
      const float f = to_float(held[i].v[e]);
      sum += f * f;
    }
  }
  const float inv = rsqrtf(block_sum(sum) / static_cast<float>(cols) + eps);
#pragma unroll
  for (int i = 0; i < max_vecs; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v >= vecs) break;
    vec16<T> o;
#pragma unroll
    for (int e = 0; e < width; ++e) {
      o.v[e] = from_float<T>(to_float(held[i].v[e]) * inv * to_float(wv[i].v[e]));
    }
    store16(out + base + int64_t(v) * width, o);
  }
}

template <class T, bool add_residual>
void launch(void* residual, const void* x, const void* w, float eps, int64_t rows, int64_t cols,
            int64_t row_stride, int64_t segment_stride, int segments, void* out,
            cudaStream_t stream) {
  if (rows == 0) return;
  constexpr int width = vec16<T>::size;
  const bool aligned = cols % width == 0 && row_stride % width == 0 &&
                       segment_stride % width == 0 && cols / width <= 1024 * max_vecs;
  if (aligned) {
    const int64_t vecs = cols / width;
    int64_t threads = (vecs + max_vecs - 1) / max_vecs;
    threads = std::max<int64_t>(32, (threads + 31) / 32 * 32);
    launch_pdl(rms_norm_vec_kernel<T, add_residual>, static_cast<unsigned>(rows * segments),
               static_cast<unsigned>(threads), 0, stream, static_cast<T*>(residual),
               static_cast<const T*>(x), static_cast<const T*>(w), eps, cols, row_stride,
               segment_stride, segments, static_cast<T*>(out));
    TROUPE_CUDA_CHECK_LAUNCH();
    return;
  }
  launch_pdl(rms_norm_kernel<T, add_residual>, static_cast<unsigned>(rows * segments),
             threads_per_row, 0, stream, static_cast<T*>(residual), static_cast<const T*>(x),
             static_cast<const T*>(w), eps, cols, row_stride, segment_stride, segments,
             static_cast<T*>(out));
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
