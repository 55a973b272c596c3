// The CUDA LoRA, MoE and FP8 tests' fixture (cuda_lora_test,
// cuda_lora_products_test, cuda_moe_test, cuda_fp8_test): a cuda_ops for up to max_tokens
// tokens, random tensors whose host copies hold the values as the device
// does, int arrays uploaded. Skips where no CUDA device is visible (the
// build machines). And lora_delta_for (cuda_qgemm_test, cuda_fp8_test:
// LoRA over packed weights).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_info.h"

namespace troupe {

class cuda_lora_fixture : public ::testing::Test {
 protected:
  cuda_lora_fixture(int64_t max_tokens, uint32_t seed) : max_tokens_(max_tokens), rng_(seed) {}
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ops_ = std::make_unique<cuda_ops>(0, max_tokens_);
  }
  // Uniform in [-scale, scale], rounded to `type`; host gets the values.
  tensor random_tensor(dtype type, int64_t rows, int64_t cols, float scale, std::vector<float>& host) {
    std::uniform_real_distribution<float> d(-scale, scale);
    host.resize(static_cast<size_t>(rows * cols));
    for (float& v : host) v = d(rng_);
    tensor t = ops_->alloc(type, rows, cols);
    ops_->upload(host.data(), t);
    ops_->download(t, host.data());  // as the device holds them
    return t;
  }
  int32_t* ints(const std::vector<int32_t>& v) {
    int32_t* p = ops_->alloc_ints(static_cast<int64_t>(v.size()));
    ops_->upload_ints(v.data(), p, static_cast<int64_t>(v.size()));
    return p;
  }

  int64_t max_tokens_;
  std::unique_ptr<cuda_ops> ops_;
  std::mt19937 rng_;
};

// A lora_delta of one single-slot stack for tokens whose slots are
// `slots` (0, or -1: none): the batch sorted and uploaded, its scratch.
inline lora_delta lora_delta_for(cuda_ops& ops, const lora_stack& stack, const std::vector<int32_t>& slots) {
  std::vector<int32_t> sorted, starts;
  sort_tokens_by_slot(slots, 1, sorted, starts);
  auto ints = [&](const std::vector<int32_t>& v) {
    int32_t* p = ops.alloc_ints(static_cast<int64_t>(v.size()));
    ops.upload_ints(v.data(), p, static_cast<int64_t>(v.size()));
    return p;
  };
  lora_delta delta;
  delta.stacks = &stack;
  delta.count = 1;
  delta.batch = {ints(slots), ints(sorted), ints(starts)};
  delta.scratch = ops.alloc(dtype::f32, static_cast<int64_t>(slots.size()), ops.lora_scratch_cols(1, 1, stack.rank));
  return delta;
}

}  // namespace troupe
