// build_info: what this build of troupe is and what it finds on the
// machine (`troupe version`, `troupe collect-env`): the commit, the
// backends compiled in, and for CUDA the runtime's version, the driver's
// and the visible devices, and NCCL's version.
#pragma once

#include <string>
#include <vector>

namespace troupe {

// The git commit the build was configured at ("unknown" outside a checkout).
std::string build_commit();

// One line a backend: "cpu: float32 reference (OpenBLAS ..., OpenMP N
// threads)", "cuda: runtime 13.0, driver 12.8; 1 device: NVIDIA H100 ...
// (device 0)" or "cuda: not in this build", "nccl: 2.28.3".
std::vector<std::string> backend_lines();

}  // namespace troupe
