// normalizer: tokenizers' normalizers that these models use, flattened from
// any Sequence nesting: NFC/NFD/NFKC/NFKD, Prepend, Replace (String or Regex
// pattern) and Strip. Applied to each piece of text between added tokens.
// Immutable after parse; normalize() is const and thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/tokenizer/json_util.h"
#include "model/tokenizer/regex.h"
#include "model/tokenizer/unicode_normalize.h"

namespace troupe::tok {

class normalizer {
 public:
  // The "normalizer" member of tokenizer.json (REQUIRES: not null).
  static result<std::unique_ptr<normalizer>> parse(json spec);

  // Normalizes valid UTF-8 in place.
  void normalize(std::string& text) const;
  bool empty() const { return steps_.empty(); }

 private:
  enum class kind { unicode, prepend, replace, strip };
  struct step {
    kind type = kind::unicode;
    unicode_form form = unicode_form::nfc;
    std::string content;           // prepend: the prefix; replace: the replacement
    std::string literal;           // replace: a String pattern
    std::optional<regex> pattern;  // replace: a Regex pattern
    bool strip_left = false, strip_right = false;
  };
  status add(json spec);
  static void replace(const step& s, std::string& text);

  std::vector<step> steps_;
};

// Removes leading and/or trailing Unicode White_Space.
void strip_white_space(std::string& text, bool left, bool right);

}  // namespace troupe::tok
