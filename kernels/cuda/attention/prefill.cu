// Launchers of the tiled prefill kernel (prefill.cuh): one instantiation per
// element type and head_dim bucket (64, 128, 256).
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/attention/attention_params.h"
#include "kernels/cuda/attention/prefill.cuh"
#include "kernels/cuda/cuda_check.h"

namespace troupe::cuda::attention {

namespace {

template <class T, int DMAX>
void launch(const params& p, bool vec16, int max_query_len, int num_seqs, cudaStream_t stream) {
  const size_t smem = prefill_smem_bytes<T>(p.head_dim);
  // Set on every launch (cheap, host-only, allowed during stream capture):
  // the attribute is per device, and each tensor-parallel worker has its own.
  if (smem > 48 * 1024) {
    TROUPE_CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<T, DMAX>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
  }
  const dim3 grid(static_cast<unsigned>(ceil_div(max_query_len, prefill_rows)),
                  static_cast<unsigned>(p.num_heads), static_cast<unsigned>(num_seqs));
  launch_pdl(prefill_kernel<T, DMAX>, grid, prefill_threads, smem, stream, p, vec16);
  TROUPE_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_bucket(int head_dim_bucket, const params& p, bool vec16, int max_query_len,
                   int num_seqs, cudaStream_t stream) {
  switch (head_dim_bucket) {
    case 64: launch<T, 64>(p, vec16, max_query_len, num_seqs, stream); break;
    case 128: launch<T, 128>(p, vec16, max_query_len, num_seqs, stream); break;
    default: launch<T, 256>(p, vec16, max_query_len, num_seqs, stream); break;
  }
}

}  // namespace

void launch_prefill(element_type t, int head_dim_bucket, bool vec16, const params& p,
                    int max_query_len, int num_seqs, cudaStream_t stream) {
  switch (t) {
    case element_type::f32:
      launch_bucket<float>(head_dim_bucket, p, vec16, max_query_len, num_seqs, stream);
      break;
    case element_type::bf16:
      launch_bucket<__nv_bfloat16>(head_dim_bucket, p, vec16, max_query_len, num_seqs, stream);
      break;
    case element_type::f16:
      launch_bucket<__half>(head_dim_bucket, p, vec16, max_query_len, num_seqs, stream);
      break;
  }
}

}  // namespace troupe::cuda::attention
