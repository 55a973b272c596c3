// tokenizer: a Hugging Face `tokenizers` tokenizer.json (+ tokenizer_config.json)
// reimplemented to give exactly the same ids: BPE models with a ByteLevel
// pre-tokenizer and regex Split patterns (Qwen2/3, Llama-3, DeepSeek-V3),
// SentencePiece-style BPE with byte fallback (Llama-2: Prepend/Replace
// normalizers, Replace/ByteFallback/Fuse/Strip decoders), NFC normalization,
// added and special tokens (matched before normalization and splitting),
// post-processors (TemplateProcessing, ByteLevel) for add_special_tokens.
//
// Immutable after load; encode/decode are const and thread-safe (they run on
// request threads, never on the scheduler's).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace troupe {

class tokenizer {
 public:
  // Loads DIR/tokenizer.json (required), DIR/tokenizer_config.json and
  // DIR/generation_config.json (optional). Errors name the file and what is
  // unsupported (a model type, normalizer, pre-tokenizer or decoder), listing
  // what is supported.
  static result<std::unique_ptr<tokenizer>> load(const std::filesystem::path& dir);
  virtual ~tokenizer() = default;

  // Exactly `tokenizers`' Tokenizer.encode(text, add_special_tokens).ids.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  // Exactly `tokenizers`' Tokenizer.decode(ids, skip_special_tokens). Invalid
  // UTF-8 from partial byte sequences becomes U+FFFD, as in `tokenizers`.
  // Ids out of range are skipped.
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;

  virtual int64_t vocab_size() const = 0;  // including added tokens
  // The bytes token `id` adds to decoded text inside a sequence (the
  // decoder's per-token steps: byte-level bytes, <0xNN> byte fallback,
  // Replace and Metaspace, but not Strip or a first token's prefix rules),
  // for constrained decoding's token masks; "" for special tokens and ids
  // out of range.
  virtual std::string token_bytes(int32_t id) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(int32_t id) const = 0;  // "" when out of range
  virtual bool is_special(int32_t id) const = 0;

  // From tokenizer_config.json (strings or AddedToken objects): "" when absent.
  virtual const std::string& bos_token() const = 0;
  virtual const std::string& eos_token() const = 0;
  // Every special token of tokenizer_config.json by its key (bos_token,
  // eos_token, unk_token, pad_token, ...), for chat templates.
  virtual const std::vector<std::pair<std::string, std::string>>& special_tokens_map() const = 0;
  // End-of-sequence ids: eos_token's id plus generation_config.json's.
  virtual const std::vector<int32_t>& eos_token_ids() const = 0;
  // tokenizer_config.json's chat_template ("" when absent; a named list of
  // templates yields the one called "default").
  virtual const std::string& chat_template() const = 0;
};

}  // namespace troupe
