// libFuzzer target for the tokenizer: every fixture tokenizer
// (TROUPE_TEST_DATA/tokenizers/*/tokenizer.json, in directory-name order,
// loaded once at start-up) encodes and decodes fuzzed bytes.
// Input: the first byte picks the tokenizer ((byte & 0x0F) % count),
// add_special_tokens (byte & 0x10) and skip_special_tokens (byte & 0x20), so
// seeds start with '@'..'C', 'P'..'S', '`'..'c' or 'p'..'s'; the rest is text.
// Invariants (a crash, an escaping exception or a sanitizer report aborts):
// - encode(text, add_special_tokens): every id in [0, vocab_size); with
//   add_special_tokens the ids of encode(text, false) appear as one run and
//   every other id is_special (TemplateProcessing / ByteLevel post-processors).
// - decode of those ids, and of the rest read as ids (3 bytes each, mapped to
//   [-2, vocab_size + 2) so out-of-range ids are skipped) is valid UTF-8:
//   tokenizers' decoders end in String::from_utf8_lossy or ByteFallback's
//   U+FFFD, and tokenizer.h promises the same.
// - decode(encode(text, false), false) == text for valid UTF-8 text, only
//   where that holds in Hugging Face tokenizers too (the class is read from
//   tokenizer.json and printed at start-up):
//     byte-level: ByteLevel pre-tokenizer (no prefix space) and decoder, no
//       normalizer: any text (deepseek_v3, llama3_1; each of their added
//       tokens decodes to its content);
//     byte-level-nfc: the same with an NFC normalizer: text already in NFC
//       by utf8proc (qwen3);
//     sentencepiece: Llama-2's Prepend("▁") + Replace(" ", "▁") normalizers
//       and Replace/ByteFallback/Fuse/Strip decoder: text without "▁"
//       (decoded as a space), "<0x" or an added token's content (each split
//       between added tokens gets its own "▁") (llama2);
//     anything else (or lstrip/rstrip added tokens): no round trip check.
// Built by tests/fuzz/CMakeLists.txt; seeds in tests/fuzz/corpus_tokenizer/.
#include <simdjson.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

namespace troupe {

const char* const fuzz_target_name = "fuzz_tokenizer";

namespace {


enum class round_trip { none, byte_level, byte_level_nfc, sentencepiece };
const char* const kRoundTripNames[] = {"none", "byte-level", "byte-level-nfc", "sentencepiece"};

struct fixture {
  std::string name;
  std::unique_ptr<tokenizer> tok;
  round_trip check = round_trip::none;
  std::vector<std::string> added;  // added tokens' contents
};

// Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

// Already in NFC, by utf8proc (what the tokenizer's NFC normalizer uses).
bool is_nfc(std::string_view s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
      static_cast<utf8proc_ssize_t>(s.size()), &out, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  const bool same = n >= 0 && std::string_view(reinterpret_cast<char*>(out), n) == s;
  std::free(out);
  return same;
}

// The round trip class, from the exact (minified) normalizer, pre-tokenizer
// and decoder specs of tokenizer.json, so only known configurations qualify.
void classify(fixture& f, const std::filesystem::path& json_path) {
  simdjson::dom::parser parser;
  simdjson::padded_string json;
  simdjson::dom::element root, norm, pre, dec;
  simdjson::dom::array added;
  if (simdjson::padded_string::load(json_path.string()).get(json) || parser.parse(json).get(root) ||
      root["normalizer"].get(norm) || root["pre_tokenizer"].get(pre) || root["decoder"].get(dec) ||
      root["added_tokens"].get(added)) {
    return;  // none
  }
  for (simdjson::dom::element t : added) {
    std::string_view content;
    bool lstrip = false, rstrip = false;
    if (!t["content"].get(content)) f.added.emplace_back(content);
    if ((!t["lstrip"].get(lstrip) && lstrip) || (!t["rstrip"].get(rstrip) && rstrip)) return;
  }
  const std::string n = simdjson::minify(norm), p = simdjson::minify(pre), d = simdjson::minify(dec);
  const bool byte_level = p.find(R"({"type":"ByteLevel","add_prefix_space":false,)") != p.npos &&
                          d.rfind(R"({"type":"ByteLevel",)", 0) == 0;
  if (byte_level && (n == "null" || n == R"({"type":"Sequence","normalizers":[]})")) {
    f.check = round_trip::byte_level;
  } else if (byte_level && n == R"({"type":"NFC"})") {
    f.check = round_trip::byte_level_nfc;
  } else if (n == R"({"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},)"
                  R"({"type":"Replace","pattern":{"String":" "},"content":"▁"}]})" &&
             d == R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},)"
                  R"("content":" "},{"type":"ByteFallback"},{"type":"Fuse"},)"
                  R"({"type":"Strip","content":" ","start":1,"stop":0}]})") {
    f.check = round_trip::sentencepiece;
  }
}

