// The GPU sampler against the CPU sampler (kernels/cpu/sampler.h) on random
// logits: vocabularies of 1000, 32000 and 151936, batches of 1, 7 and 64,
// greedy, top_k, top_p, min_p, all three, and penalties with repeated output
// ids; half the rows rounded to bfloat16 so that ties (lowest id first) are
// common. Both samplers race the same Philox exponentials, so the tokens
// must agree, except where float (GPU) and double (CPU) rounding decide
// differently: two race scores within 1e-5 relative, or a token right at a
// min_p / top_p boundary. Such cases are counted and must stay rare.
// Logprobs, ranks and top-k ids must match the CPU's (1e-4 on logprobs).
// The logits processors (an allowed-token mask, biases that raise a low
// token, ban the best one or meet a penalty) are checked the same way.
// Skipped without a device; the DISABLED_bench test prints timings.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/sampler.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/sampling/sampling.h"
#include "kernels/philox.h"

namespace troupe {
namespace {

using cuda::sample_output;
using cuda::sample_params;

template <class T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(v.size(), 1) * sizeof(T)), cudaSuccess);
  if (!v.empty()) cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}

// One batch: logits, parameters, penalty ids; run on the GPU and the CPU.
struct batch {
  int64_t vocab = 0;
  std::vector<float> logits;  // [rows, vocab]
  std::vector<sample_params> params;
  std::vector<int32_t> ids;
  // Per row, the biases as the CPU sampler takes them (also packed in ids).
  std::vector<std::vector<int32_t>> bias_ids;
  std::vector<std::vector<float>> bias_values;

  sampler_row cpu_row(size_t i) const {
    const sample_params& p = params[i];
    sampler_row r;
    r.temperature = p.temperature;
    r.top_p = p.top_p;
    r.top_k = p.top_k;
    r.min_p = p.min_p;
    r.presence_penalty = p.presence_penalty;
    r.frequency_penalty = p.frequency_penalty;
    r.repetition_penalty = p.repetition_penalty;
    r.seed = p.seed;
    r.step = p.step;
    r.prompt_ids = ids.data() + p.prompt_begin;
    r.num_prompt_ids = p.num_prompt_ids;
    r.output_ids = ids.data() + p.output_begin;
    r.num_output_ids = p.num_output_ids;
    r.num_logprobs = p.num_logprobs;
    if (p.mask_begin >= 0) r.allowed_mask = reinterpret_cast<const uint32_t*>(ids.data() + p.mask_begin);
    if (i < bias_ids.size() && !bias_ids[i].empty()) {
      r.bias_ids = bias_ids[i].data();
      r.bias_values = bias_values[i].data();
      r.num_biases = static_cast<int64_t>(bias_ids[i].size());
    }
    return r;
  }
  const float* row_logits(size_t i) const {
    return logits.data() + static_cast<size_t>(params[i].logits_row) * static_cast<size_t>(vocab);
  }

