// hf_tokenizer: the tokenizer implementation behind tokenizer::load. Encode
// follows tokenizers' TokenizerImpl::encode: added tokens are cut out of the
// raw text; each remaining segment is normalized, its normalized added
// tokens cut out, pre-tokenized into pieces and each piece BPE-encoded; the
// post-processor adds special tokens on request. Decode maps ids to token
// strings (added tokens first), drops special ones on request and runs the
// decoder. Immutable after load; every method is const and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer/added_vocabulary.h"
#include "model/tokenizer/bpe_model.h"
#include "model/tokenizer/decoder.h"
#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/post_processor.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/tokenizer.h"

namespace troupe::tok {

// What tokenizer_config.json and generation_config.json contribute.
struct tokenizer_settings {
  std::string bos_token;
  std::string eos_token;
  std::vector<std::pair<std::string, std::string>> special_tokens_map;
  std::vector<int64_t> generation_eos_ids;
  std::string chat_template;
};

struct tokenizer_parts {
  std::unique_ptr<normalizer> norm;  // null when tokenizer.json has none
  std::unique_ptr<pre_tokenizer> pre;
  std::unique_ptr<bpe_model> model;
  std::unique_ptr<decoder> dec;           // null when none
  std::unique_ptr<post_processor> post;   // null when none
  std::vector<added_token> added_tokens;  // ids not yet assigned
};

class hf_tokenizer final : public tokenizer {
 public:
  hf_tokenizer(tokenizer_parts parts, tokenizer_settings settings);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  std::string token_bytes(int32_t id) const override;
  bool is_special(int32_t id) const override;
  const std::string& bos_token() const override { return settings_.bos_token; }
  const std::string& eos_token() const override { return settings_.eos_token; }
  const std::vector<std::pair<std::string, std::string>>& special_tokens_map() const override {
    return settings_.special_tokens_map;
  }
  const std::vector<int32_t>& eos_token_ids() const override { return eos_token_ids_; }
  const std::string& chat_template() const override { return settings_.chat_template; }

 private:
  void register_added_tokens(std::vector<added_token> tokens);
  void encode_segment(std::string_view text, bool at_origin, std::vector<int32_t>& ids) const;
  // The token string decode() uses for `id`, or nullptr.
  const std::string* token_string(int32_t id) const;

  tokenizer_parts parts_;
  tokenizer_settings settings_;
  added_vocabulary added_;
  string_id_map added_by_content_;
  std::vector<int32_t> added_index_by_id_;         // index into added_.tokens(), or -1
  std::vector<std::string> added_decode_strings_;  // by added index (normalized content)
  std::vector<bool> skip_when_special_;            // by id: its string is a special token's
  std::vector<int32_t> eos_token_ids_;
  int64_t vocab_size_ = 0;
};

}  // namespace troupe::tok
