// RoPE frequencies for the scaling rules troupe supports (default, linear,
// llama3), computed as transformers computes them (float32 inverse
// frequencies, float32 angle = position * inv_freq) so cos/sin tables match
// the reference bit for bit where the math allows.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace troupe {

// head_dim / 2 inverse frequencies after scaling.
std::vector<float> rope_inv_freq(const rope_config& rope, int64_t head_dim);

// cos and sin tables, [max_position, head_dim / 2] each, row-major.
void rope_cos_sin(const rope_config& rope, int64_t head_dim, int64_t max_position,
                  std::vector<float>& cos_out, std::vector<float>& sin_out);

}  // namespace troupe