  void run_gpu(std::vector<int32_t>& tokens, std::vector<sample_output>& outputs) const {
    const int64_t n = static_cast<int64_t>(params.size());
    float* d_logits = to_device(logits);
    sample_params* d_params = to_device(params);
    int32_t* d_ids = to_device(ids);
    void* scratch = nullptr;
    ASSERT_EQ(cudaMalloc(&scratch, cuda::sample_scratch_bytes(n, vocab)), cudaSuccess);
    int32_t* d_tokens = nullptr;
    sample_output* d_out = nullptr;
    ASSERT_EQ(cudaMalloc(&d_tokens, n * sizeof(int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out, n * sizeof(sample_output)), cudaSuccess);
    cudaMemset(d_tokens, 0xff, n * sizeof(int32_t));  // poison: -1 and NaNs
    cudaMemset(d_out, 0xff, n * sizeof(sample_output));
    cuda::sample(d_logits, vocab, d_params, d_ids, n, scratch, d_tokens, d_out, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    tokens.resize(static_cast<size_t>(n));
    outputs.resize(static_cast<size_t>(n));
    cudaMemcpy(tokens.data(), d_tokens, n * sizeof(int32_t), cudaMemcpyDeviceToHost);
    cudaMemcpy(outputs.data(), d_out, n * sizeof(sample_output), cudaMemcpyDeviceToHost);
    // The logits are left as they were (penalties work on the scratch copy).
    std::vector<float> after(logits.size());
    cudaMemcpy(after.data(), d_logits, after.size() * sizeof(float), cudaMemcpyDeviceToHost);
    EXPECT_EQ(std::memcmp(after.data(), logits.data(), after.size() * sizeof(float)), 0);
    for (void* p : {static_cast<void*>(d_logits), static_cast<void*>(d_params),
                    static_cast<void*>(d_ids), scratch, static_cast<void*>(d_tokens),
                    static_cast<void*>(d_out)}) {
      cudaFree(p);
    }
  }
};

// plain: temperature alone (1.0 or 0.6), the blocks-per-chunk path.
// processors: biases and masks (half greedy, half sampled; a third also
// penalized).
enum class mode { greedy, top_k, top_p, min_p, all_three, penalties, greedy_penalties, plain,
                  processors };
const char* name(mode m) {
  const char* names[] = {"greedy", "top_k", "top_p", "min_p", "all_three", "penalties",
                         "greedy_penalties", "plain", "processors"};
  return names[static_cast<int>(m)];
}

// Row r's logits processors: every other row a mask allowing a random
// third of the vocabulary (its best token not among them on every fourth
// row); biases that ban the row's best token, raise its lowest (by 30 on
// every third row, enough to make it the best; else by 8; every eighth
// row, from the sixth, bans it and allows nothing else: the fallback), and
// lower a few by small amounts; every third row also penalized, its
// output repeating the raised token.
void add_processors(batch& b, int64_t r, sample_params& p, std::mt19937& rng) {
  const int64_t vocab = b.vocab;
  const float* row = b.logits.data() + r * vocab;
  const auto best = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
  const auto low = static_cast<int32_t>(std::min_element(row, row + vocab) - row);
  p.temperature = r % 2 == 0 ? 0.0f : 0.8f;
  p.top_k = r % 4 == 1 ? 40 : 0;
  if (r % 2 == 0) {
    std::vector<uint32_t> mask(static_cast<size_t>((vocab + 31) / 32), 0u);
    for (int64_t t = 0; t < vocab; ++t) {
      if (rng() % 3 == 0 || t == low) mask[static_cast<size_t>(t / 32)] |= 1u << (t % 32);
    }
    if (r % 4 == 0) mask[static_cast<size_t>(best / 32)] &= ~(1u << (best % 32));
    if (r % 8 == 6) {  // only `low` allowed, and banned below: every token banned
      std::fill(mask.begin(), mask.end(), 0u);
      mask[static_cast<size_t>(low / 32)] |= 1u << (low % 32);
    }
    p.mask_begin = static_cast<int32_t>(b.ids.size());
    for (uint32_t w : mask) b.ids.push_back(static_cast<int32_t>(w));
  }
  std::map<int32_t, float> biases;
  biases[best] = -std::numeric_limits<float>::infinity();
  biases[low] = r % 8 == 6 ? -std::numeric_limits<float>::infinity()
                           : r % 3 == 1 ? 30.0f : 8.0f;  // the best on some rows
  for (int j = 0; j < 5; ++j) biases[static_cast<int32_t>(rng() % vocab)] = -1.5f * float(j + 1);
  biases[best] = -std::numeric_limits<float>::infinity();
  b.bias_ids.resize(static_cast<size_t>(r + 1));
  b.bias_values.resize(static_cast<size_t>(r + 1));
  p.bias_begin = static_cast<int32_t>(b.ids.size());
  p.num_biases = static_cast<int32_t>(biases.size());
  for (const auto& [id, value] : biases) {
    int32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    b.ids.push_back(id);
    b.ids.push_back(bits);
    b.bias_ids[static_cast<size_t>(r)].push_back(id);
    b.bias_values[static_cast<size_t>(r)].push_back(value);
  }
  if (r % 3 == 0) {
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.5f;
    p.output_begin = static_cast<int32_t>(b.ids.size());
    p.num_output_ids = 6;
    for (int j = 0; j < 6; ++j) b.ids.push_back(j % 2 == 0 ? low : best);
  }
}

batch make_batch(int64_t vocab, int64_t rows, mode m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  batch b;
  b.vocab = vocab;
  b.logits.resize(static_cast<size_t>(rows * vocab));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = b.logits.data() + r * vocab;
    for (int64_t i = 0; i < vocab; ++i) row[i] = normal(rng);
    if (r % 2 == 1) {  // bfloat16 values: many exact ties
      for (int64_t i = 0; i < vocab; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &row[i], 4);
        bits &= 0xffff0000u;
        std::memcpy(&row[i], &bits, 4);
      }
    }
    if (r % 3 == 0) row[vocab - 1] = *std::max_element(row, row + vocab);  // a tie at the top
  }
  for (int64_t r = 0; r < rows; ++r) {
    sample_params p;
    p.logits_row = static_cast<int32_t>(r);
    p.seed = 1000003u * static_cast<uint64_t>(r) + seed;
    p.step = static_cast<uint64_t>(r % 5) * 977u;
    p.num_logprobs = r % 4 == 0 ? -1 : r % 4 == 1 ? 0 : r % 4 == 2 ? 5 : 20;
    switch (m) {
      case mode::greedy: p.temperature = 0.0f; break;
      case mode::plain: p.temperature = r % 2 == 0 ? 1.0f : 0.6f; break;
      case mode::top_k: p.temperature = 0.7f; p.top_k = 50; break;
      case mode::top_p: p.top_p = 0.9f; break;
      case mode::min_p: p.min_p = 0.05f; break;
      case mode::all_three: p.temperature = 0.8f; p.top_k = 100; p.top_p = 0.9f; p.min_p = 0.02f; break;
      case mode::greedy_penalties: p.temperature = 0.0f; [[fallthrough]];
      case mode::penalties: {
        if (m == mode::penalties) p.temperature = 0.9f;
        p.repetition_penalty = 1.3f;
        p.frequency_penalty = 0.5f;
        p.presence_penalty = 0.4f;
        // Prompt: random ids; output: repeats of the row's best tokens, so
        // the penalties decide.
        const float* row = b.logits.data() + r * vocab;
        std::vector<int32_t> order(static_cast<size_t>(vocab));
        for (int32_t i = 0; i < vocab; ++i) order[static_cast<size_t>(i)] = i;
        const size_t top = std::min<size_t>(8, order.size());
        std::partial_sort(order.begin(), order.begin() + top, order.end(),
                          [&](int32_t a, int32_t c) { return row[a] > row[c]; });
        p.prompt_begin = static_cast<int32_t>(b.ids.size());
        p.num_prompt_ids = 40;
        for (int j = 0; j < 40; ++j) b.ids.push_back(static_cast<int32_t>(rng() % vocab));
        b.ids.push_back(order[0]);  // also in the prompt
        ++p.num_prompt_ids;
        p.output_begin = static_cast<int32_t>(b.ids.size());
        p.num_output_ids = 30;
        for (int j = 0; j < 30; ++j) b.ids.push_back(order[rng() % top]);
        break;
      }
      case mode::processors: add_processors(b, r, p, rng); break;
    }
    b.params.push_back(p);
  }
  return b;
}

