// Test helper: a fixture checkpoint's tensors as float32 safetensors
// entries (every tensor read through checkpoint::read_f32), each passed to
// `edit` first, which may change the values or replace the entry (the
// quantized_moe and fp8_kv_cache tests write altered copies of fixtures).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "model/weights.h"
#include "tests/model/safetensors_writer.h"

namespace troupe::safetensors_writing {

// edit(name, shape, values, out): push the entries that stand for this
// tensor into `out` and return true, or return false to keep it as float32.
using tensor_edit = std::function<bool(const std::string& name, const std::vector<int64_t>& shape,
                                       std::vector<float>& values, std::vector<raw_tensor>& out)>;

inline std::vector<raw_tensor> float32_copy(const std::string& dir, const tensor_edit& edit = {}) {
  std::vector<raw_tensor> out;
  auto ckpt = checkpoint::open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.error_message();
  if (!ckpt.ok()) return out;
  for (const std::string& name : ckpt->names()) {
    const tensor_info* info = ckpt->find(name);
    int64_t n = 1;
    for (int64_t d : info->shape) n *= d;
    std::vector<float> w(static_cast<size_t>(n));
    EXPECT_TRUE(ckpt->read_f32(name, info->shape, w.data()).ok()) << name;
    if (edit && edit(name, info->shape, w, out)) continue;
    bytes b(w.size() * sizeof(float));
    std::memcpy(b.data(), w.data(), b.size());
    out.push_back({name, "F32", info->shape, std::move(b)});
  }
  return out;
}

}  // namespace troupe::safetensors_writing
