#include "actors/build_info.h"

#include "kernels/cpu/cpu_ops.h"

#ifdef TROUPE_HAVE_CUDA
#include <cuda_runtime.h>
#include <nccl.h>

#include "kernels/cuda/device_info.h"
#endif

#ifndef TROUPE_BUILD_COMMIT
#define TROUPE_BUILD_COMMIT "unknown"
#endif

namespace troupe {

namespace {

#ifdef TROUPE_HAVE_CUDA
// 12080 -> "12.8".
std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
#endif

}  // namespace

std::string build_commit() { return TROUPE_BUILD_COMMIT; }

std::vector<std::string> backend_lines() {
  std::vector<std::string> lines;
  lines.push_back("cpu: float32 reference (" + cpu_backend_description() + ")");
#ifdef TROUPE_HAVE_CUDA
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  const int devices = cuda::device_count();
  std::string cuda_line = "cuda: runtime " + cuda_version_text(runtime) + " (built with " +
                          cuda_version_text(CUDART_VERSION) + "), driver " +
                          (driver > 0 ? "supports " + cuda_version_text(driver) : "not found") +
                          "; " + std::to_string(devices) + " device(s) visible";
  for (int d = 0; d < devices; ++d) {
    cuda_line += (d == 0 ? ": " : "; ") + std::string("[") + std::to_string(d) + "] " +
                 cuda::describe_device(d);
  }
  lines.push_back(cuda_line);
  int nccl = 0;
  ncclGetVersion(&nccl);
  lines.push_back("nccl: " + std::to_string(nccl / 10000) + "." + std::to_string((nccl / 100) % 100) +
                  "." + std::to_string(nccl % 100) + " (NCCL_NVLS_ENABLE=0 unless set)");
#else
  lines.push_back("cuda: not in this build (no nvcc when it was configured)");
#endif
  return lines;
}

}  // namespace troupe
