#include "kernels/cuda/device_info.h"

#include <cuda_runtime.h>

#include <cstdio>

namespace troupe::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

std::string describe_device(int index) {
  cudaDeviceProp prop{};
  const cudaError_t rc = cudaGetDeviceProperties(&prop, index);
  if (rc != cudaSuccess) return std::string("cuda error: ") + cudaGetErrorString(rc);
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s, sm_%d%d, %.1f GiB", prop.name, prop.major, prop.minor,
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

bool memory_info(int64_t& free_bytes, int64_t& total_bytes) {
  size_t f = 0, t = 0;
  if (cudaMemGetInfo(&f, &t) != cudaSuccess) return false;
  free_bytes = static_cast<int64_t>(f);
  total_bytes = static_cast<int64_t>(t);
  return true;
}

}  // namespace troupe::cuda
