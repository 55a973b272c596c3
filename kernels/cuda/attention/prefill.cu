// Launchers of the tiled prefill kernel (prefill.cuh): one instantiation per
// element type, cache type (the element type, or FP8 codes) and head_dim
// bucket (64, 128, 256).
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/attention/attention_params.h"
#include "kernels/cuda/attention/prefill.cuh"
#include "kernels/cuda/cuda_check.h"

namespace troupe::cuda::attention {

namespace {

template <class T, class C, int DMAX>
void launch(const params& p, bool vec16, int max_query_len, int num_seqs, cudaStream_t stream) {
  const size_t smem = prefill_smem_bytes<T>(p.head_dim);
  // Set on every launch (cheap, host-only, allowed during stream capture):
  // the attribute is per device, and each tensor-parallel worker has its own.
  if (smem > 48 * 1024) {
    TROUPE_CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<T, C, DMAX>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(max_query_len, prefill_rows)),
                  static_cast<unsigned>(p.num_heads), static_cast<unsigned>(num_seqs));
  launch_pdl(prefill_kernel<T, C, DMAX>, grid, prefill_threads, smem, stream, p, vec16);
  TROUPE_CUDA_CHECK_LAUNCH();
}

template <class T, class C>
void launch_bucket(int head_dim_bucket, const params& p, bool vec16, int max_query_len,
                   int num_seqs, cudaStream_t stream) {
  switch (head_dim_bucket) {
    case 64: launch<T, C, 64>(p, vec16, max_query_len, num_seqs, stream); break;
    case 128: launch<T, C, 128>(p, vec16, max_query_len, num_seqs, stream); break;
    default: launch<T, C, 256>(p, vec16, max_query_len, num_seqs, stream); break;
  }
}



}  // namespace

void launch_prefill(element_type t, bool fp8_cache, int head_dim_bucket, bool vec16,
                    const params& p, int max_query_len, int num_seqs, cudaStream_t stream) {
  by_element_type(t, [&](auto tag) {
    using T = decltype(tag);
    if (fp8_cache) {
      launch_bucket<T, uint8_t>(head_dim_bucket, p, vec16, max_query_len, num_seqs, stream);
    } else {
      launch_bucket<T, T>(head_dim_bucket, p, vec16, max_query_len, num_seqs, stream);
    }
  });
}

}  // namespace troupe::cuda::attention
