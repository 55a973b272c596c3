// cuda_ops::lora_add (kernels/cuda/lora/sgmv.cu: shrink, then expand, by
// adapter slot; tensor cores for bf16/f16 steps of 1024 tokens or more;
// the dense cuBLAS path above 16 tokens when slots x rank <= 256)
// against the CPU reference's rule computed in double on the
// same rounded inputs: float32, bf16 and f16; 1 to 300 tokens (partial
// tiles), ranks 1 to 64 (more than one shrink group), one to three modules
// side by side from col0 > 0 in a wider out, widths and `in` that are no
// multiple of a vector (the scalar paths), 1-4 slots with tokens in runs of
// one slot and at random, and slot -1 tokens, whose rows, like the columns
// outside the modules', keep their bits. And a CUDA graph whose replay
// after new slot contents computes the new assignment. Skipped where no
// CUDA device is visible (the build machines); run on the GPU host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/kernels/cuda_lora_fixture.h"

namespace troupe {
namespace {

struct shape {
  int64_t n, in, rank, slots, col0, width;
  std::vector<int64_t> outs;  // each module's out_cols
  int64_t run = 0;  // > 0: token t in slot (t / run) % slots (else drawn)
};

class cuda_lora : public cuda_lora_fixture {
 protected:
  cuda_lora() : cuda_lora_fixture(512, 2026) {}
  std::vector<int32_t> draw_slots(int64_t n, int64_t slots) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::uniform_int_distribution<int32_t> d(-1, static_cast<int32_t>(slots) - 1);
    for (int64_t t = 0; t < n; ++t) v[t] = t < n / 2 ? static_cast<int32_t>((t / 7) % slots) : d(rng_);
    if (n > 1) v.back() = -1;
    return v;
  }

