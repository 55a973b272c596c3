// bench datasets and arrivals: lengths within vLLM's ranges, seeded
// determinism, prefix groups sharing their prefix, repeated blocks, text
// prompts that encode to the wanted length, ShareGPT's filter and
// oversampling, Poisson/gamma arrivals scaled to n / rate.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "cli/bench/arrivals.h"
#include "cli/bench/datasets.h"
#include "tests/temp_dir.h"

namespace troupe::bench {
namespace {

std::vector<sample_request> make(const dataset_options& o, const token_source& src) {
  auto r = make_dataset(o, src);
  EXPECT_TRUE(r.ok()) << r.error_message();
  return r.ok() ? std::move(r.value()) : std::vector<sample_request>{};
}

TEST(bench_random_dataset, lengths_uniform_in_vllm_range) {
  dataset_options o;
  o.num_prompts = 2000;
  o.input_len = 100;
  o.output_len = 10;
  o.range_ratio = 0.25;
  const auto rs = make(o, {1024, nullptr});
  ASSERT_EQ(rs.size(), 2000u);
  std::set<int64_t> in_seen, out_seen;
  for (const sample_request& r : rs) {
    ASSERT_GE(r.prompt_len, 75);
    ASSERT_LE(r.prompt_len, 125);
    ASSERT_GE(r.output_len, 7);   // floor(10 * 0.75)
    ASSERT_LE(r.output_len, 13);  // ceil(10 * 1.25)
    ASSERT_EQ(static_cast<int64_t>(r.prompt_ids.size()), r.prompt_len);
    for (int32_t id : r.prompt_ids) ASSERT_TRUE(id >= 0 && id < 1024);
    in_seen.insert(r.prompt_len);
    out_seen.insert(r.output_len);
  }
  EXPECT_EQ(in_seen.size(), 51u);  // every length of the range occurs
  EXPECT_EQ(out_seen.size(), 7u);
  // Prompt i is consecutive ids from its offset (vLLM's (offset + i + j) mod V).
  for (size_t j = 1; j < rs[3].prompt_ids.size(); ++j) {
    EXPECT_EQ(rs[3].prompt_ids[j], (rs[3].prompt_ids[j - 1] + 1) % 1024);
  }
}

TEST(bench_random_dataset, fixed_lengths_and_seeded_determinism) {
  dataset_options o;
  o.num_prompts = 50;
  o.input_len = 16;
  o.output_len = 16;
  const auto a = make(o, {1024, nullptr});
  const auto b = make(o, {1024, nullptr});
  o.seed = 1;
  const auto c = make(o, {1024, nullptr});
  ASSERT_EQ(a.size(), 50u);
  size_t same_as_c = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt_len, 16);
    EXPECT_EQ(a[i].output_len, 16);
    EXPECT_EQ(a[i].prompt_ids, b[i].prompt_ids);
    same_as_c += a[i].prompt_ids == c[i].prompt_ids;
  }
  EXPECT_LT(same_as_c, 3u);
}

TEST(bench_prefix_dataset, groups_share_their_prefix_only) {
  dataset_options o;
  o.kind = dataset_kind::prefix;
  o.num_prompts = 40;
  o.prefix_len = 64;
  o.num_prefix_groups = 4;
  o.input_len = 8;
  const auto rs = make(o, {32000, nullptr});
  ASSERT_EQ(rs.size(), 40u);
  std::map<int64_t, std::vector<int32_t>> prefix_of;
  std::map<int64_t, int> count;
  for (const sample_request& r : rs) {
    ASSERT_EQ(r.prompt_len, 72);
    const std::vector<int32_t> prefix(r.prompt_ids.begin(), r.prompt_ids.begin() + 64);
    ++count[r.group];
    if (prefix_of.count(r.group) == 0) prefix_of[r.group] = prefix;
    EXPECT_EQ(prefix, prefix_of[r.group]) << "group " << r.group;
  }
  ASSERT_EQ(prefix_of.size(), 4u);
  for (const auto& [g, n] : count) EXPECT_EQ(n, 10) << g;
  for (int64_t g = 1; g < 4; ++g) EXPECT_NE(prefix_of[0], prefix_of[g]);
  // Shuffled: the groups do not simply alternate.
  bool alternating = true;
  for (size_t i = 0; i < rs.size(); ++i) alternating &= rs[i].group == static_cast<int64_t>(i % 4);
  EXPECT_FALSE(alternating);
}

