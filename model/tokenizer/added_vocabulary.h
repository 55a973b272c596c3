// added_vocabulary: tokenizers' AddedVocabulary. Added tokens are cut out of
// the text before the model sees it: those with normalized=false are
// matched on the raw input, those with normalized=true on each normalized
// piece. Matching is leftmost-longest (as tokenizers' Aho-Corasick with
// MatchKind::LeftmostLongest), then single_word/lstrip/rstrip apply.
// Special tokens are always matched (split_special_tokens is off).
// Immutable after build; find_matches() is const and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::tok {

struct added_token {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// A span of text: an added token (id >= 0) or text for the model (id -1).
struct text_segment {
  size_t start = 0;
  size_t end = 0;
  int32_t id = -1;
};

// A byte trie over the contents of one matching set.
class token_trie {
 public:
  void insert(std::string_view content, int32_t token_index);
  // The longest content that starts at text[pos]: its token index and
  // length, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t& length) const;
  bool empty() const { return nodes_.size() <= 1; }
  bool may_start(unsigned char b) const { return first_byte_[b]; }

 private:
  struct node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token_index = -1;
  };
  std::vector<node> nodes_ = std::vector<node>(1);
  bool first_byte_[256] = {};
};

class added_vocabulary {
 public:
  // `tokens` in tokenizer.json order; `normalized_contents[i]` is what
  // tokens[i] looks like after the normalizer (only used when normalized).
  void build(std::vector<added_token> tokens, const std::vector<std::string>& normalized_contents);

  // find_matches of tokenizers for the raw (normalized=false) or the
  // normalized (normalized=true) set: segments covering `text`, in order.
  void split(std::string_view text, bool normalized_set, std::vector<text_segment>& out) const;
  bool has_normalized_set() const { return !normalized_trie_.empty(); }
  const std::vector<added_token>& tokens() const { return tokens_; }

 private:
  std::vector<added_token> tokens_;
  token_trie raw_trie_;
  token_trie normalized_trie_;
};

}  // namespace troupe::tok
