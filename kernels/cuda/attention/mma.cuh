// Tensor-core helpers of the attention kernels: mma.sync m16n8k16 with
// bfloat16/float16 inputs and float32 accumulators. Fragment layouts, per
// lane (g = lane / 4, t = lane % 4), as the PTX ISA gives them:
//   A (16x16, row-major): a0 = row g, k 2t..2t+1; a1 = row g+8, k 2t..2t+1;
//                         a2 = row g, k 2t+8..2t+9; a3 = row g+8, k 2t+8..2t+9
//   B (16x8, column-major): b0 = k 2t..2t+1 of column g; b1 = k 2t+8..2t+9
//   C (16x8): c0, c1 = row g, columns 2t, 2t+1; c2, c3 = row g+8, the same
// Each 32-bit register holds two elements, the lower k (or column) in the
// low half.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace troupe::cuda::attention {

// c += a * b for a 16x16 A (row-major fragment), a 16x8 B (column-major
// fragment: b0 holds k = 2t, 2t + 1 of column g, b1 the same for k + 8).
template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as a bf16/f16 pair, `lo` in the low half (the lower column).
template <class T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
           (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
  } else {
    return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |
           (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16);
  }
}

}  // namespace troupe::cuda::attention