// Why a GPU token may differ from the CPU's: "" when it may not.
std::string explain_mismatch(const batch& b, size_t i, int32_t gpu, int32_t cpu) {
  const sampler_row row = b.cpu_row(i);
  const sampler_candidate_set kept = sampler_candidates(b.row_logits(i), b.vocab, row);
  sampler_row unfiltered = row;
  unfiltered.top_k = 0;
  unfiltered.top_p = 1.0f;
  unfiltered.min_p = 0.0f;
  const sampler_candidate_set all = sampler_candidates(b.row_logits(i), b.vocab, unfiltered);
  auto score = [&](int32_t id) {
    const size_t pos = static_cast<size_t>(std::find(all.ids.begin(), all.ids.end(), id) - all.ids.begin());
    return sampling_race_score(all.weights[pos],
                               sampling_exponential(row.seed, row.step, static_cast<uint32_t>(id)));
  };
  auto position = [&](const std::vector<int32_t>& v, int32_t id) {
    return static_cast<size_t>(std::find(v.begin(), v.end(), id) - v.begin());
  };
  const float s_gpu = score(gpu), s_cpu = score(cpu);
  const size_t k = kept.ids.size();
  if (position(kept.ids, gpu) < k && std::fabs(s_gpu - s_cpu) <= 1e-5f * s_cpu) return "race tie";
  const bool float_boundary = row.top_p < 1.0f || row.min_p > 0.0f;
  if (float_boundary && position(all.ids, gpu) == k && s_gpu > s_cpu) return "GPU kept one more";
  if (float_boundary && position(kept.ids, cpu) == k - 1 && position(kept.ids, gpu) < k) {
    float runner_up = -1.0f;
    for (int32_t id : kept.ids) {
      if (id != cpu) runner_up = std::max(runner_up, score(id));
    }
    if (s_gpu == runner_up) return "GPU kept one fewer";
  }
  return "";
}

