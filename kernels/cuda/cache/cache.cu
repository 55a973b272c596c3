#include "kernels/cuda/cache/cache.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/element.cuh"
#include "kernels/cuda/cache/kv_codes.cuh"

namespace troupe::cuda {

namespace {

size_t element_size(element_type t) { return t == element_type::f32 ? 4 : 2; }

// Rows are copied as raw bytes in 16-bit words (every element type's size
// is a multiple of 2): one kernel for all types.
__global__ void write_kv_kernel(const uint16_t* k, const uint16_t* v, const int32_t* slots,
                                int64_t row_words, uint16_t* k_cache, uint16_t* v_cache) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slots[token];
  if (slot < 0) return;
  for (int64_t j = threadIdx.x; j < row_words; j += blockDim.x) {
    k_cache[slot * row_words + j] = k[token * row_words + j];
    v_cache[slot * row_words + j] = v[token * row_words + j];
  }
}

// The FP8 cache's writer: each element to its code (kv_codes.cuh).
template <class T>
__global__ void write_kv_codes_kernel(const T* k, const T* v, const int32_t* slots, int64_t cols,
                                      kv_dest cache) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slots[token];
  if (slot < 0) return;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    store_kv(cache, false, slot * cols + j, k[token * cols + j]);
    store_kv(cache, true, slot * cols + j, v[token * cols + j]);
  }
}

__global__ void gather_tokens_kernel(int32_t* dst, const int32_t* rows, const int32_t* src_index,
                                     const int32_t* src, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) dst[rows[i]] = src[src_index[i]];
}

__global__ void gather_kernel(const uint16_t* x, const int32_t* indices, int64_t row_words,
                              uint16_t* out) {
  const int64_t row = blockIdx.x;
  const int64_t src = indices[row];
  for (int64_t j = threadIdx.x; j < row_words; j += blockDim.x) {
    out[row * row_words + j] = x[src * row_words + j];
  }
}

}  // namespace

void write_kv_cache(element_type t, const void* k, const void* v, const int32_t* slot_mapping,
                    int64_t num_tokens, int64_t kv_cols, const kv_dest& cache,
                    cudaStream_t stream) {
  if (num_tokens == 0) return;
  if (cache.fp8) {
    by_element_type(t, [&](auto tag) {
      using T = decltype(tag);
      write_kv_codes_kernel<<<static_cast<unsigned>(num_tokens), 256, 0, stream>>>(
          static_cast<const T*>(k), static_cast<const T*>(v), slot_mapping, kv_cols, cache);
    });
    TROUPE_CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t words = kv_cols * static_cast<int64_t>(element_size(t)) / 2;
  write_kv_kernel<<<static_cast<unsigned>(num_tokens), 256, 0, stream>>>(
      static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), slot_mapping, words,
      static_cast<uint16_t*>(cache.k), static_cast<uint16_t*>(cache.v));
  TROUPE_CUDA_CHECK_LAUNCH();
}

void gather_tokens(int32_t* dst, const int32_t* rows, const int32_t* src_index, const int32_t* src,
                   int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gather_tokens_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
      dst, rows, src_index, src, n);
  TROUPE_CUDA_CHECK_LAUNCH();
}

void gather_rows(element_type t, const void* x, const int32_t* indices, int64_t n, int64_t cols,
                 void* out, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t words = cols * static_cast<int64_t>(element_size(t)) / 2;
  gather_kernel<<<static_cast<unsigned>(n), 256, 0, stream>>>(
      static_cast<const uint16_t*>(x), indices, words, static_cast<uint16_t*>(out));
  TROUPE_CUDA_CHECK_LAUNCH();
}

void copy_kv_blocks(size_t element_bytes, const void* src_k, const void* src_v, void* dst_k,
                    void* dst_v, const int32_t* src_blocks, const int32_t* dst_blocks, int64_t n,
                    int64_t block_size, int64_t kv_cols, cudaStream_t stream) {
  const size_t block_bytes = static_cast<size_t>(block_size * kv_cols) * element_bytes;
  for (int64_t i = 0; i < n; ++i) {
    const size_t s = static_cast<size_t>(src_blocks[i]) * block_bytes;
    const size_t d = static_cast<size_t>(dst_blocks[i]) * block_bytes;
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst_k) + d,
                                      static_cast<const char*>(src_k) + s, block_bytes,
                                      cudaMemcpyDefault, stream));
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst_v) + d,
                                      static_cast<const char*>(src_v) + s, block_bytes,
                                      cudaMemcpyDefault, stream));
  }
}

}  // namespace troupe::cuda
