// The split-KV decode kernels over FP8 KV caches (e4m3 codes; attention.h),
// in a file of their own so that the two instantiation sets compile apart.
#include "kernels/cuda/attention/decode_launch.cuh"

namespace troupe::cuda::attention {

void launch_decode_fp8(const decode_variant& v, const params& p, int num_kv_heads, int num_seqs,
                       cudaStream_t stream) {
  visit<true>(v, [&](auto variant) { decltype(variant)::launch(p, num_kv_heads, num_seqs, stream); });
}

int decode_fp8_blocks_per_sm(const decode_variant& v) {
  int blocks = 1;
  visit<true>(v, [&](auto variant) { blocks = decltype(variant)::blocks_per_sm(); });
  return blocks;
}

}  // namespace troupe::cuda::attention
