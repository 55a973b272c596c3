// Kernel launches with programmatic dependent launch (PDL, Hopper): a
// kernel launched through launch_pdl() may be scheduled while the kernel
// before it on the stream is still finishing, and waits on the device
// (pdl_begin()) until that kernel has completed and its writes are
// visible. That hides the launch gap between the many small kernels of a
// decode step (about 320 a step for a 32-layer model), in CUDA graphs too.
//
// Every kernel launched with launch_pdl() must call pdl_begin() before it
// writes any global memory or reads memory that a kernel may have written:
// then it is exactly as ordered as a plain launch. Before it, a kernel may
// only read what no kernel writes between uploads, such as the step's
// host-uploaded metadata (the decode attention reads its sequence lengths
// and first block-table entries there; an upload is a copy, not a kernel,
// and the stream orders it fully), the weights (the decode products
// request their first weight rows there, the norms their weights,
// qkv_rope_cache its positions, slots, cos/sin and q/k norm weights) and
// K/V cache rows of earlier steps (the decode attention requests its first
// keys there).
// pdl_begin() also lets the next kernel be scheduled once all of this
// kernel's blocks have passed their wait. On a kernel launched without the
// attribute, both instructions do nothing.
// TROUPE_PDL=0 (or off, false) launches everything plainly (comparisons).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/env_switch.h"

namespace troupe::cuda {

__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
#elif defined(__CUDA_ARCH__)
#error "launch_pdl sets the PDL attribute: kernels need sm_90+ to wait for their predecessor"
#endif
}

// griddepcontrol.launch_dependents alone: called before pdl_begin(), the
// next kernel may be scheduled (and run up to its own wait, which still
// waits for this kernel's completion) while this one is still waiting for
// the kernel ahead: for a short kernel whose successor's prologue (its
// weights requested before its wait) should overlap it, as the LoRA shrink
// before the decode GEMV that adds the deltas (kernels/cuda/lora/sgmv.cu).
// Such a kernel must still have every block call pdl_begin() before it
// exits (early exits too): its completion is then the kernel ahead's too,
// which is what its successor's wait relies on. Its successor's part
// before the wait may run beside the kernel two back, so it too may read
// only what no kernel writes (as above).
__device__ __forceinline__ void pdl_schedule_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

inline bool pdl_enabled() {
  static const bool on = env_switch("TROUPE_PDL");
  return on;
}

// TROUPE_PRELOAD=0 (or off, false): the decode products and the decode
// attention request nothing before their PDL wait (comparisons; by default
// they request what no kernel of the step writes: weights, older K/V rows).
inline bool preload_enabled() {
  static const bool on = env_switch("TROUPE_PRELOAD");
  return on;
}

// Blocks of `threads` for a grid-stride loop over n items: one an item's
// worth, at most 65535 x 8 (the loop takes the rest), at least one.
inline unsigned grid_stride_blocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > 65535 * 8 ? 65535 * 8 : blocks);
}

template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  if (pdl_enabled() && stream != nullptr) {  // not on the legacy default stream (tests)
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
  }
  TROUPE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace troupe::cuda
