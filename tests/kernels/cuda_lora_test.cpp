// cuda_ops::lora_add (kernels/cuda/lora/lora.cu: shrink, then expand)
// against a double-precision reference on the same rounded inputs: float32,
// bf16 and f16; 1 to 300 tokens (one token a tile, and tiles of 8 from 64
// tokens on, a partial last tile included), ranks 1 to 512, widths that
// are no multiple of a vector or a warp, the 16-byte and the scalar paths
// (an x that is not 16-byte aligned, in and rank not multiples of the
// vector width), col0 > 0 inside a wider out, 1-4 slots with tokens of
// mixed slots and of runs of one slot, and slot -1 tokens, whose out rows,
// like the columns outside [col0, col0 + out_cols) and the rows past the
// tokens, must keep their bits. And a CUDA graph: a replay after new
// token_slots contents computes the new assignment. Skipped where no CUDA
// device is visible (the build machines); run on the GPU host.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_info.h"

namespace troupe {
namespace {

struct shape {
  int64_t n, in, rank, out_cols, slots, col0, out_width;
  int64_t extra_out_rows = 0;  // out rows past the tokens (left alone)
  int64_t extra_scratch_cols = 0;  // scratch wider than rank (its row stride)
  int64_t x_offset = 0;  // x starts this many elements into its buffer (alignment)
};

std::string describe(dtype type, const shape& s) {
  return std::string(dtype_name(type)) + " n=" + std::to_string(s.n) + " in=" +
         std::to_string(s.in) + " rank=" + std::to_string(s.rank) + " out_cols=" +
         std::to_string(s.out_cols) + " slots=" + std::to_string(s.slots) + " col0=" +
         std::to_string(s.col0) + " width=" + std::to_string(s.out_width) + " x_offset=" +
         std::to_string(s.x_offset);
}

// One lora_add problem on the device, with its rounded inputs on the host.
struct problem {
  shape s;
  dtype type = dtype::f32;
  tensor x, out, scratch;
  lora_stack w;
  int32_t* token_slots = nullptr;
  std::vector<float> x_host, a_host, b_host, out_before;  // as rounded to `type`
  std::vector<int32_t> slots_host;
};

class cuda_lora : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ops_ = std::make_unique<cuda_ops>(0, 512);
  }

  // A tensor of random values in [-scale, scale]; host gets them as the
  // device holds them (rounded to the type).
  tensor random_tensor(dtype type, int64_t rows, int64_t cols, float scale, std::mt19937& rng,
                       std::vector<float>& host) {
    std::uniform_real_distribution<float> d(-scale, scale);
    host.resize(static_cast<size_t>(rows * cols));
    for (float& v : host) v = d(rng);
    tensor t = ops_->alloc(type, rows, cols);
    ops_->upload(host.data(), t);
    ops_->download(t, host.data());
    return t;
  }

