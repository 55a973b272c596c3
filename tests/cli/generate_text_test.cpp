// `troupe generate` with a tokenizer: text prompts are encoded as
// `tokenizers` encodes them (special tokens added), outputs carry text, and
// stop strings end the output before the stop string. The model is random
// weights in tiny-llama's shape with the llama2 tokenizer's vocabulary.
#include <gtest/gtest.h>

#include "tests/cli/cli_runner.h"

namespace troupe::testing {
namespace {

std::vector<std::string> base_args() {
  return {"generate", "--model", model_dir("dummy-llama-32k"), "--load-format", "dummy",
          "--tokenizer", std::string(TROUPE_TEST_DATA) + "/tokenizers/llama2", "--json",
          "--temperature", "0", "--ignore-eos"};
}

struct text_output {
  std::vector<int64_t> prompt_ids, token_ids;
  std::string text, finish_reason;
};

text_output run(std::vector<std::string> extra) {
  auto args = base_args();
  args.insert(args.end(), extra.begin(), extra.end());
  const run_result r = run_troupe(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  text_output out;
  const auto lines = split_lines(r.out);
  if (lines.empty()) return out;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(lines[0]);
  for (int64_t id : doc["prompt_ids"].get_array()) out.prompt_ids.push_back(id);
  simdjson::dom::element o = doc["outputs"].at(0);
  for (int64_t id : o["token_ids"].get_array()) out.token_ids.push_back(id);
  out.text = std::string(std::string_view(o["text"]));
  out.finish_reason = std::string(std::string_view(o["finish_reason"]));
  return out;
}

TEST(generate_text, prompt_is_encoded_like_tokenizers_with_bos) {
  // tokenizers' llama2 ids of "Hello, world!" (fixtures golden.json, no
  // special tokens), with <s> (1) in front as add_special_tokens adds it.
  simdjson::dom::parser parser;
  simdjson::dom::element golden =
      parser.load(std::string(TROUPE_TEST_DATA) + "/tokenizers/golden.json");
  std::vector<int64_t> expected = {1};
  for (simdjson::dom::element c : golden["tokenizers"]["llama2"]["encode"].get_array()) {
    if (std::string_view(c["text"]) == "Hello, world!") {
      for (int64_t id : c["ids"].get_array()) expected.push_back(id);
    }
  }
  ASSERT_GT(expected.size(), 1u);
  const text_output out = run({"--prompt", "Hello, world!", "--max-tokens", "4"});
  EXPECT_EQ(out.prompt_ids, expected);
  EXPECT_EQ(out.token_ids.size(), 4u);
  EXPECT_FALSE(out.text.empty());
}

TEST(generate_text, stop_string_truncates_before_it) {
  const text_output free_run = run({"--prompt", "Once upon a time", "--max-tokens", "24"});
  ASSERT_EQ(free_run.finish_reason, "length");
  ASSERT_GE(free_run.text.size(), 12u);
  // A stop string from the middle of what the model says anyway.
  const std::string stop = free_run.text.substr(free_run.text.size() / 2, 3);
  const size_t first = free_run.text.find(stop);
  const text_output stopped = run({"--prompt", "Once upon a time", "--max-tokens", "24", "--stop", stop});
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.text, free_run.text.substr(0, first));
  EXPECT_LT(stopped.token_ids.size(), free_run.token_ids.size());
  // The tokens are the free run's, up to the one that completed the stop string.
  for (size_t i = 0; i < stopped.token_ids.size(); ++i) {
    EXPECT_EQ(stopped.token_ids[i], free_run.token_ids[i]);
  }
}

TEST(generate_text, text_prompt_without_tokenizer_is_an_error) {
  const run_result r = run_troupe({"generate", "--model", model_dir("tiny-llama"), "--prompt", "hi"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "troupe: error: --prompt: text prompts need a tokenizer (the model folder has no "
                   "tokenizer.json: set --tokenizer DIR, or give token ids)\n");
}

}  // namespace
}  // namespace troupe::testing
