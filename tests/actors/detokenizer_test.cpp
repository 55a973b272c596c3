// incremental_detokenizer, property-tested with the real tokenizers
// (byte-level BPE: qwen3, llama3_1, deepseek_v3; SentencePiece byte
// fallback: llama2): for random token sequences fed in random chunks, every
// delta is valid UTF-8 and the deltas concatenate to the full decode.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>

#include "actors/request/incremental_detokenizer.h"

#ifndef TROUPE_TEST_DATA
#define TROUPE_TEST_DATA "tests/data"
#endif

namespace troupe {
namespace {

const tokenizer& load(const std::string& name) {
  static std::map<std::string, std::unique_ptr<tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    auto t = tokenizer::load(std::string(TROUPE_TEST_DATA) + "/tokenizers/" + name);
    EXPECT_TRUE(t.ok()) << t.error_message();
    slot = std::move(t.value());
  }
  return *slot;
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

// Streams `output` after `prompt` in random chunks; checks the invariants.
void check_stream(const tokenizer& tok, const std::vector<int32_t>& prompt,
                  const std::vector<int32_t>& output, bool skip_special, std::mt19937& rng) {
  incremental_detokenizer d(tok, prompt, skip_special);
  std::string streamed;
  size_t i = 0;
  while (i < output.size()) {
    const size_t n = 1 + rng() % 3;
    std::vector<int32_t> chunk(output.begin() + static_cast<std::ptrdiff_t>(i),
                               output.begin() + static_cast<std::ptrdiff_t>(std::min(i + n, output.size())));
    i += chunk.size();
    const std::string delta = d.append(chunk);
    ASSERT_TRUE(is_valid_utf8(delta)) << "invalid UTF-8 delta";
    streamed += delta;
  }
  const std::string tail = d.flush();
  ASSERT_TRUE(is_valid_utf8(tail));
  streamed += tail;
  EXPECT_EQ(streamed, d.text());
  // The reference: what the output adds to the decoded prompt. Only
  // defined when the prompt's own decode is a prefix (a prompt cut inside a
  // UTF-8 character is not).
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), output.begin(), output.end());
  const std::string full = tok.decode(all, skip_special);
  const std::string head = tok.decode(prompt, skip_special);
  if (prompt.empty()) {
    EXPECT_EQ(streamed, tok.decode(output, skip_special));
  } else if (starts_with(full, head) && is_valid_utf8(head) &&
             head.find("\xEF\xBF\xBD") == std::string::npos) {
    EXPECT_EQ(streamed, full.substr(head.size()));
  }
}

class detokenizer_property : public ::testing::TestWithParam<std::string> {};

TEST_P(detokenizer_property, random_ids_stream_to_the_full_decode) {
  const tokenizer& tok = load(GetParam());
  std::mt19937 rng(12345);
  const int32_t vocab = static_cast<int32_t>(tok.vocab_size());
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> prompt(rng() % 4), output(1 + rng() % 40);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % vocab);
    for (auto& t : output) t = static_cast<int32_t>(rng() % vocab);
    check_stream(tok, prompt, output, trial % 2 == 0, rng);
    if (HasFatalFailure()) return;
  }
}

TEST_P(detokenizer_property, real_text_streams_back_exactly) {
  const tokenizer& tok = load(GetParam());
  std::mt19937 rng(99);
  const std::vector<std::string> texts = {
      "Hello, world! How are you today?",
      "大模型推理分为两个阶段：prefill阶段和decode阶段。",
      "emoji: 😀👍🏽🇨🇳 and ZWJ 👨‍👩‍👧 — done",
      "def f(x):\n    return x**2  # square\n",
      "café naïve résumé Ελληνικά русский العربية हिन्दी",
  };
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = tok.encode(text, false);
    // A prompt of the first few tokens, the rest streamed.
    const size_t split = std::min<size_t>(3, ids.size());
    std::vector<int32_t> prompt(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(split));
    std::vector<int32_t> output(ids.begin() + static_cast<std::ptrdiff_t>(split), ids.end());
    check_stream(tok, prompt, output, true, rng);
    check_stream(tok, {}, ids, true, rng);
    incremental_detokenizer d(tok, {}, true);
    std::string streamed;
    for (int32_t id : ids) streamed += d.append({id});
    streamed += d.flush();
    EXPECT_EQ(streamed, tok.decode(ids, true)) << text;
  }
}

INSTANTIATE_TEST_SUITE_P(tokenizers, detokenizer_property,
                         ::testing::Values("qwen3", "llama3_1", "llama2", "deepseek_v3"));

TEST(utf8, validity) {
  EXPECT_TRUE(is_valid_utf8("abc é 中 😀"));
  EXPECT_FALSE(is_valid_utf8("\xE4\xB8"));        // truncated
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));        // overlong
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));    // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
}

}  // namespace
}  // namespace troupe