  // Token slots: the first half in runs of one slot (as a prefill's tokens
  // are), the rest drawn at random; -1 among them. Token 0 has slot 0,
  // the last (from 2 tokens on) slot -1.
  static std::vector<int32_t> draw_slots(int64_t n, int64_t slots, std::mt19937& rng) {
    std::uniform_int_distribution<int32_t> d(-1, static_cast<int32_t>(slots - 1));
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      v[t] = t < n / 2 ? static_cast<int32_t>((t / 11) % (slots + 1)) - 1 : d(rng);
    }
    if (n > 0) v[0] = 0;
    if (n > 1) v[n - 1] = -1;
    return v;
  }

  problem make(dtype type, const shape& s, uint32_t seed) {
    std::mt19937 rng(seed);
    problem p;
    p.s = s;
    p.type = type;
    // x inside a larger buffer when x_offset > 0 (then not 16-byte aligned).
    std::vector<float> x_buffer;
    const tensor x_all = random_tensor(type, 1, s.n * s.in + s.x_offset, 1.0f, rng, x_buffer);
    p.x = tensor{static_cast<char*>(x_all.data) + s.x_offset * dtype_size(type), type, s.n, s.in};
    p.x_host.assign(x_buffer.begin() + s.x_offset, x_buffer.end());
    p.w.slots = s.slots;
    p.w.rank = s.rank;
    p.w.a = random_tensor(type, s.slots * s.rank, s.in, 0.05f, rng, p.a_host);
    p.w.b = random_tensor(type, s.slots * s.out_cols, s.rank, 0.1f, rng, p.b_host);
    p.out = random_tensor(type, s.n + s.extra_out_rows, s.out_width, 1.0f, rng, p.out_before);
    p.scratch = ops_->alloc(dtype::f32, s.n, s.rank + s.extra_scratch_cols);
    p.token_slots = ops_->alloc_ints(s.n);
    set_slots(p, draw_slots(s.n, s.slots, rng));
    return p;
  }

  void set_slots(problem& p, const std::vector<int32_t>& slots) {
    p.slots_host = slots;
    ops_->upload_ints(p.slots_host.data(), p.token_slots, p.s.n);
    ops_->synchronize();
  }

  // out back to its values before lora_add (the stream idle first: upload
  // copies outside it).
  void restore_out(problem& p) {
    ops_->synchronize();
    ops_->upload(p.out_before.data(), p.out);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }

  void run(problem& p) {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the uploads are done
    ops_->lora_add(p.x, p.w, p.token_slots, p.scratch, p.out, p.s.col0);
  }

  // out against the reference for the current slots; everything lora_add
  // must not touch keeps its bits.
  void check(const problem& p, const std::string& what) {
    const shape& s = p.s;
    std::vector<float> got(static_cast<size_t>(p.out.numel()));
    ops_->synchronize();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    ops_->download(p.out, got.data());
    const double round = p.type == dtype::f32    ? 0.0
                         : p.type == dtype::bf16 ? 1.0 / 256
                                                 : 1.0 / 2048;
    std::vector<double> u(static_cast<size_t>(s.rank)), u_scale(u.size());
    for (int64_t t = 0; t < p.out.rows; ++t) {
      const int32_t slot = t < s.n ? p.slots_host[t] : -1;
      if (slot >= 0) {
        for (int64_t r = 0; r < s.rank; ++r) {
          const float* a = &p.a_host[(slot * s.rank + r) * s.in];
          const float* x = &p.x_host[t * s.in];
          double sum = 0, abs_sum = 0;
          for (int64_t k = 0; k < s.in; ++k) {
            sum += double(a[k]) * x[k];
            abs_sum += std::fabs(double(a[k]) * x[k]);
          }
          u[r] = sum;
          u_scale[r] = abs_sum;
        }
      }
      for (int64_t c = 0; c < s.out_width; ++c) {
        const size_t i = static_cast<size_t>(t * s.out_width + c);
        const bool inside = slot >= 0 && c >= s.col0 && c < s.col0 + s.out_cols;
        if (!inside) {
          uint32_t want_bits, got_bits;
          std::memcpy(&want_bits, &p.out_before[i], 4);
          std::memcpy(&got_bits, &got[i], 4);
          ASSERT_EQ(got_bits, want_bits) << what << ": row " << t << " (slot " << slot
                                         << ") column " << c << " changed";
          continue;
        }
        const float* b = &p.b_host[(slot * s.out_cols + (c - s.col0)) * s.rank];
        double want = p.out_before[i], scale = std::fabs(p.out_before[i]);
        for (int64_t r = 0; r < s.rank; ++r) {
          want += double(b[r]) * u[r];
          scale += std::fabs(double(b[r])) * u_scale[r];
        }
        // The result's one rounding to the type, plus float32 sums in
        // another order than the reference's.
        ASSERT_NEAR(got[i], want, round * std::fabs(want) + 1e-5 * scale + 1e-7)
            << what << ": row " << t << " (slot " << slot << ") column " << c;
      }
    }
  }

  void expect_unchanged(const problem& p, const std::string& what) {
    std::vector<float> got(static_cast<size_t>(p.out.numel()));
    ops_->download(p.out, got.data());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    EXPECT_EQ(std::memcmp(got.data(), p.out_before.data(), got.size() * sizeof(float)), 0)
        << what;
  }

  std::unique_ptr<cuda_ops> ops_;
};

