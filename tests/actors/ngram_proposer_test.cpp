// ngram_proposer against hand-worked cases and, on random histories over
// small alphabets (so that matches are common), against a brute-force
// reference after every appended token, for every n-gram range and k.
#include <gtest/gtest.h>

#include <random>

#include "actors/drafter/ngram_proposer.h"

namespace troupe {
namespace {

using ids = std::vector<int32_t>;

// The definition, directly: the longest suffix of min..max tokens with an
// earlier occurrence, its latest one, and up to k tokens after it, the copy
// continuing over its own proposal where it reaches the end (overlap).
ids reference(const ids& t, int32_t min_n, int32_t max_n, int64_t k) {
  const auto len = static_cast<int64_t>(t.size());
  if (k <= 0) return {};
  for (int32_t n = max_n; n >= min_n; --n) {
    if (len < n + 1) continue;
    for (int64_t e = len - 2; e >= n - 1; --e) {
      if (std::equal(t.begin() + (e - n + 1), t.begin() + e + 1, t.end() - n)) {
        ids ext = t;
        for (int64_t i = 0; i < k; ++i) ext.push_back(ext[static_cast<size_t>(e + 1 + i)]);
        return ids(ext.begin() + len, ext.end());
      }
    }
  }
  return {};
}

ngram_proposer make(int32_t k, int32_t min_n, int32_t max_n) {
  return ngram_proposer(ngram_config{k, min_n, max_n});
}

TEST(ngram_proposer, nothing_matches_no_proposal) {
  ngram_proposer p = make(4, 1, 3);
  p.add(1, {1, 2, 3, 4, 5});
  EXPECT_TRUE(p.propose(1, 10).empty());
  EXPECT_TRUE(p.propose(2, 10).empty()) << "unknown id";
  p.add(3, {7});
  EXPECT_TRUE(p.propose(3, 10).empty()) << "one token has no earlier occurrence";
}

TEST(ngram_proposer, a_repeated_phrase_proposes_its_continuation) {
  ngram_proposer p = make(3, 2, 4);
  // ... 10 11 12 13 14 ... 10 11 -> 12 13 14
  p.add(1, {10, 11, 12, 13, 14, 99, 10, 11});
  EXPECT_EQ(p.propose(1, 10), (ids{12, 13, 14}));
  EXPECT_EQ(p.propose(1, 2), (ids{12, 13})) << "max_model_len / max_tokens limit";
  EXPECT_TRUE(p.propose(1, 0).empty());
}

TEST(ngram_proposer, the_longest_match_wins_over_a_later_shorter_one) {
  ngram_proposer p = make(2, 1, 3);
  // Suffix "5 6 7": the 3-gram occurs at the start (-> 1 2); the 1-gram "7"
  // occurs later too (-> 9), but the longest match decides.
  p.add(1, {5, 6, 7, 1, 2, 4, 7, 9, 5, 6, 7});
  EXPECT_EQ(p.propose(1, 5), (ids{1, 2}));
}

TEST(ngram_proposer, the_most_recent_occurrence_wins_among_equals) {
  ngram_proposer p = make(2, 2, 2);
  p.add(1, {3, 4, 100, 101, 3, 4, 200, 201, 3, 4});
  EXPECT_EQ(p.propose(1, 5), (ids{200, 201}));
}

// A match close to the end continues as the history did from there, over
// the tokens it proposes itself (a loop of period p repeats): a model stuck
// on one token gets k drafts, not one.
TEST(ngram_proposer, a_continuation_that_reaches_the_end_copies_itself) {
  ngram_proposer p = make(5, 1, 1);
  p.add(1, {8, 8, 8});  // "8" last seen at 1: the copy overlaps its own output
  EXPECT_EQ(p.propose(1, 10), (ids{8, 8, 8, 8, 8}));
  p.add(2, {1, 5, 6, 5, 6});  // "6" last seen at 2: 5 6 5 6 ...
  EXPECT_EQ(p.propose(2, 4), (ids{5, 6, 5, 6}));
}

TEST(ngram_proposer, min_bounds_the_match_length) {
  ngram_proposer p = make(3, 3, 5);
  p.add(1, {1, 2, 9, 9, 1, 2});  // "1 2" repeats, but 3 tokens are required
  EXPECT_TRUE(p.propose(1, 10).empty());
  p.append(1, {9});  // the suffix "1 2 9" occurred at 0..2: "9 1 2" follows it
  EXPECT_EQ(p.propose(1, 10), (ids{9, 1, 2}));
}

TEST(ngram_proposer, appends_and_removal) {
  ngram_proposer p = make(2, 1, 2);
  p.add(1, {1, 2, 3});
  p.append(1, {1});
  EXPECT_EQ(p.propose(1, 10), (ids{2, 3}));
  p.append(2, {1, 2});  // unknown: ignored
  EXPECT_FALSE(p.has(2));
  p.remove(1);
  EXPECT_EQ(p.num_requests(), 0u);
  EXPECT_TRUE(p.propose(1, 10).empty());
}

TEST(ngram_proposer, incremental_index_equals_the_definition_on_random_histories) {
  int64_t compared = 0, nonempty = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed);
    auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int32_t min_n = pick(1, 3), max_n = min_n + pick(0, 4), k = pick(1, 8);
    const int alphabet = pick(2, 6);
    ngram_proposer p = make(k, min_n, max_n);
    ids history;
    for (int i = 0, n0 = pick(0, 20); i < n0; ++i) history.push_back(pick(0, alphabet - 1));
    p.add(seed, history);
    for (int step = 0; step < 300; ++step) {
      const int64_t limit = pick(0, 10);
      const ids got = p.propose(seed, limit);
      ASSERT_EQ(got, reference(history, min_n, max_n, std::min<int64_t>(k, limit)))
          << "seed " << seed << " step " << step << " min " << min_n << " max " << max_n;
      ++compared;
      nonempty += !got.empty();
      ids more;
      for (int i = 0, m = pick(1, 3); i < m; ++i) more.push_back(pick(0, alphabet - 1));
      p.append(seed, more);
      history.insert(history.end(), more.begin(), more.end());
    }
    // Built at once from the whole history, the index proposes the same.
    ngram_proposer whole = make(k, min_n, max_n);
    whole.add(1, history);
    EXPECT_EQ(whole.propose(1, k), p.propose(seed, k));
  }
  EXPECT_EQ(compared, 60 * 300);
  EXPECT_GT(nonempty, compared / 2) << "the histories must exercise matches";
}

}  // namespace
}  // namespace troupe
