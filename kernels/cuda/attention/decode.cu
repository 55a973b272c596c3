// The split-KV decode kernels' entry points: caches of the compute type
// here, FP8 caches in decode_fp8.cu (launchers: decode_launch.cuh).
#include "kernels/cuda/attention/decode_launch.cuh"

namespace troupe::cuda::attention {

void launch_decode(const decode_variant& v, const params& p, int num_kv_heads, int num_seqs,
                   cudaStream_t stream) {
  if (v.fp8_cache) return launch_decode_fp8(v, p, num_kv_heads, num_seqs, stream);
  visit<false>(v, [&](auto variant) { decltype(variant)::launch(p, num_kv_heads, num_seqs, stream); });
}

int decode_blocks_per_sm(const decode_variant& v) {
  if (v.fp8_cache) return decode_fp8_blocks_per_sm(v);
  int blocks = 1;
  visit<false>(v, [&](auto variant) { blocks = decltype(variant)::blocks_per_sm(); });
  return blocks;
}

}  // namespace troupe::cuda::attention
