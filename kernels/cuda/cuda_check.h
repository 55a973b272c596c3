// CUDA status checks for the CUDA backend's host code. TROUPE_CUDA_CHECK is
// for invariants (a failed CUDA call inside a forward pass is a bug or a
// dead device): it logs the call, file and line and aborts.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define TROUPE_CUDA_CHECK(call)                                                         \
  do {                                                                                  \
    const cudaError_t troupe_cuda_status = (call);                                      \
    if (troupe_cuda_status != cudaSuccess) {                                            \
      std::fprintf(stderr, "troupe: CUDA error %s: %s at %s:%d\n", #call,               \
                   cudaGetErrorString(troupe_cuda_status), __FILE__, __LINE__);         \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

// After a kernel launch: the launch itself succeeded (no sync).
#define TROUPE_CUDA_CHECK_LAUNCH() TROUPE_CUDA_CHECK(cudaGetLastError())
