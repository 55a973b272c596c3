// bpe_model: tokenizers' BPE model (vocab, ranked merges, unk/fuse_unk,
// byte_fallback, ignore_merges, continuing_subword_prefix,
// end_of_word_suffix; no dropout). Turns one pre-tokenized piece into ids.
//
// Pieces of SentencePiece vocabularies (no pre-tokenizer: the whole text is
// one piece) are cut before each "▁" that follows another character when the
// vocabulary makes that exact (see split_at_marker_).
//
// Byte-level vocabularies (when the pre-tokenizer ends in ByteLevel) are
// also indexed by raw bytes: a piece arrives as raw bytes and is never
// mapped to GPT-2's characters, which gives the same ids with less work.
// Immutable after parse; tokenize() is thread-safe (its cache is per thread).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "model/tokenizer/flat_hash.h"
#include "model/tokenizer/json_util.h"

namespace troupe::tok {

class bpe_model {
 public:
  // The "model" member of tokenizer.json; `byte_level`: pieces are raw bytes.
  static result<std::unique_ptr<bpe_model>> parse(json spec, bool byte_level);

  // Appends the ids of one non-empty piece.
  void tokenize(std::string_view piece, std::vector<int32_t>& ids) const;

  // By vocabulary string (GPT-2 characters for byte-level vocabularies).
  int32_t token_to_id(std::string_view token) const { return vocab_.find(token); }
  // nullptr when no token has this id.
  const std::string* id_to_token(int32_t id) const;
  size_t vocab_size() const { return vocab_.size(); }
  int32_t max_id() const { return static_cast<int32_t>(vocab_r_.size()) - 1; }

 private:
  struct symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  status load_vocab(json vocab);
  status load_merges(json merges);
  status add_merge(std::string_view left, std::string_view right, int32_t rank);
  int32_t lookup(std::string_view piece) const {
    return byte_level_ ? raw_vocab_.find(piece) : vocab_.find(piece);
  }
  void initial_symbols(std::string_view piece, std::vector<symbol>& symbols) const;
  void add_unit(std::string_view unit, bool first, bool last, int32_t& unk,
                std::vector<symbol>& symbols) const;
  void merge_all(std::vector<symbol>& symbols) const;
  void merge_by_scan(std::vector<symbol>& symbols) const;
  void merge_by_heap(std::vector<symbol>& symbols) const;
  void merge_word(std::string_view piece, std::vector<int32_t>& ids) const;
  void tokenize_cached(std::string_view piece, std::vector<int32_t>& ids) const;
  bool marker_never_follows_other_chars() const;

  string_id_map vocab_;      // vocabulary string -> id
  string_id_map raw_vocab_;  // byte-level only: raw bytes -> id
  std::vector<std::string> vocab_r_;
  std::vector<bool> has_id_;
  pair_merge_map merges_;
  std::array<int32_t, 256> byte_ids_{};  // byte-level only: id of each byte alone
  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  // SentencePiece-style vocabularies where no token has U+2581 after another
  // character: no merge can cross the start of a "▁word", so long pieces are
  // encoded (and cached) word by word with identical results.
  bool split_at_marker_ = false;
  int32_t unk_id_ = -1;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  uint64_t cache_owner_ = 0;
};

}  // namespace troupe::tok
