// The first piece of the CUDA backend: probing the device. The kernels of the
// CUDA backend (attention, cache, norm, rope, activation, sampling, gemm,
// lora) land in folders beside this file; see docs/architecture.md.
#pragma once

#include <cstdint>
#include <string>

namespace troupe::cuda {

// Number of visible CUDA devices (0 when no driver or device).
int device_count();

// "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB" for device `index`, or the error.
std::string describe_device(int index);

// Free and total memory of the calling thread's current device
// (cudaMemGetInfo); false on error.
bool memory_info(int64_t& free_bytes, int64_t& total_bytes);

}  // namespace troupe::cuda
