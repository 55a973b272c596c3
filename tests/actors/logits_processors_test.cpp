// logits_processors (actors/worker/logits_processors.h): the biases of one
// position for min_tokens, bad words and logit_bias, and the allowed mask,
// on hand-made cases.
#include <gtest/gtest.h>

#include <limits>

#include "actors/worker/logits_processors.h"

namespace troupe {
namespace {

constexpr float banned = -std::numeric_limits<float>::infinity();

position_biases at(const sampling_params& p, int64_t index, const std::vector<int32_t>& output,
                   const std::vector<int64_t>& eos = {2}) {
  position_biases b;
  position_biases_for(p, eos, index, output.data(), static_cast<int64_t>(output.size()), b);
  EXPECT_EQ(b.ids.size(), b.values.size());
  for (size_t i = 1; i < b.ids.size(); ++i) EXPECT_LT(b.ids[i - 1], b.ids[i]);
  return b;
}

TEST(logits_processors_test, nothing_asked_gives_no_biases) {
  const position_biases b = at(sampling_params{}, 0, {});
  EXPECT_TRUE(b.ids.empty());
}

TEST(logits_processors_test, min_tokens_bans_eos_and_stop_ids_until_reached) {
  sampling_params p;
  p.min_tokens = 3;
  p.stop_token_ids = {7, 1};
  EXPECT_EQ(at(p, 0, {}).ids, (std::vector<int32_t>{1, 2, 7}));
  EXPECT_EQ(at(p, 2, {5, 5}).values, (std::vector<float>{banned, banned, banned}));
  EXPECT_TRUE(at(p, 3, {5, 5, 5}).ids.empty());  // the fourth token may stop
  p.ignore_eos = true;  // EOS is then no stop token
  EXPECT_EQ(at(p, 0, {}).ids, (std::vector<int32_t>{1, 7}));
}

TEST(logits_processors_test, bad_words_ban_their_last_token_after_the_rest) {
  sampling_params p;
  p.bad_words_ids = {{9}, {4, 5, 6}};
  EXPECT_EQ(at(p, 0, {}).ids, (std::vector<int32_t>{9}));
  EXPECT_EQ(at(p, 2, {1, 4}).ids, (std::vector<int32_t>{9}));
  EXPECT_EQ(at(p, 3, {1, 4, 5}).ids, (std::vector<int32_t>{6, 9}));
  EXPECT_EQ(at(p, 3, {4, 5, 1}).ids, (std::vector<int32_t>{9}));
}

TEST(logits_processors_test, a_ban_overrides_a_logit_bias) {
  sampling_params p;
  p.logit_bias = {{2, 5.0f}, {3, -1.0f}};
  EXPECT_EQ(at(p, 0, {}).values, (std::vector<float>{5.0f, -1.0f}));
  p.min_tokens = 1;  // bans EOS (2)
  const position_biases b = at(p, 0, {});
  EXPECT_EQ(b.ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(b.values, (std::vector<float>{banned, -1.0f}));
}

TEST(logits_processors_test, the_allowed_mask_sets_one_bit_per_token) {
  const std::vector<uint32_t> mask = allowed_token_mask({0, 33, 63, 64}, 70);
  ASSERT_EQ(mask.size(), 3u);
  EXPECT_EQ(mask[0], 1u);
  EXPECT_EQ(mask[1], (1u << 1) | (1u << 31));
  EXPECT_EQ(mask[2], 1u);
  sampler_row row;
  position_biases none;
  attach_processors(row, mask, none);
  EXPECT_EQ(row.allowed_mask, mask.data());
  EXPECT_EQ(row.num_biases, 0);
  attach_processors(row, {}, none);
  EXPECT_EQ(row.allowed_mask, nullptr);
}

}  // namespace
}  // namespace troupe
