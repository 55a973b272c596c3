// The tokenizer's API beyond encode: lookups, special tokens, settings from
// tokenizer_config.json / generation_config.json, load errors; and the
// synthetic tokenizers of data/synthetic/ (components the four fixtures do not
// use) against Hugging Face `tokenizers` results made by make_synthetic.js.
// Expected values were read from `tokenizers` 0.23.2, not from this code.
#include "tests/model/tokenizer/tokenizer_test_util.h"
#include "tests/temp_dir.h"

#include <thread>

namespace troupe {
namespace {

using testing::check_encode_cases;
using testing::get;
using testing::ids_of;
using testing::json_file;
using testing::kAdversarial;
using testing::string_of;

std::string load_error(const std::filesystem::path& dir) {
  auto t = tokenizer::load(dir);
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : t.error_message();
}

// A tiny byte-level BPE tokenizer.json with `extra` spliced into its top level.
std::string tiny_tokenizer_json(const std::string& extra) {
  return R"({"version":"1.0","added_tokens":[{"id":3,"content":"<eos>","special":true,)"
         R"("normalized":false,"lstrip":false,"rstrip":false,"single_word":false}],)" +
         extra + R"("model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}})";
}

TEST(tokenizer_synthetic, every_variant_matches_tokenizers) {
  const auto root = kAdversarial / "synthetic";
  size_t variants = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    SCOPED_TRACE(entry.path().filename().string());
    auto tok = tokenizer::load(entry.path());
    ASSERT_TRUE(tok.ok()) << tok.error_message();
    json_file file(entry.path() / "expected.json");
    ASSERT_TRUE(file.ok);
    simdjson::dom::array cases;
    ASSERT_EQ(file.root["cases"].get(cases), simdjson::SUCCESS);
    EXPECT_GE(check_encode_cases(**tok, cases, entry.path().filename().string()), 100u);
    ASSERT_EQ(file.root["special_cases"].get(cases), simdjson::SUCCESS);
    for (auto c : cases) {
      const std::string text = string_of(c, "text");
      EXPECT_EQ((*tok)->encode(text, true), ids_of(c["ids"].value_unsafe())) << text;
    }
    ++variants;
  }
  EXPECT_EQ(variants, 5u);
}

