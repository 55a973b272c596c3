// token_vocabulary: what each token of a model's vocabulary adds to the
// text, as bytes (tokenizer::token_bytes), sorted so that tokens sharing a
// prefix sit together: the matcher walks them as a trie, and a prefix the
// grammar refuses rules out every token after it that starts the same way.
// Tokens with no bytes (special tokens, ids past the tokenizer's
// vocabulary) are never allowed by a grammar; end-of-sequence tokens are
// the caller's (grammar/matcher.h's fill_mask leaves them out).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {
class tokenizer;
}

namespace troupe::grammar {

class token_vocabulary {
 public:
  // bytes[id] for each id below the tokenizer's size; vocab_size: the
  // model's (the logits' width, at least bytes.size()).
  token_vocabulary(std::vector<std::string> bytes, int64_t vocab_size);
  static std::shared_ptr<const token_vocabulary> of(const tokenizer& tok, int64_t vocab_size);

  int64_t size() const { return vocab_size_; }
  int64_t mask_words() const { return (vocab_size_ + 31) / 32; }
  // Tokens with bytes, in byte order (ties by id): position k's id.
  int32_t num_sorted() const { return static_cast<int32_t>(sorted_.size()); }
  int32_t sorted_id(int32_t k) const { return sorted_[static_cast<size_t>(k)]; }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  // Position k's bytes, from one buffer in sorted order (a walk through
  // the vocabulary reads memory in order).
  std::string_view sorted_bytes(int32_t k) const {
    const auto at = static_cast<size_t>(k);
    return std::string_view(sorted_data_).substr(sorted_offset_[at], sorted_offset_[at + 1] - sorted_offset_[at]);
  }
  // Any id: "" where it has no bytes or is out of range.
  const std::string& bytes_of(int64_t id) const {
    static const std::string none;
    return id >= 0 && id < static_cast<int64_t>(bytes_.size()) ? bytes_[static_cast<size_t>(id)] : none;
  }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> sorted_;
  std::string sorted_data_;
  std::vector<size_t> sorted_offset_;
  int64_t vocab_size_;
};

}  // namespace troupe::grammar