TEST_F(cuda_lora, matches_the_reference) {
  const std::vector<shape> shapes = {
      {1, 128, 8, 100, 1, 0, 100},
      {3, 4096, 16, 200, 2, 37, 300, 2, 3},
      {37, 128, 1, 45, 3, 5, 60},
      {37, 4096, 64, 1000, 4, 24, 1100, 1},
      {67, 130, 12, 50, 2, 1, 60},     // in and (bf16/f16) rank off the vector width: scalar
      {40, 128, 8, 64, 2, 0, 64, 0, 0, 1},   // x not 16-byte aligned: scalar shrink
      {70, 128, 16, 64, 3, 8, 80, 0, 0, 1},  // the same with tiles of 8 tokens
      {5, 256, 512, 64, 2, 0, 64},
      {300, 128, 8, 333, 4, 100, 500, 0, 5},
      {300, 4096, 16, 77, 3, 3, 90, 3},
      {300, 4096, 64, 1000, 4, 24, 1100},
  };
  uint32_t seed = 1;
  for (dtype type : {dtype::f32, dtype::bf16, dtype::f16}) {
    for (const shape& s : shapes) {
      const std::string what = describe(type, s);
      SCOPED_TRACE(what);
      problem p = make(type, s, seed++);
      run(p);
      check(p, what);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(cuda_lora, every_token_without_adapter_changes_nothing) {
  for (dtype type : {dtype::f32, dtype::bf16}) {
    for (int64_t n : {1, 37, 300}) {
      const shape s{n, 256, 16, 96, 2, 16, 128};
      const std::string what = describe(type, s) + " all slots -1";
      problem p = make(type, s, 100 + static_cast<uint32_t>(n));
      set_slots(p, std::vector<int32_t>(static_cast<size_t>(n), -1));
      run(p);
      check(p, what);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(cuda_lora, no_tokens_is_a_no_op) {
  problem p = make(dtype::bf16, shape{4, 64, 8, 32, 2, 0, 32}, 7);
  const tensor none{p.x.data, p.x.type, 0, p.x.cols};
  ops_->lora_add(none, p.w, p.token_slots, p.scratch, p.out, 0);
  expect_unchanged(p, "no tokens");
}

TEST_F(cuda_lora, graph_replay_reads_the_current_token_slots) {
  for (int64_t n : {5, 100}) {
    const shape s{n, 512, 16, 96, 3, 32, 160, 1};
    const std::string what = describe(dtype::bf16, s);
    SCOPED_TRACE(what);
    problem p = make(dtype::bf16, s, 200 + static_cast<uint32_t>(n));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE(ops_->supports_graphs());
    ops_->begin_capture();
    ops_->lora_add(p.x, p.w, p.token_slots, p.scratch, p.out, s.col0);
    ops_->end_capture(n);
    expect_unchanged(p, what + ", captured, not run");  // capture runs nothing
    ops_->launch_graph(n);
    check(p, what + ", first replay");
    // New slots: every token's moved on by one (-1 -> 0, the last -> -1).
    std::vector<int32_t> moved = p.slots_host;
    for (int32_t& v : moved) v = v + 1 >= s.slots ? -1 : v + 1;
    restore_out(p);
    set_slots(p, moved);
    ops_->launch_graph(n);
    check(p, what + ", replay with new slots");
    restore_out(p);
    set_slots(p, std::vector<int32_t>(static_cast<size_t>(n), -1));
    ops_->launch_graph(n);
    check(p, what + ", replay with no adapters");
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace troupe
