// stop_checker: stop strings found across delta boundaries, never released,
// held-back text released when it turns out not to be a stop string.
#include <gtest/gtest.h>

#include <random>

#include "actors/request/stop_checker.h"

namespace troupe {
namespace {

// Feeds `text` cut at the given positions; returns everything released.
std::string feed_all(stop_checker& c, const std::string& text, const std::vector<size_t>& cuts) {
  std::string out;
  size_t prev = 0;
  for (size_t cut : cuts) {
    out += c.feed(text.substr(prev, cut - prev));
    prev = cut;
  }
  out += c.feed(text.substr(prev));
  if (!c.stopped()) out += c.flush();
  return out;
}

TEST(stop_checker, stop_string_split_over_deltas_never_released) {
  stop_checker c({"STOP"}, false);
  EXPECT_EQ(c.feed("hello S"), "hello ");
  EXPECT_EQ(c.feed("T"), "");
  EXPECT_EQ(c.feed("OP and more"), "");
  EXPECT_TRUE(c.stopped());
  EXPECT_EQ(c.matched(), "STOP");
  EXPECT_EQ(c.feed("later"), "");
}

TEST(stop_checker, false_alarm_is_released) {
  stop_checker c({"STOP"}, false);
  EXPECT_EQ(c.feed("ST"), "");
  EXPECT_EQ(c.feed("ART"), "START");
  EXPECT_FALSE(c.stopped());
  EXPECT_EQ(c.feed("ends with ST"), "ends with ");
  EXPECT_EQ(c.flush(), "ST");
}

TEST(stop_checker, include_stop_string_and_earliest_match) {
  stop_checker c({"world", "lo w"}, true);
  EXPECT_EQ(c.feed("hello world"), "hello w");
  EXPECT_EQ(c.matched(), "lo w");
}

TEST(stop_checker, multibyte_stop_strings_keep_utf8_whole) {
  stop_checker c({"。结束"}, false);
  EXPECT_EQ(c.feed("第一句。"), "第一句");
  EXPECT_EQ(c.feed("第二"), "。第二");
  EXPECT_EQ(c.feed("句。结"), "句");
  EXPECT_EQ(c.feed("束"), "");
  EXPECT_TRUE(c.stopped());
}

TEST(stop_checker, no_stops_releases_everything) {
  stop_checker c({}, false);
  EXPECT_EQ(c.feed("abc"), "abc");
  EXPECT_EQ(c.flush(), "");
}

// Randomised: whatever the cut points, the released text is the text up to
// the first stop string (or all of it).
TEST(stop_checker, random_cuts_match_a_direct_search) {
  std::mt19937 rng(7);
  const std::vector<std::string> stops = {"ab", "bca", "\n\n"};
  const std::string alphabet = "abc\n ";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int len = static_cast<int>(rng() % 30);
    for (int i = 0; i < len; ++i) text.push_back(alphabet[rng() % alphabet.size()]);
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i) {
      if (rng() % 3 == 0) cuts.push_back(i);
    }
    size_t first = std::string::npos;
    for (const auto& s : stops) first = std::min(first, text.find(s));
    const std::string expected = first == std::string::npos ? text : text.substr(0, first);
    stop_checker c(stops, false);
    EXPECT_EQ(feed_all(c, text, cuts), expected) << "text '" << text << "'";
    EXPECT_EQ(c.stopped(), first != std::string::npos);
  }
}

}  // namespace
}  // namespace troupe
