// libFuzzer target for structured outputs' front ends and matcher
// (grammar/): fuzzed text compiled as a regex, an EBNF grammar or a JSON
// Schema, then, where it compiles, walked over a small vocabulary.
// Input: the first byte picks the front end (byte % 4: regex, EBNF, JSON
// Schema with JSON whitespace, JSON Schema compact); the rest is the text.
// Invariants (a crash, an escaping exception or a sanitizer report aborts):
// - compile_constraint returns a grammar or an error message, never more;
// - on a walk of up to 24 tokens (each step the first allowed token after a
//   position picked from the input's hash), every token's mask bit equals
//   whether accept() takes it.
// Built by tests/fuzz/CMakeLists.txt; seeds in tests/fuzz/corpus_grammar/.
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/compiled.h"
#include "grammar/constraint.h"
#include "grammar/constraint_cache.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"
#include "tests/fuzz/fuzz_support.h"

namespace troupe {

const char* const fuzz_target_name = "fuzz_grammar";

namespace {

std::shared_ptr<const grammar::token_vocabulary> small_vocab() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  for (const char* s : {"{\"", "\":", "\",\"", "\"}", "true", "null", "12", "-1", "ab", "abc", "[]", "\xce\xb1",
                        "\xe2\x82", " \n", "\\u00", "0.5e", "},{", "\"a\"", "a\"", "))"}) {
    bytes.emplace_back(s);
  }
  bytes.emplace_back();  // a special token
  return std::make_shared<const grammar::token_vocabulary>(std::move(bytes), static_cast<int64_t>(bytes.size()) + 3);
}

void run(const uint8_t* data, size_t size) {
  if (size == 0) return;
  output_constraint c;
  switch (data[0] % 4) {
    case 0: c.kind = output_constraint::regex; break;
    case 1: c.kind = output_constraint::ebnf; break;
    default: c.kind = output_constraint::json_schema; break;
  }
  c.any_whitespace = data[0] % 4 != 3;
  c.text.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  static const auto vocab = small_vocab();
  auto g = grammar::token_grammar_for(c, vocab);
  if (!g) {
    require(!g.error_message().empty(), "an error has a message");
    return;
  }
  grammar::matcher m(*g);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->mask_words()));
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ULL;
  for (int step = 0; step < 24; ++step) {
    m.fill_mask(mask.data());
    int32_t chosen = -1;
    const auto start = static_cast<int64_t>(h % static_cast<uint64_t>(vocab->size()));
    for (int64_t k = 0; k < vocab->size(); ++k) {
      const int64_t t = (start + k) % vocab->size();
      grammar::matcher copy = m;
      const bool takes = copy.accept(static_cast<int32_t>(t));
      require(takes == (((mask[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u) != 0), "mask bit == accept");
      if (takes && chosen < 0) chosen = static_cast<int32_t>(t);
    }
    if (chosen < 0) {
      require(m.can_end(), "a matcher with no token to take can end");
      return;
    }
    require(m.accept(chosen), "the chosen token is taken");
    h = h * 6364136223846793005ULL + 1442695040888963407ULL;
  }
}

}  // namespace
}  // namespace troupe

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  troupe::guarded([&] { troupe::run(data, size); });
  return 0;
}
