// Launchers of the split-KV decode kernels: the SIMT kernel (decode.cuh), one
// instantiation per element type, row layout and heads-per-block bucket, and
// the tensor-core kernel (decode_mma.cuh) for 16-bit types.
#include <algorithm>

#include "common/check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/attention/attention_params.h"
#include "kernels/cuda/attention/decode.cuh"
#include "kernels/cuda/attention/decode_mma.cuh"
#include "kernels/cuda/cuda_check.h"

namespace troupe::cuda::attention {

namespace {

template <class T, int DMAX, int VEC, int GB>
struct decode_simt_variant {
  static void launch(const params& p, int num_kv_heads, int num_seqs, cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>(p.num_splits),
                    static_cast<unsigned>(num_kv_heads * p.head_chunks),
                    static_cast<unsigned>(num_seqs));
    launch_pdl(decode_kernel<T, DMAX, VEC, GB>, grid, decode_threads, 0, stream, p);
    TROUPE_CUDA_CHECK_LAUNCH();
  }
  static int blocks_per_sm() {
    static const int blocks = [] {
      int n = 0;
      TROUPE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &n, decode_kernel<T, DMAX, VEC, GB>, decode_threads, 0));
      return std::max(n, 1);
    }();
    return blocks;
  }
};

template <class T, int DMAX, int ROWS>
struct decode_mma_variant {
  static void launch(const params& p, int num_kv_heads, int num_seqs, cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>(p.num_splits),
                    static_cast<unsigned>(num_kv_heads * p.head_chunks),
                    static_cast<unsigned>(num_seqs));
    launch_pdl(decode_mma_kernel<T, DMAX, ROWS>, grid, decode_threads, 0, stream, p);
    TROUPE_CUDA_CHECK_LAUNCH();
  }
  static int blocks_per_sm() {
    static const int blocks = [] {
      int n = 0;
      TROUPE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &n, decode_mma_kernel<T, DMAX, ROWS>, decode_threads, 0));
      return std::max(n, 1);
    }();
    return blocks;
  }
};

template <class T, int DMAX, class F>
void visit_mma_rows(int heads_per_block, F&& f) {
  if (heads_per_block <= 8) {
    f(decode_mma_variant<T, DMAX, 8>{});
  } else {
    f(decode_mma_variant<T, DMAX, 16>{});
  }
}

// Tensor cores: 16-bit types, 16-byte rows of up to 128 elements.
template <class T, class F>
void visit_mma(row_layout layout, int heads_per_block, F&& f) {
  if (layout == row_layout::vec16_d64) {
    visit_mma_rows<T, 64>(heads_per_block, f);
  } else {
    visit_mma_rows<T, 128>(heads_per_block, f);
  }
}

template <class T, int DMAX, int VEC, class F>
void visit_heads(int heads_per_block, F&& f) {
  switch (heads_per_block) {
    case 1: f(decode_simt_variant<T, DMAX, VEC, 1>{}); break;
    case 2: f(decode_simt_variant<T, DMAX, VEC, 2>{}); break;
    case 4: f(decode_simt_variant<T, DMAX, VEC, 4>{}); break;
    default: f(decode_simt_variant<T, DMAX, VEC, 8>{}); break;
  }
}

// SIMT: float32 in every layout; 16-bit types only where tensor cores do not
// serve (16-byte rows past 128 elements, or no 16-byte rows).
template <class T, class F>
void visit_layout(row_layout layout, int heads_per_block, F&& f) {
  constexpr int vec16 = 16 / static_cast<int>(sizeof(T));
  switch (layout) {
    case row_layout::vec16_d64:
    case row_layout::vec16_d128:
      if constexpr (sizeof(T) == 4) {
        if (layout == row_layout::vec16_d64) {
          visit_heads<T, 64, vec16>(heads_per_block, f);
        } else {
          visit_heads<T, 128, vec16>(heads_per_block, f);
        }
      } else {
        TROUPE_CHECK_MSG(false, "16-bit decode with 16-byte rows up to 128 runs on tensor cores");
      }
      break;
    case row_layout::vec16_d256: visit_heads<T, 256, vec16>(heads_per_block, f); break;
    case row_layout::pairs_d256: visit_heads<T, 256, 2>(heads_per_block, f); break;
  }
}

template <class F>
void visit(const decode_variant& v, F&& f) {
  if (v.tensor_cores) {
    if (v.type == element_type::bf16) {
      visit_mma<__nv_bfloat16>(v.layout, v.heads_per_block, f);
    } else {
      visit_mma<__half>(v.layout, v.heads_per_block, f);
    }
    return;
  }
  switch (v.type) {
    case element_type::f32: visit_layout<float>(v.layout, v.heads_per_block, f); break;
    case element_type::bf16: visit_layout<__nv_bfloat16>(v.layout, v.heads_per_block, f); break;
    case element_type::f16: visit_layout<__half>(v.layout, v.heads_per_block, f); break;
  }
}

}  // namespace

void launch_decode(const decode_variant& v, const params& p, int num_kv_heads, int num_seqs,
                   cudaStream_t stream) {
  visit(v, [&](auto variant) { decltype(variant)::launch(p, num_kv_heads, num_seqs, stream); });
}

int decode_blocks_per_sm(const decode_variant& v) {
  int blocks = 1;
  visit(v, [&](auto variant) { blocks = decltype(variant)::blocks_per_sm(); });
  return blocks;
}

}  // namespace troupe::cuda::attention