class cuda_sampling : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(cuda_sampling, matches_the_cpu_sampler) {
  int64_t sampled_rows = 0, explained = 0;
  for (int64_t vocab : {1000, 32000, 151936}) {
    for (int64_t rows : {1, 7, 64}) {
      for (mode m : {mode::greedy, mode::top_k, mode::top_p, mode::min_p, mode::all_three,
                     mode::penalties, mode::greedy_penalties, mode::plain, mode::processors}) {
        SCOPED_TRACE(std::string(name(m)) + " vocab " + std::to_string(vocab) + " rows " +
                     std::to_string(rows));
        const batch b = make_batch(vocab, rows, m, static_cast<uint32_t>(vocab + rows));
        std::vector<int32_t> tokens;
        std::vector<sample_output> out;
        b.run_gpu(tokens, out);
        for (size_t i = 0; i < b.params.size(); ++i) {
          const sampler_row row = b.cpu_row(i);
          const int32_t cpu = sample_row(b.row_logits(i), vocab, row).token_id;
          ASSERT_EQ(out[i].token_id, tokens[i]) << "row " << i;
          if (row.temperature < 1e-5f) {
            ASSERT_EQ(tokens[i], cpu) << "greedy row " << i;
          } else {
            ++sampled_rows;
            if (tokens[i] != cpu) {
              const std::string why = explain_mismatch(b, i, tokens[i], cpu);
              ASSERT_FALSE(why.empty()) << "row " << i << ": GPU " << tokens[i] << ", CPU " << cpu;
              ++explained;
              std::printf("  %s: row %zu GPU %d CPU %d (%s)\n", name(m), i, tokens[i], cpu,
                          why.c_str());
            }
          }
          if (row.num_logprobs < 0) continue;
          const token_logprobs want = logprobs_of(b.row_logits(i), vocab, tokens[i], row.num_logprobs);
          EXPECT_NEAR(out[i].logprob, want.logprob, 1e-4) << "row " << i;
          EXPECT_EQ(out[i].rank, want.rank) << "row " << i;
          ASSERT_EQ(out[i].num_top, static_cast<int32_t>(want.top_ids.size())) << "row " << i;
          for (size_t j = 0; j < want.top_ids.size(); ++j) {
            EXPECT_EQ(out[i].top_ids[j], want.top_ids[j]) << "row " << i << " top " << j;
            EXPECT_NEAR(out[i].top_logprobs[j], want.top_logprobs[j], 1e-4) << "row " << i;
          }
        }
      }
    }
  }
  std::printf("%lld sampled rows, %lld explained mismatches\n",
              static_cast<long long>(sampled_rows), static_cast<long long>(explained));
  EXPECT_LE(explained, std::max<int64_t>(2, sampled_rows / 100));
}

