#include "grammar/vocabulary.h"

#include <algorithm>

#include "common/check.h"
#include "model/tokenizer/tokenizer.h"

namespace troupe::grammar {

token_vocabulary::token_vocabulary(std::vector<std::string> bytes, int64_t vocab_size)
    : bytes_(std::move(bytes)), vocab_size_(vocab_size) {
  TROUPE_CHECK(static_cast<int64_t>(bytes_.size()) <= vocab_size_);
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (!bytes_[id].empty()) sorted_.push_back(static_cast<int32_t>(id));
  }
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    const int c = bytes_[static_cast<size_t>(a)].compare(bytes_[static_cast<size_t>(b)]);
    return c != 0 ? c < 0 : a < b;
  });
  sorted_offset_.push_back(0);
  for (int32_t id : sorted_) {
    sorted_data_ += bytes_[static_cast<size_t>(id)];
    sorted_offset_.push_back(sorted_data_.size());
  }
}

std::shared_ptr<const token_vocabulary> token_vocabulary::of(const tokenizer& tok, int64_t vocab_size) {
  const int64_t n = std::min(tok.vocab_size(), vocab_size);
  std::vector<std::string> bytes(static_cast<size_t>(n));
  for (int64_t id = 0; id < n; ++id) bytes[static_cast<size_t>(id)] = tok.token_bytes(static_cast<int32_t>(id));
  return std::make_shared<const token_vocabulary>(std::move(bytes), vocab_size);
}

}  // namespace troupe::grammar
