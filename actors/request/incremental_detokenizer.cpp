#include "actors/request/incremental_detokenizer.h"

#include <algorithm>

namespace troupe {

namespace {

// Prompt tokens kept as decoding context (vLLM uses the same number).
constexpr size_t context_tokens = 5;
constexpr std::string_view replacement_char = "\xEF\xBF\xBD";

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Length of the longest common prefix of a and b that ends on a UTF-8
// character boundary of both.
size_t common_prefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  const size_t limit = std::min(a.size(), b.size());
  while (n < limit && a[n] == b[n]) ++n;
  while (n > 0 && n < a.size() && (static_cast<unsigned char>(a[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

incremental_detokenizer::incremental_detokenizer(const tokenizer& tok,
                                                 const std::vector<int32_t>& prompt_ids,
                                                 bool skip_special_tokens)
    : tok_(tok), skip_special_tokens_(skip_special_tokens) {
  const size_t keep = std::min(prompt_ids.size(), context_tokens);
  ids_.assign(prompt_ids.end() - static_cast<std::ptrdiff_t>(keep), prompt_ids.end());
  prefix_offset_ = 0;
  read_offset_ = ids_.size();
}

std::string incremental_detokenizer::decode_range(size_t begin, size_t end) const {
  return tok_.decode(std::vector<int32_t>(ids_.begin() + static_cast<std::ptrdiff_t>(begin),
                                          ids_.begin() + static_cast<std::ptrdiff_t>(end)),
                     skip_special_tokens_);
}

std::string incremental_detokenizer::take_delta(bool final) {
  const std::string prefix_text = decode_range(prefix_offset_, read_offset_);
  const std::string new_text = decode_range(prefix_offset_, ids_.size());
  if (new_text.size() <= prefix_text.size() && !final) return "";
  // An incomplete UTF-8 sequence at the end decodes to U+FFFD: wait for the
  // next token unless this is the end.
  if (!final && ends_with(new_text, replacement_char)) return "";
  // new_text starts with prefix_text except in degenerate windows (a prompt
  // ending inside a UTF-8 character); never emit half a character then.
  const size_t start = common_prefix(prefix_text, new_text);
  std::string delta = new_text.substr(start);
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  text_ += delta;
  return delta;
}

std::string incremental_detokenizer::append(const std::vector<int32_t>& new_ids) {
  ids_.insert(ids_.end(), new_ids.begin(), new_ids.end());
  return take_delta(false);
}

std::string incremental_detokenizer::flush() {
  if (read_offset_ == ids_.size()) return "";
  return take_delta(true);
}

bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

}  // namespace troupe
