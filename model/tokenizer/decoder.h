// decoder: tokenizers' decoders, turning token strings back into text:
// ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence
// (each step's decode_chain runs over the whole token list in order, and
// the results are joined). Immutable after parse; decode() is thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/tokenizer/json_util.h"
#include "model/tokenizer/regex.h"

namespace troupe::tok {

class decoder {
 public:
  // The "decoder" member of tokenizer.json (REQUIRES: not null).
  static result<std::unique_ptr<decoder>> parse(json spec);

  // decode_chain of every step, joined.
  std::string decode(std::vector<std::string> tokens) const;
  // One token's bytes in the middle of a text: the per-token steps only
  // (byte-level and <0xNN> tokens give raw bytes, even partial UTF-8;
  // Replace; Metaspace's replacement becomes a space), not Strip or Fuse.
  std::string token_bytes(std::string token) const;

 private:
  enum class kind { byte_level, metaspace, replace, byte_fallback, fuse, strip };
  struct step {
    kind type = kind::fuse;
    std::string literal;           // replace: String pattern; metaspace: replacement
    std::optional<regex> pattern;  // replace: Regex pattern
    std::string content;           // replace: replacement; strip: the character
    bool prepend = true;           // metaspace: prepend_scheme != never
    size_t strip_start = 0, strip_stop = 0;
  };
  status add(json spec);
  static void byte_level(std::vector<std::string>& tokens);
  static void byte_fallback(std::vector<std::string>& tokens);
  static void replace(const step& s, std::vector<std::string>& tokens);
  static void strip(const step& s, std::vector<std::string>& tokens);
  static void metaspace(const step& s, std::vector<std::string>& tokens);

  std::vector<step> steps_;
};

}  // namespace troupe::tok