std::vector<fixture> load_fixtures() {
  const std::filesystem::path root = std::filesystem::path(TROUPE_TEST_DATA) / "tokenizers";
  std::vector<std::filesystem::path> dirs;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (std::filesystem::exists(entry.path() / "tokenizer.json")) dirs.push_back(entry.path());
  }
  std::sort(dirs.begin(), dirs.end());  // a stable tokenizer order for reproducers
  std::vector<fixture> out;
  for (const auto& dir : dirs) {
    fixture f;
    f.name = dir.filename().string();
    auto tok = tokenizer::load(dir);
    if (!tok) {
      std::fprintf(stderr, "fuzz_tokenizer: %s: %s\n", f.name.c_str(), tok.error_message().c_str());
      std::abort();
    }
    f.tok = std::move(tok.value());
    classify(f, dir / "tokenizer.json");
    std::fprintf(stderr, "fuzz_tokenizer: %s: vocab %lld, round trip %s\n", f.name.c_str(),
                 static_cast<long long>(f.tok->vocab_size()), kRoundTripNames[int(f.check)]);
    out.push_back(std::move(f));
  }
  require(!out.empty(), "fixture tokenizers found");
  return out;
}

const std::vector<fixture>& fixtures() {
  static const std::vector<fixture> all = load_fixtures();
  return all;
}

bool round_trips(const fixture& f, std::string_view text) {
  if (f.check == round_trip::none || !valid_utf8(text)) return false;
  if (f.check == round_trip::byte_level_nfc) return is_nfc(text);
  if (f.check != round_trip::sentencepiece) return true;
  if (text.find("\u2581") != text.npos || text.find("<0x") != text.npos) return false;
  return std::none_of(f.added.begin(), f.added.end(),
                      [&](const std::string& a) { return text.find(a) != text.npos; });
}

void run(const fixture& f, std::string_view text, bool add_special, bool skip_special) {
  const tokenizer& tok = *f.tok;
  const int64_t vocab = tok.vocab_size();
  const std::vector<int32_t> ids = tok.encode(text, add_special);
  for (const int32_t id : ids) require(id >= 0 && id < vocab, "encoded ids are in the vocabulary");
  const std::vector<int32_t> plain = add_special ? tok.encode(text, false) : ids;
  const auto run_at = std::search(ids.begin(), ids.end(), plain.begin(), plain.end());
  require(run_at != ids.end() || plain.empty(), "add_special_tokens keeps the text's ids");
  for (auto it = ids.begin(); it != ids.end(); ++it) {
    const bool in_run = it >= run_at && it < run_at + static_cast<ptrdiff_t>(plain.size());
    require(in_run || tok.is_special(*it), "add_special_tokens adds special tokens only");
  }
  require(valid_utf8(tok.decode(ids, skip_special)), "decode gives valid UTF-8");
  if (round_trips(f, text)) require(tok.decode(plain, false) == text, "decode(encode(text)) == text");

  std::vector<int32_t> raw;
  for (size_t i = 0; i + 3 <= text.size(); i += 3) {
    const uint32_t v = static_cast<uint8_t>(text[i]) | static_cast<uint8_t>(text[i + 1]) << 8 |
                       static_cast<uint32_t>(static_cast<uint8_t>(text[i + 2])) << 16;
    raw.push_back(static_cast<int32_t>(v % static_cast<uint32_t>(vocab + 4)) - 2);
  }
  require(valid_utf8(tok.decode(raw, skip_special)), "decode of any ids gives valid UTF-8");
}

}  // namespace
}  // namespace troupe

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  troupe::fixtures();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& all = troupe::fixtures();
  const troupe::fixture& f = all[(data[0] & 0x0Fu) % all.size()];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  troupe::guarded([&] { troupe::run(f, text, (data[0] & 0x10u) != 0, (data[0] & 0x20u) != 0); });
  return 0;
}