TEST(bench_repeat_dataset, prompt_is_one_block_repeated) {
  dataset_options o;
  o.kind = dataset_kind::repeat;
  o.num_prompts = 5;
  o.input_len = 100;
  o.repeat_block_len = 16;
  const auto rs = make(o, {32000, nullptr});
  for (const sample_request& r : rs) {
    ASSERT_EQ(r.prompt_ids.size(), 100u);
    for (size_t j = 16; j < 100; ++j) EXPECT_EQ(r.prompt_ids[j], r.prompt_ids[j - 16]);
  }
  EXPECT_NE(rs[0].prompt_ids, rs[1].prompt_ids);
}

TEST(bench_text_prompts, filler_words_without_a_tokenizer) {
  dataset_options o;
  o.num_prompts = 3;
  o.input_len = 20;
  o.format = prompt_format::text;
  const auto rs = make(o, {1000, nullptr});
  for (const sample_request& r : rs) {
    EXPECT_TRUE(r.prompt_ids.empty());
    size_t words = 1;
    for (char c : r.prompt_text) words += c == ' ';
    EXPECT_EQ(words, 20u);
    EXPECT_EQ(r.prompt_len, 20);
  }
}

TEST(bench_text_prompts, tokenizer_text_encodes_to_the_wanted_length) {
  auto tok = tokenizer::load(std::string(TROUPE_TEST_DATA) + "/tokenizers/qwen3");
  ASSERT_TRUE(tok.ok()) << tok.error_message();
  dataset_options o;
  o.num_prompts = 10;
  o.input_len = 50;
  o.format = prompt_format::text;
  const auto rs = make(o, {(*tok)->vocab_size(), tok->get()});
  const int64_t special = static_cast<int64_t>((*tok)->encode("", true).size());
  for (const sample_request& r : rs) {
    EXPECT_EQ(r.prompt_len, 50);  // what the server counts: text + its special tokens
    EXPECT_EQ(static_cast<int64_t>((*tok)->encode(r.prompt_text, true).size()), 50);
    EXPECT_EQ(static_cast<int64_t>((*tok)->encode(r.prompt_text, false).size()), 50 - special);
  }
}

TEST(bench_dataset_errors, name_the_flag) {
  dataset_options o;
  o.range_ratio = 1.0;
  auto r = make_dataset(o, {1000, nullptr});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_message().find("--range-ratio"), std::string::npos);
  o = {};
  o.num_prompts = 0;
  EXPECT_NE(make_dataset(o, {1000, nullptr}).error_message().find("--num-prompts"), std::string::npos);
  o = {};
  o.kind = dataset_kind::sharegpt;
  EXPECT_NE(make_dataset(o, {1000, nullptr}).error_message().find("--dataset-path"), std::string::npos);
  EXPECT_FALSE(parse_dataset_kind("sonnet").ok());
}

std::string conversation(int prompt_words, int reply_words) {
  std::string p, c;
  for (int i = 0; i < prompt_words; ++i) p += " word";
  for (int i = 0; i < reply_words; ++i) c += " word";
  return "{\"conversations\":[{\"from\":\"human\",\"value\":\"" + p + "\"},{\"from\":\"gpt\",\"value\":\"" +
         c + "\"}]}";
}