// Shared logits rows (parallel-sampling siblings), forced tokens (prompt
// logprobs), vocab of one, top_k >= vocab, and a flat row where every
// filter cut falls inside one run of ties.
TEST_F(cuda_sampling, edge_cases_match_the_cpu_sampler) {
  batch b = make_batch(1000, 6, mode::all_three, 7);
  b.params[1].logits_row = 0;  // a sibling of row 0 with its own seed
  b.params[2].forced_token = 17;
  b.params[2].num_logprobs = 3;
  b.params[3].top_k = 5000;
  std::fill(b.logits.begin() + 4 * 1000, b.logits.begin() + 6 * 1000, 0.25f);
  b.params[4].top_k = 300;  // cuts the ties at id 299
  b.params[4].top_p = 0.4037f;  // then 122 of them (0.4037 * 300 = 121.1)
  b.params[4].min_p = 0.0f;
  b.params[5].top_k = 0;
  b.params[5].top_p = 0.0303f;  // 31 of 1000
  b.params[5].min_p = 0.5f;
  std::vector<int32_t> tokens;
  std::vector<sample_output> out;
  b.run_gpu(tokens, out);
  for (size_t i = 0; i < b.params.size(); ++i) {
    const int32_t want = i == 2 ? 17 : sample_row(b.row_logits(i), 1000, b.cpu_row(i)).token_id;
    EXPECT_EQ(tokens[i], want) << "row " << i;
  }
  EXPECT_LE(tokens[4], 121);
  EXPECT_LE(tokens[5], 30);
  const token_logprobs forced = logprobs_of(b.row_logits(2), 1000, 17, 3);
  EXPECT_EQ(out[2].rank, forced.rank);
  EXPECT_NEAR(out[2].logprob, forced.logprob, 1e-4);

  // Where the shared candidate list overflows and the row itself is cut:
  // 32000 equal logits (ties everywhere), and top_k beyond the block.
  batch wide = make_batch(32000, 4, mode::all_three, 8);
  std::fill(wide.logits.begin(), wide.logits.begin() + 32000, 0.5f);
  std::fill(wide.logits.begin() + 2 * 32000, wide.logits.begin() + 3 * 32000, -1.0f);
  wide.params[0].top_p = 1.0f;
  wide.params[0].min_p = 0.0f;
  wide.params[0].top_k = 50;  // ids 0..49
  wide.params[1].top_k = 1500;
  wide.params[1].top_p = 0.95f;
  wide.params[1].min_p = 0.0f;  // no bound: the row path
  wide.params[2].top_k = 0;
  wide.params[2].min_p = 0.0f;
  wide.params[2].top_p = 0.3037f;  // 9718.4 of 32000: ids 0..9718
  wide.params[2].num_logprobs = 20;
  wide.params[3].top_k = 0;
  wide.params[3].top_p = 0.95f;
  wide.params[3].min_p = 0.0f;
  wide.params[3].num_logprobs = 20;
  wide.run_gpu(tokens, out);
  for (size_t i = 0; i < wide.params.size(); ++i) {
    const int32_t want = sample_row(wide.row_logits(i), 32000, wide.cpu_row(i)).token_id;
    EXPECT_EQ(tokens[i], want) << "wide row " << i;
    const int32_t k = wide.params[i].num_logprobs;
    if (k < 0) continue;
    const token_logprobs lp = logprobs_of(wide.row_logits(i), 32000, tokens[i], k);
    EXPECT_EQ(out[i].rank, lp.rank) << "wide row " << i;
    ASSERT_EQ(out[i].num_top, k) << "wide row " << i;
    for (size_t j = 0; j < lp.top_ids.size(); ++j) {
      EXPECT_EQ(out[i].top_ids[j], lp.top_ids[j]) << "wide row " << i;
    }
  }
  EXPECT_LE(tokens[0], 49);
  EXPECT_LE(tokens[2], 9718);

  batch one;
  one.vocab = 1;
  one.logits = {-3.0f, 2.0f};
  for (int32_t r = 0; r < 2; ++r) {
    sample_params p;
    p.logits_row = r;
    p.top_p = 0.5f;
    p.num_logprobs = 20;
    one.params.push_back(p);
  }
  one.run_gpu(tokens, out);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(tokens[static_cast<size_t>(r)], 0);
    EXPECT_EQ(out[static_cast<size_t>(r)].num_top, 1);
    EXPECT_EQ(out[static_cast<size_t>(r)].rank, 1);
    EXPECT_NEAR(out[static_cast<size_t>(r)].logprob, 0.0f, 1e-6);
  }
}

