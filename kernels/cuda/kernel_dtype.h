// The element types the CUDA kernels are instantiated for (host side).
#pragma once

namespace troupe::cuda {

enum class element_type { f32, bf16, f16 };

}  // namespace troupe::cuda