TEST(tokenizer_api, lookups_follow_added_tokens_then_vocab) {
  const tokenizer& qwen = get("qwen3");
  EXPECT_EQ(qwen.token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(qwen.token_to_id("<tool_call>"), 151657);
  EXPECT_EQ(qwen.token_to_id("Hello"), 9707);
  EXPECT_EQ(qwen.token_to_id("no such token here"), std::nullopt);
  EXPECT_EQ(qwen.id_to_token(151644), "<|im_start|>");
  EXPECT_EQ(qwen.id_to_token(9707), "Hello");
  EXPECT_EQ(qwen.id_to_token(220), "\xC4\xA0");  // "Ġ"
  EXPECT_EQ(qwen.id_to_token(-1), "");
  EXPECT_EQ(qwen.id_to_token(10'000'000), "");
  EXPECT_TRUE(qwen.is_special(151644));
  EXPECT_FALSE(qwen.is_special(151657));  // <tool_call> is added but not special
  EXPECT_FALSE(qwen.is_special(9707));
  EXPECT_FALSE(qwen.is_special(-3));
}

TEST(tokenizer_api, vocab_size_counts_added_tokens_once) {
  EXPECT_EQ(get("qwen3").vocab_size(), 151669);
  EXPECT_EQ(get("llama3_1").vocab_size(), 128256);
  EXPECT_EQ(get("llama2").vocab_size(), 32000);
  EXPECT_EQ(get("deepseek_v3").vocab_size(), 128815);
}

TEST(tokenizer_api, add_special_tokens_follows_the_post_processor) {
  const std::vector<int32_t> hello = {22557, 28725, 1526, 28808};  // "Hello, world!" (golden)
  std::vector<int32_t> with_bos = {1};
  with_bos.insert(with_bos.end(), hello.begin(), hello.end());
  EXPECT_EQ(get("llama2").encode("Hello, world!", true), with_bos);
  EXPECT_EQ(get("llama3_1").encode("Hello, world!", true),
            (std::vector<int32_t>{128000, 9906, 11, 1917, 0}));
  EXPECT_EQ(get("qwen3").encode("Hello, world!", true), (std::vector<int32_t>{9707, 11, 1879, 0}));
  // DeepSeek-V3's post-processor is ByteLevel alone: no BOS from encode.
  EXPECT_EQ(get("deepseek_v3").encode("Hello, world!", true),
            (std::vector<int32_t>{19923, 14, 2058, 3}));
}

TEST(tokenizer_api, skip_special_tokens_drops_only_special_ids) {
  const tokenizer& qwen = get("qwen3");
  const std::vector<int32_t> ids = {151644, 872, 198, 6023, 151645, 151657};
  EXPECT_EQ(qwen.decode(ids, false), "<|im_start|>user\nhi<|im_end|><tool_call>");
  EXPECT_EQ(qwen.decode(ids, true), "user\nhi<tool_call>");
  EXPECT_EQ(qwen.decode({9707, 99'999'999, -5}, false), "Hello");  // out of range: skipped
}

TEST(tokenizer_api, partial_utf8_decodes_like_tokenizers) {
  const tokenizer& qwen = get("qwen3");  // byte-level: from_utf8_lossy
  EXPECT_EQ(qwen.decode({172, 253, 246}, false), "\xEF\xBF\xBD");
  EXPECT_EQ(qwen.decode({172, 253, 246, 222}, false), "\xF0\x9F\x98\x80");
  EXPECT_EQ(qwen.decode({222, 172}, false), "\xEF\xBF\xBD\xEF\xBF\xBD");
  const tokenizer& llama2 = get("llama2");  // ByteFallback: one U+FFFD per byte
  EXPECT_EQ(llama2.decode({243, 162, 155}, false), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(llama2.decode({*llama2.token_to_id("\xE2\x96\x81Hello"), 243, 162, 155, 1, 2}, true),
            "Hello\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(tokenizer_api, invalid_utf8_input_is_repaired_before_encoding) {
  const tokenizer& qwen = get("qwen3");
  EXPECT_EQ(qwen.encode("a\xFF"
                        "b\xF0\x9F",
                        false),
            qwen.encode("a\xEF\xBF\xBD"
                        "b\xEF\xBF\xBD",
                        false));
}

TEST(tokenizer_api, concurrent_encodes_agree_with_a_single_thread) {
  // Per-thread caches and regex state: threads sharing one tokenizer (and
  // two tokenizers sharing threads) must give the single-threaded ids.
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) {
    texts.push_back("request " + std::to_string(i) + ": The quick brown fox " +
                    std::string(static_cast<size_t>(i % 7), ' ') + "用一句话介绍 vLLM。<|im_end|>");
  }
  const tokenizer& qwen = get("qwen3");
  const tokenizer& llama = get("llama2");
  std::vector<std::vector<int32_t>> expected_qwen, expected_llama;
  for (const std::string& t : texts) {
    expected_qwen.push_back(qwen.encode(t, false));
    expected_llama.push_back(llama.encode(t, true));
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = w; i < texts.size(); i += 1 + w) {
          mismatches[w] += qwen.encode(texts[i], false) != expected_qwen[i];
          mismatches[w] += llama.encode(texts[i], true) != expected_llama[i];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(tokenizer_api, settings_from_tokenizer_config) {
  EXPECT_EQ(get("qwen3").bos_token(), "");
  EXPECT_EQ(get("qwen3").eos_token(), "<|im_end|>");
  EXPECT_EQ(get("qwen3").eos_token_ids(), std::vector<int32_t>{151645});
  EXPECT_EQ(get("qwen3").special_tokens_map(),
            (std::vector<std::pair<std::string, std::string>>{{"eos_token", "<|im_end|>"},
                                                              {"pad_token", "<|endoftext|>"}}));
  EXPECT_EQ(get("llama3_1").bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(get("llama3_1").eos_token_ids(), std::vector<int32_t>{128009});
  EXPECT_EQ(get("llama2").eos_token_ids(), std::vector<int32_t>{2});
  // DeepSeek-V3 writes its special tokens as AddedToken objects.
  EXPECT_EQ(get("deepseek_v3").bos_token(),
            "<\xEF\xBD\x9C"
            "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>");
  EXPECT_EQ(get("deepseek_v3").eos_token_ids(), std::vector<int32_t>{1});
  EXPECT_NE(get("qwen3").chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_FALSE(get("llama3_1").chat_template().empty());
  EXPECT_EQ(get("llama2").chat_template(), "");
}

TEST(tokenizer_api, generation_config_and_template_list) {
  testing::temp_dir dir("tok");
  dir.write("tokenizer.json", tiny_tokenizer_json(""));
  dir.write(
      "tokenizer_config.json",
      R"({"eos_token":{"__type":"AddedToken","content":"<eos>"},"model_max_length":)"
      R"(1000000000000000019884624838656,"chat_template":[{"name":"tool_use","template":"T"},)"
      R"({"name":"default","template":"D"}]})");
  dir.write("generation_config.json", R"({"eos_token_id":[7,3,9]})");
  auto tok = tokenizer::load(dir.path());
  ASSERT_TRUE(tok.ok()) << tok.error_message();
  EXPECT_EQ((*tok)->eos_token_ids(), (std::vector<int32_t>{3, 7, 9}));
  EXPECT_EQ((*tok)->chat_template(), "D");
  EXPECT_EQ((*tok)->encode("aab<eos>", false), (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ((*tok)->decode({0, 2, 3}, true), "a ab");  // no decoder: tokens joined by spaces
}

TEST(tokenizer_load, errors_name_the_file_and_the_unsupported_part) {
  EXPECT_EQ(load_error("/nonexistent/model"), "cannot read '/nonexistent/model/tokenizer.json'");
  testing::temp_dir dir("tok");
  const auto expect_error = [&](const std::string& json, const std::string& message) {
    dir.write("tokenizer.json", json);
    EXPECT_EQ(load_error(dir.path()), message);
  };
  expect_error(R"({"model":{"type":"Unigram","vocab":[]}})",
               "tokenizer.json: unsupported model 'Unigram' (supported: BPE)");
  expect_error(tiny_tokenizer_json(R"("pre_tokenizer":{"type":"Whitespace"},)"),
               "tokenizer.json: unsupported pre_tokenizer 'Whitespace' (supported: Split, "
               "ByteLevel, Sequence, Metaspace)");
  expect_error(tiny_tokenizer_json(R"("normalizer":{"type":"Lowercase"},)"),
               "tokenizer.json: unsupported normalizer 'Lowercase' (supported: NFC, NFD, NFKC, "
               "NFKD, Sequence, Prepend, Replace, Strip)");
  expect_error(tiny_tokenizer_json(R"("decoder":{"type":"WordPiece"},)"),
               "tokenizer.json: unsupported decoder 'WordPiece' (supported: ByteLevel, Metaspace, "
               "Replace, ByteFallback, Fuse, Strip, Sequence)");
  expect_error(tiny_tokenizer_json(R"("post_processor":{"type":"BertProcessing"},)"),
               "tokenizer.json: unsupported post_processor 'BertProcessing' (supported: "
               "TemplateProcessing, ByteLevel, Sequence)");
  expect_error(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a b"]}})",
               "tokenizer.json: model: merge token 'b' is not in the vocab");
  dir.write("tokenizer.json", "{\"model\": [1, 2");
  EXPECT_EQ(load_error(dir.path()).rfind("tokenizer.json: invalid JSON (", 0), 0u);
}

}  // namespace
}  // namespace troupe
