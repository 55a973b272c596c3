// Helpers shared by the tokenizer tests: cached tokenizers of the fixtures
// and readers for the JSON case files.
#pragma once

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "model/tokenizer/tokenizer.h"

namespace troupe::testing {

inline const std::filesystem::path kTokenizers =
    std::filesystem::path(TROUPE_TEST_DATA) / "tokenizers";
inline const std::filesystem::path kAdversarial =
    std::filesystem::path(TROUPE_TEST_DATA) / ".." / "model" / "tokenizer" / "data";

inline const tokenizer& get(const std::string& name) {
  static std::map<std::string, std::unique_ptr<tokenizer>> loaded;
  auto& slot = loaded[name];
  if (!slot) {
    auto t = tokenizer::load(kTokenizers / name);
    if (!t.ok()) {
      ADD_FAILURE() << name << ": " << t.error_message();
      std::abort();
    }
    slot = std::move(t).value();
  }
  return *slot;
}

// A parsed JSON file kept alive for the test that reads it.
struct json_file {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  bool ok = false;
  explicit json_file(const std::filesystem::path& path) {
    auto text = read_text_file(path);
    if (!text.ok()) return;
    ok = parser.parse(simdjson::padded_string(*text)).get(root) == simdjson::SUCCESS;
  }
};

inline std::vector<int32_t> ids_of(simdjson::dom::element list) {
  std::vector<int32_t> ids;
  simdjson::dom::array array;
  EXPECT_EQ(list.get(array), simdjson::SUCCESS);
  for (auto v : array) {
    int64_t id = 0;
    EXPECT_EQ(v.get(id), simdjson::SUCCESS);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

inline std::string string_of(simdjson::dom::element e, const char* key) {
  std::string_view s;
  EXPECT_EQ(e[key].get(s), simdjson::SUCCESS) << key;
  return std::string(s);
}

// Checks every {"text", "ids", "decoded"?, "decoded_skip"?} case of `list`;
// returns how many there were.
inline size_t check_encode_cases(const tokenizer& tok, simdjson::dom::array list,
                                 const std::string& what) {
  size_t n = 0;
  for (auto c : list) {
    const std::string text = string_of(c, "text");
    const std::vector<int32_t> expected = ids_of(c["ids"].value_unsafe());
    const std::vector<int32_t> ids = tok.encode(text, false);
    EXPECT_EQ(ids, expected) << what << " text: '" << text << "'";
    std::string_view decoded;
    if (c["decoded"].get(decoded) == simdjson::SUCCESS) {
      EXPECT_EQ(tok.decode(expected, false), decoded) << what << " decode of '" << text << "'";
    }
    if (c["decoded_skip"].get(decoded) == simdjson::SUCCESS) {
      EXPECT_EQ(tok.decode(expected, true), decoded) << what << " skip-decode of '" << text << "'";
    }
    ++n;
  }
  return n;
}

}  // namespace troupe::testing