// Timings, not a check: run with --gtest_also_run_disabled_tests
// --gtest_filter='*bench*'.
TEST_F(cuda_sampling, DISABLED_bench_64_rows_of_128256) {
  const int64_t vocab = 128256, n = 64;
  struct variant {
    const char* what;
    mode m;
    int32_t logprobs;
  } variants[] = {{"greedy", mode::greedy, -1},
                  {"sampled top_k 50, T 0.7", mode::top_k, -1},
                  {"sampled top_p 0.9", mode::top_p, -1},
                  {"sampled top_k 100 top_p 0.9 min_p 0.02", mode::all_three, -1},
                  {"sampled, no filters", mode::min_p, -1},
                  {"sampled, temperature alone (T 1 / 0.6)", mode::plain, -1},
                  {"sampled top_p 0.9 + 5 logprobs", mode::top_p, 5},
                  {"sampled with penalties", mode::penalties, -1}};
  for (const variant& v : variants) {
    batch b = make_batch(vocab, n, v.m, 11);
    for (sample_params& p : b.params) {
      p.num_logprobs = v.logprobs;
      if (std::string(v.what) == "sampled, no filters") p.min_p = 0.0f;
    }
    float* d_logits = to_device(b.logits);
    sample_params* d_params = to_device(b.params);
    int32_t* d_ids = to_device(b.ids);
    void* scratch = nullptr;
    int32_t* d_tokens = nullptr;
    sample_output* d_out = nullptr;
    ASSERT_EQ(cudaMalloc(&scratch, cuda::sample_scratch_bytes(n, vocab)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_tokens, n * sizeof(int32_t)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out, n * sizeof(sample_output)), cudaSuccess);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    std::vector<float> times;
    for (int rep = 0; rep < 23; ++rep) {
      cudaEventRecord(start);
      cuda::sample(d_logits, vocab, d_params, d_ids, n, scratch, d_tokens, d_out, nullptr);
      cudaEventRecord(stop);
      ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      if (rep >= 3) times.push_back(ms * 1000.0f);
    }
    std::sort(times.begin(), times.end());
    std::printf("sample %lld x %lld, %-40s median %8.1f us (min %.1f)\n",
                static_cast<long long>(n), static_cast<long long>(vocab), v.what,
                times[times.size() / 2], times[0]);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    for (void* p : {static_cast<void*>(d_logits), static_cast<void*>(d_params),
                    static_cast<void*>(d_ids), scratch, static_cast<void*>(d_tokens),
                    static_cast<void*>(d_out)}) {
      cudaFree(p);
    }
  }
}

}  // namespace
}  // namespace troupe
