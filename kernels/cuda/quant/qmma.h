// qgemm's tensor-core layout parts (kernels/cuda/quant/qmma.cu), for
// qgemm.cu: the dequantization of a weight in that layout.
#pragma once

#include "kernels/cuda/quant/qgemm.h"

namespace troupe::cuda {

// packed_dequantize for w.mma.
void packed_dequantize_mma(element_type t, const packed_weight_args& w, const int32_t* perm, void* out,
                           cudaStream_t stream);

}  // namespace troupe::cuda
