// utf8: the few UTF-8 and Unicode-property helpers the tokenizer needs.
// Decoding assumes valid UTF-8 except in utf8_lossy, which repairs it exactly
// as Rust's String::from_utf8_lossy does (one U+FFFD per maximal subpart).
// Stateless; every function is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::tok {

// Decodes the code point at s[i] of a VALID UTF-8 string and returns its
// length in bytes. REQUIRES: i < s.size().
inline size_t utf8_decode(std::string_view s, size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]) & 0x3Fu; };
  if (b0 < 0xE0) {
    cp = ((b0 & 0x1Fu) << 6) | at(1);
    return 2;
  }
  if (b0 < 0xF0) {
    cp = ((b0 & 0x0Fu) << 12) | (at(1) << 6) | at(2);
    return 3;
  }
  cp = ((b0 & 0x07u) << 18) | (at(1) << 12) | (at(2) << 6) | at(3);
  return 4;
}

// Length of the UTF-8 sequence that starts with lead byte b (1 for
// continuation or invalid bytes, so loops always advance).
inline size_t utf8_len(unsigned char b) {
  if (b < 0xC0) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

// The code point just before byte offset `end` of a valid UTF-8 string.
// REQUIRES: end > 0.
char32_t utf8_last(std::string_view s, size_t end);

void utf8_append(std::string& out, char32_t cp);

// Length of the longest valid UTF-8 prefix of s (s.size() when valid).
size_t utf8_valid_prefix(std::string_view s);
inline bool utf8_valid(std::string_view s) { return utf8_valid_prefix(s) == s.size(); }

// String::from_utf8_lossy: invalid maximal subparts become U+FFFD.
std::string utf8_lossy(std::string_view s);

// Unicode White_Space (what Oniguruma's \s, Rust's char::is_whitespace and
// Rust regex's \s match).
bool is_white_space(char32_t cp);

// Rust regex's Unicode \w: letters, marks, decimal and letter numbers,
// connector punctuation, ZWJ/ZWNJ.
bool is_word_char(char32_t cp);

}  // namespace troupe::tok
