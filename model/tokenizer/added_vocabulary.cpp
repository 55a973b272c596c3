#include "model/tokenizer/added_vocabulary.h"

#include <algorithm>

#include "model/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

// Start of the trailing run of white space of text[0, end) (Rust's \s*$).
size_t trailing_space_start(std::string_view text, size_t end) {
  while (end > 0) {
    const char32_t cp = utf8_last(text, end);
    if (!is_white_space(cp)) break;
    end -= cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  }
  return end;
}

// End of the leading run of white space of text[start, ...) (Rust's ^\s*).
size_t leading_space_end(std::string_view text, size_t start) {
  char32_t cp = 0;
  while (start < text.size()) {
    const size_t n = utf8_decode(text, start, cp);
    if (!is_white_space(cp)) break;
    start += n;
  }
  return start;
}

bool word_char_before(std::string_view text, size_t pos) {
  return pos > 0 && is_word_char(utf8_last(text, pos));
}

bool word_char_at(std::string_view text, size_t pos) {
  if (pos >= text.size()) return false;
  char32_t cp = 0;
  utf8_decode(text, pos, cp);
  return is_word_char(cp);
}

}  // namespace

void token_trie::insert(std::string_view content, int32_t token_index) {
  if (content.empty()) return;
  first_byte_[static_cast<unsigned char>(content[0])] = true;
  int32_t at = 0;
  for (const char c : content) {
    const auto b = static_cast<unsigned char>(c);
    auto& children = nodes_[at].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::pair{b, INT32_MIN});
    if (it != children.end() && it->first == b) {
      at = it->second;
      continue;
    }
    const auto next = static_cast<int32_t>(nodes_.size());
    children.insert(it, {b, next});
    nodes_.emplace_back();  // invalidates `children`, which is not used again
    at = next;
  }
  nodes_[at].token_index = token_index;
}

int32_t token_trie::longest_at(std::string_view text, size_t pos, size_t& length) const {
  int32_t found = -1;
  int32_t at = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    const auto& children = nodes_[at].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::pair{b, INT32_MIN});
    if (it == children.end() || it->first != b) break;
    at = it->second;
    if (nodes_[at].token_index >= 0) {
      found = nodes_[at].token_index;
      length = i + 1 - pos;
    }
  }
  return found;
}

void added_vocabulary::build(std::vector<added_token> tokens,
                             const std::vector<std::string>& normalized_contents) {
  tokens_ = std::move(tokens);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const auto index = static_cast<int32_t>(i);
    if (tokens_[i].normalized) {
      normalized_trie_.insert(normalized_contents[i], index);
    } else {
      raw_trie_.insert(tokens_[i].content, index);
    }
  }
}

void added_vocabulary::split(std::string_view text, bool normalized_set,
                             std::vector<text_segment>& out) const {
  out.clear();
  const token_trie& trie = normalized_set ? normalized_trie_ : raw_trie_;
  size_t start_offset = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t length = 0;
    const int32_t index = trie.may_start(static_cast<unsigned char>(text[pos]))
                              ? trie.longest_at(text, pos, length)
                              : -1;
    if (index < 0) {
      ++pos;
      continue;
    }
    const added_token& token = tokens_[index];
    size_t start = pos, stop = pos + length;
    pos = stop;  // the matcher resumes after the match even when it is rejected
    if (token.single_word && (word_char_before(text, start) || word_char_at(text, stop))) continue;
    if (token.lstrip) start = std::max(trailing_space_start(text, start), start_offset);
    if (token.rstrip) stop = leading_space_end(text, stop);
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace troupe::tok
