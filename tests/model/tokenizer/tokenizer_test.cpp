// The tokenizer against Hugging Face `tokenizers` 0.23: the fixtures' golden
// encodings (tests/data/tokenizers/golden.json), the lead's generated corpus
// (tests/data/tokenizers/corpus/<name>.json, skipped when absent) and the
// adversarial set of tests/model/tokenizer/data/<name>.json (made by
// make_adversarial.js with the npm build of the same Rust core).
#include "tests/model/tokenizer/tokenizer_test_util.h"

namespace troupe {
namespace {

using testing::check_encode_cases;
using testing::get;
using testing::ids_of;
using testing::json_file;
using testing::kAdversarial;
using testing::kTokenizers;
using testing::string_of;

class golden : public ::testing::TestWithParam<std::string> {};

TEST_P(golden, encode_cases_match_ids_and_decode) {
  json_file file(kTokenizers / "golden.json");
  ASSERT_TRUE(file.ok);
  simdjson::dom::array cases;
  ASSERT_EQ(file.root["tokenizers"][GetParam()]["encode"].get(cases), simdjson::SUCCESS);
  EXPECT_GE(check_encode_cases(get(GetParam()), cases, "golden"), 20u);
}

TEST_P(golden, chat_texts_encode_to_their_ids_and_round_trip) {
  json_file file(kTokenizers / "golden.json");
  ASSERT_TRUE(file.ok);
  simdjson::dom::array cases;
  ASSERT_EQ(file.root["tokenizers"][GetParam()]["chat"].get(cases), simdjson::SUCCESS);
  const tokenizer& tok = get(GetParam());
  for (auto c : cases) {
    const std::string text = string_of(c, "text");
    const std::vector<int32_t> ids = ids_of(c["ids"].value_unsafe());
    EXPECT_EQ(tok.encode(text, false), ids) << text;
    EXPECT_EQ(tok.decode(ids, false), text);
  }
}

TEST_P(golden, generated_corpus_matches) {
  const auto path = kTokenizers / "corpus" / (GetParam() + ".json");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  json_file file(path);
  ASSERT_TRUE(file.ok);
  simdjson::dom::array cases;
  ASSERT_EQ(file.root["cases"].get(cases), simdjson::SUCCESS);
  EXPECT_GE(check_encode_cases(get(GetParam()), cases, "corpus"), 1u);
}

TEST_P(golden, adversarial_encode_cases_match) {
  json_file file(kAdversarial / (GetParam() + ".json"));
  ASSERT_TRUE(file.ok);
  simdjson::dom::array cases;
  ASSERT_EQ(file.root["cases"].get(cases), simdjson::SUCCESS);
  EXPECT_GE(check_encode_cases(get(GetParam()), cases, "adversarial"), 400u);
}

TEST_P(golden, adversarial_add_special_tokens_match) {
  json_file file(kAdversarial / (GetParam() + ".json"));
  ASSERT_TRUE(file.ok);
  simdjson::dom::array cases;
  ASSERT_EQ(file.root["special_cases"].get(cases), simdjson::SUCCESS);
  const tokenizer& tok = get(GetParam());
  for (auto c : cases) {
    const std::string text = string_of(c, "text");
    EXPECT_EQ(tok.encode(text, true), ids_of(c["ids"].value_unsafe())) << text;
  }
}

TEST_P(golden, adversarial_decode_cases_match) {
  json_file file(kAdversarial / (GetParam() + ".json"));
  ASSERT_TRUE(file.ok);
  simdjson::dom::array cases;
  ASSERT_EQ(file.root["decode_cases"].get(cases), simdjson::SUCCESS);
  const tokenizer& tok = get(GetParam());
  for (auto c : cases) {
    const std::vector<int32_t> ids = ids_of(c["ids"].value_unsafe());
    bool skip = false;
    ASSERT_EQ(c["skip_special_tokens"].get(skip), simdjson::SUCCESS);
    EXPECT_EQ(tok.decode(ids, skip), string_of(c, "decoded")) << ::testing::PrintToString(ids);
  }
}

TEST_P(golden, decode_inverts_encode) {
  const tokenizer& tok = get(GetParam());
  for (const std::string text : {"Hello, world!", "  two  spaces\n\ttab", "用一句话介绍 vLLM。",
                                 "emoji 👨‍👩‍👧 ok"}) {
    EXPECT_EQ(tok.decode(tok.encode(text, false), false), text);
  }
}

INSTANTIATE_TEST_SUITE_P(tokenizers, golden,
                         ::testing::Values("qwen3", "llama3_1", "llama2", "deepseek_v3"));

}  // namespace
}  // namespace troupe
