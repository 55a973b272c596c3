// regex: Oniguruma-compatible regular expressions (what `tokenizers` uses for
// Split, Replace and the ByteLevel pattern) run on PCRE2 with JIT. The
// pattern is translated once at compile time where the engines differ for
// UTF-8 text: \s and \S follow Unicode White_Space (Oniguruma includes U+0085,
// PCRE2's UCP \s does not) and \h is a hex digit as in Oniguruma.
// A compiled regex is immutable; matching is thread-safe (match data and JIT
// stack are per thread). Subjects must be valid UTF-8.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace troupe::tok {

// A piece of a subject: bytes [start, end), and whether the pattern matched it.
struct match_span {
  size_t start = 0;
  size_t end = 0;
  bool is_match = false;
};

class regex {
 public:
  // `literal`: the pattern is a plain string (tokenizers' String patterns).
  static result<regex> compile(std::string_view pattern, bool literal);

  // The leftmost match at or after byte `start`; false when there is none.
  bool find(std::string_view subject, size_t start, size_t& match_start, size_t& match_end) const;

  // tokenizers' Pattern::find_matches: consecutive spans covering the whole
  // subject, matches and the gaps between them; one non-match span (0,0)
  // for an empty subject.
  void find_matches(std::string_view subject, std::vector<match_span>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct code_deleter {
    void operator()(void* code) const;
  };
  std::string pattern_;
  std::shared_ptr<void> code_;  // pcre2_code_8
};

// The PCRE2 form of an Oniguruma pattern (exposed for tests).
std::string translate_oniguruma_pattern(std::string_view pattern);

// tokenizers' Replace (normalizer and decoder alike): every occurrence of
// `literal` (when not empty) or every match of `pattern` in text becomes
// `content`. false (text untouched) when there is no pattern.
bool replace_pattern(const std::string& literal, const std::optional<regex>& pattern,
                     const std::string& content, std::string& text);

}  // namespace troupe::tok