  // Runs one problem and checks it; `graph`: captured with one slot
  // assignment, replayed after another.
  void check(dtype type, const shape& s, bool graph = false) {
    const std::string what = std::string(dtype_name(type)) + " n=" + std::to_string(s.n) +
                             " in=" + std::to_string(s.in) + " rank=" + std::to_string(s.rank) +
                             " modules=" + std::to_string(s.outs.size()) + (graph ? " graph" : "");
    const int count = static_cast<int>(s.outs.size());
    std::vector<float> xh, outh;
    const tensor x = random_tensor(type, s.n, s.in, 1.0f, xh);
    const tensor out = random_tensor(type, s.n, s.width, 1.0f, outh);
    std::vector<std::vector<float>> ah(count), bh(count);
    lora_stack w[3];
    for (int m = 0; m < count; ++m) {
      w[m].a = random_tensor(type, s.slots * s.rank, s.in, 0.1f, ah[m]);
      w[m].b = random_tensor(type, s.outs[m], s.slots * s.rank, 0.1f, bh[m]);
      w[m].slots = s.slots;
      w[m].rank = s.rank;
    }
    const tensor scratch = ops_->alloc(dtype::f32, s.n, ops_->lora_scratch_cols(count, s.slots, s.rank));
    std::vector<int32_t> slots = draw_slots(s.n, s.slots), sorted, starts;
    for (int64_t t = 0; t < s.n && s.run > 0; ++t) slots[t] = static_cast<int32_t>((t / s.run) % s.slots);
    sort_tokens_by_slot(slots, static_cast<int32_t>(s.slots), sorted, starts);
    int32_t* dslots = ints(slots);
    int32_t* dsorted = ints(sorted);
    int32_t* dstarts = ints(starts);
    const lora_batch batch{dslots, dsorted, dstarts};
    if (graph) {
      ops_->begin_capture();
      ops_->lora_add(x, w, count, batch, scratch, out, s.col0);
      ops_->end_capture(1);
      slots = draw_slots(s.n, s.slots);  // another assignment, same arrays
      std::reverse(slots.begin(), slots.end());
      sort_tokens_by_slot(slots, static_cast<int32_t>(s.slots), sorted, starts);
      ops_->upload_ints(slots.data(), dslots, s.n);
      ops_->upload_ints(sorted.data(), dsorted, s.n);
      ops_->upload_ints(starts.data(), dstarts, s.slots + 1);
      ops_->launch_graph(1);
    } else {
      ops_->lora_add(x, w, count, batch, scratch, out, s.col0);
    }
    std::vector<float> got(outh.size());
    ops_->download(out, got.data());
    const double round = type == dtype::f32 ? 1e-6 : type == dtype::bf16 ? 1.0 / 128 : 1.0 / 1024;
    int failures = 0;
    for (int64_t t = 0; t < s.n && failures < 5; ++t) {
      const int32_t sl = slots[static_cast<size_t>(t)];
      std::vector<double> want(static_cast<size_t>(s.width)), mag(want.size(), 0.0);
      for (int64_t j = 0; j < s.width; ++j) want[j] = outh[t * s.width + j];
      if (sl >= 0) {
        int64_t c = s.col0;
        for (int m = 0; m < count; ++m) {
          std::vector<double> u(static_cast<size_t>(s.rank), 0.0), umag(u.size(), 0.0);
          for (int64_t r = 0; r < s.rank; ++r) {
            for (int64_t k = 0; k < s.in; ++k) {
              const double p = double(ah[m][(sl * s.rank + r) * s.in + k]) * xh[t * s.in + k];
              u[r] += p;
              umag[r] += std::fabs(p);
            }
          }
          for (int64_t j = 0; j < s.outs[m]; ++j) {
            for (int64_t r = 0; r < s.rank; ++r) {
              const double b = bh[m][j * s.slots * s.rank + sl * s.rank + r];
              want[c + j] += b * u[r];
              mag[c + j] += std::fabs(b) * umag[r];
            }
          }
          c += s.outs[m];
        }
      }
      for (int64_t j = 0; j < s.width; ++j) {
        const double g = got[t * s.width + j], wv = want[j];
        // Rounding of out, and (tensor-core and dense expands) of u to the
        // type: both relative to the sums' magnitudes.
        const bool ok = mag[j] == 0 ? g == outh[t * s.width + j]  // untouched: its bits
                                    : std::fabs(g - wv) <= round * (std::fabs(wv) + mag[j]) + 1e-6;
        if (!ok) {
          ADD_FAILURE() << what << ": token " << t << " (slot " << sl << ") column " << j << ": got "
                        << g << ", want " << wv;
          ++failures;
        }
      }
    }
  }

};

TEST_F(cuda_lora, matches_the_reference) {
  // Above 16 tokens, slots x rank <= 256 runs dense (cuBLAS), beyond it the
  // segmented kernels (SIMT, tensor cores from 1024 tokens).
  const std::vector<shape> shapes = {
      {1, 128, 8, 1, 0, 96, {96}},
      {3, 256, 16, 4, 5, 200, {64, 32, 32}},  // q, k, v side by side
      {37, 136, 4, 2, 3, 300, {130, 130}},    // dense: gate, up; widths off the warp
      {300, 512, 16, 4, 0, 512, {512}},       // dense
      {300, 512, 16, 8, 2, 300, {128, 64, 64}},  // dense, 8 slots x 16 (the 8B benchmark's)
      {1100, 264, 48, 6, 1, 300, {100, 99}},  // tensor cores: rank 48, partial tiles
      {1024, 100, 16, 17, 0, 70, {70}},       // tensor-core expand, SIMT shrink (in % 8)
      {1030, 256, 16, 4, 0, 192, {64, 64, 64}},  // dense, many tokens
      {19, 100, 64, 5, 7, 160, {150}},        // in off the vector: scalar paths
      {64, 512, 5, 4, 0, 77, {77}},           // dense, rank off the vector
      {64, 512, 5, 60, 0, 77, {77}},          // SIMT, rank off the vector
      // Every slot one token past a whole tile: the grids' tile bound is
      // met exactly (shrink tiles of 4, expand of 16; tensor cores, 64).
      {15, 256, 16, 3, 0, 128, {96, 32}, 5},
      {1105, 256, 16, 17, 0, 96, {96}, 65},
  };
  for (dtype type : {dtype::f32, dtype::bf16, dtype::f16}) {
    for (const shape& s : shapes) check(type, s);
  }
}

TEST_F(cuda_lora, graph_replay_reads_the_current_slots) {
  check(dtype::bf16, {8, 256, 16, 4, 0, 192, {64, 64, 64}}, /*graph=*/true);
  check(dtype::f32, {40, 128, 8, 3, 2, 100, {98}}, /*graph=*/true);
  check(dtype::bf16, {1030, 256, 16, 4, 0, 192, {64, 64, 64}}, /*graph=*/true);  // dense
  check(dtype::bf16, {1030, 256, 16, 20, 0, 192, {64, 64, 64}}, /*graph=*/true);  // tensor cores
  check(dtype::bf16, {100, 256, 16, 20, 0, 192, {64, 64, 64}}, /*graph=*/true);   // SIMT
}

// linear_lora: the product with the deltas; where both run as cuBLAS
// products (1030 tokens, dense LoRA) cuda writes the deltas first and
// accumulates the product onto them. Equal to linear, then lora_add, within
// the type's rounding of the two sums; with a bias.
TEST_F(cuda_lora, linear_lora_matches_linear_then_lora_add) {
  for (dtype type : {dtype::f32, dtype::bf16}) {
    for (int64_t n : {8, 40, 1030}) {
      const int64_t in = 256, slots = 4, rank = 16;
      const std::vector<int64_t> outs = {128, 32, 32};
      std::vector<float> h, bh;
      const tensor x = random_tensor(type, n, in, 1.0f, h);
      const tensor w = random_tensor(type, 192, in, 0.1f, h);
      const tensor bias = random_tensor(type, 1, 192, 0.5f, bh);
      lora_stack st[3];
      for (int m = 0; m < 3; ++m) {
        st[m].a = random_tensor(type, slots * rank, in, 0.1f, h);
        st[m].b = random_tensor(type, outs[m], slots * rank, 0.1f, h);
        st[m].slots = slots;
        st[m].rank = rank;
      }
      std::vector<int32_t> slot_of = draw_slots(n, slots), sorted, starts;
      sort_tokens_by_slot(slot_of, static_cast<int32_t>(slots), sorted, starts);
      const lora_batch batch{ints(slot_of), ints(sorted), ints(starts)};
      const tensor scratch = ops_->alloc(dtype::f32, n, ops_->lora_scratch_cols(3, slots, rank));
      const tensor fused = ops_->alloc(type, n, 192), apart = ops_->alloc(type, n, 192);
      std::vector<float> base(static_cast<size_t>(n * 192)), got(base.size()), want(base.size());
      ops_->linear(x, w, nullptr, apart);
      ops_->download(apart, base.data());  // the product alone: its magnitude
      ops_->linear(x, w, &bias, apart);
      ops_->lora_add(x, st, 3, batch, scratch, apart, 0);
      ops_->linear_lora(x, w, &bias, lora_delta{st, 3, batch, scratch}, fused);
      ops_->download(apart, want.data());
      ops_->download(fused, got.data());
      const double round = type == dtype::f32 ? 1e-5 : 1.0 / 64;
      int failures = 0;
      for (size_t i = 0; i < got.size() && failures < 5; ++i) {
        // Each side rounds the product, the bias sum and the delta sum in
        // its own order: bounded by the terms' magnitudes.
        const double b = bh[i % 192], delta = std::fabs(double(want[i]) - base[i] - b);
        if (!(std::fabs(double(got[i]) - want[i]) <=
              round * (std::fabs(base[i]) + std::fabs(b) + delta) + 1e-6)) {
          ADD_FAILURE() << dtype_name(type) << " n=" << n << " element " << i << ": got " << got[i]
                        << ", want " << want[i];
          ++failures;
        }
      }
    }
  }
}

}  // namespace
}  // namespace troupe
