#include "model/rope.h"

#include <cmath>

namespace troupe {

namespace {

// transformers' _compute_llama3_parameters, in float32.
void apply_llama3_scaling(const rope_config& rope, std::vector<float>& inv_freq) {
  const float factor = static_cast<float>(rope.factor);
  const float low = static_cast<float>(rope.low_freq_factor);
  const float high = static_cast<float>(rope.high_freq_factor);
  const float old_len = static_cast<float>(rope.original_max_position_embeddings);
  const float low_freq_wavelen = old_len / low;
  const float high_freq_wavelen = old_len / high;
  for (float& f : inv_freq) {
    const float wavelen = 2.0f * static_cast<float>(M_PI) / f;
    float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) {
      const float smooth = (old_len / wavelen - low) / (high - low);
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    f = scaled;
  }
}

}  // namespace

std::vector<float> rope_inv_freq(const rope_config& rope, int64_t head_dim) {
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  const float base = static_cast<float>(rope.theta);
  for (int64_t j = 0; j < head_dim / 2; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    inv_freq[static_cast<size_t>(j)] = 1.0f / std::pow(base, exponent);
  }
  if (rope.type == rope_type::linear) {
    for (float& f : inv_freq) f /= static_cast<float>(rope.factor);
  } else if (rope.type == rope_type::llama3) {
    apply_llama3_scaling(rope, inv_freq);
  }
  return inv_freq;
}

void rope_cos_sin(const rope_config& rope, int64_t head_dim, int64_t max_position,
                  std::vector<float>& cos_out, std::vector<float>& sin_out) {
  const std::vector<float> inv_freq = rope_inv_freq(rope, head_dim);
  const int64_t half = head_dim / 2;
  cos_out.resize(static_cast<size_t>(max_position * half));
  sin_out.resize(cos_out.size());
  for (int64_t p = 0; p < max_position; ++p) {
    for (int64_t j = 0; j < half; ++j) {
      const float angle = static_cast<float>(p) * inv_freq[static_cast<size_t>(j)];
      cos_out[static_cast<size_t>(p * half + j)] = std::cos(angle);
      sin_out[static_cast<size_t>(p * half + j)] = std::sin(angle);
    }
  }
}

}  // namespace troupe
