// On/off switches from the environment (comparisons, debugging), shared by
// the kernels' launchers (launch.cuh) and cuda_ops.
#pragma once

#include <cstdlib>
#include <cstring>

namespace troupe::cuda {

// On unless the variable is set to 0, off or false.
inline bool env_switch(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ||
         (std::strcmp(v, "0") != 0 && std::strcmp(v, "off") != 0 && std::strcmp(v, "false") != 0);
}

}  // namespace troupe::cuda