TEST(bench_sharegpt, vllm_filter_estimates_and_oversampling) {
  const testing::temp_dir dir("sharegpt");
  // Bytes / 4 estimates (" word" = 5 bytes): prompt 40 words -> 50 tokens,
  // reply 16 words -> 20; too short prompt (2 words -> 3); too short reply;
  // too long prompt (1000 words -> 1250); one turn only.
  dir.write("d.json", "[" + conversation(40, 16) + "," + conversation(2, 16) + "," + conversation(40, 2) +
                          "," + conversation(1000, 16) + ",{\"conversations\":[{\"value\":\"x\"}]}," +
                          conversation(8, 8) + "]");
  dataset_options o;
  o.kind = dataset_kind::sharegpt;
  o.dataset_path = (dir / "d.json").string();
  o.num_prompts = 6;
  o.format = prompt_format::text;
  const auto rs = make(o, {1000, nullptr});
  ASSERT_EQ(rs.size(), 6u);  // two pass the filter, oversampled to six
  std::set<int64_t> lens;
  for (const sample_request& r : rs) {
    lens.insert(r.prompt_len);
    if (r.prompt_len == 50) { EXPECT_EQ(r.output_len, 20); }
    if (r.prompt_len == 10) { EXPECT_EQ(r.output_len, 10); }
  }
  EXPECT_EQ(lens, (std::set<int64_t>{10, 50}));
  // A fixed --output-len replaces the reference length and lifts its minimum.
  o.output_len = 3;
  o.output_len_set = true;
  for (const sample_request& r : make(o, {1000, nullptr})) EXPECT_EQ(r.output_len, 3);
  o.format = prompt_format::ids;
  EXPECT_FALSE(make_dataset(o, {1000, nullptr}).ok());  // ids need a tokenizer
  dir.write("bad.json", "{\"not\": \"a list\"}");
  o.dataset_path = (dir / "bad.json").string();
  o.format = prompt_format::text;
  EXPECT_FALSE(make_dataset(o, {1000, nullptr}).ok());
}

TEST(bench_arrivals, infinite_rate_sends_everything_at_once) {
  bench_rng rng(0);
  for (double t : arrival_times(10, INFINITY, 1.0, rng)) EXPECT_EQ(t, 0.0);
}

TEST(bench_arrivals, scaled_to_n_over_rate_and_seeded) {
  bench_rng rng(7), again(7);
  const std::vector<double> t = arrival_times(1000, 20.0, 1.0, rng);
  EXPECT_EQ(t, arrival_times(1000, 20.0, 1.0, again));
  ASSERT_EQ(t.size(), 1000u);
  EXPECT_NEAR(t.back(), 50.0, 1e-9);  // vLLM's normalisation: last = n / rate
  for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
  // Poisson: gaps exponential, coefficient of variation about 1.
  std::vector<double> gaps = {t[0]};
  for (size_t i = 1; i < t.size(); ++i) gaps.push_back(t[i] - t[i - 1]);
  double mean = 0, var = 0;
  for (double g : gaps) mean += g / gaps.size();
  for (double g : gaps) var += (g - mean) * (g - mean) / gaps.size();
  EXPECT_NEAR(std::sqrt(var) / mean, 1.0, 0.1);
  // Burstiness inf: evenly spaced.
  const std::vector<double> even = arrival_times(4, 2.0, INFINITY, rng);
  EXPECT_EQ(even, (std::vector<double>{0.5, 1.0, 1.5, 2.0}));
}

TEST(bench_arrivals, gamma_shape_sets_the_spread) {
  bench_rng rng(3);
  // Gamma(k) gaps: coefficient of variation 1 / sqrt(k).
  for (double k : {0.25, 4.0}) {
    const std::vector<double> t = arrival_times(4000, 10.0, k, rng);
    double mean = 0, var = 0;
    std::vector<double> gaps = {t[0]};
    for (size_t i = 1; i < t.size(); ++i) gaps.push_back(t[i] - t[i - 1]);
    for (double g : gaps) mean += g / gaps.size();
    for (double g : gaps) var += (g - mean) * (g - mean) / gaps.size();
    EXPECT_NEAR(std::sqrt(var) / mean, 1.0 / std::sqrt(k), 0.15 / std::sqrt(k)) << "shape " << k;
  }
}

}  // namespace
}  // namespace troupe::bench
