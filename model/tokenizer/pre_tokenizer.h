// pre_tokenizer: tokenizers' pre-tokenizers that split normalized text into
// the pieces the model encodes one by one: Split (Regex or String pattern,
// every behaviour, invert), ByteLevel (optional GPT-2 regex and prefix
// space), Metaspace (prepend_scheme always/first/never, split) and Sequence.
//
// ByteLevel's byte-to-character mapping is not materialized: when the
// pipeline contains ByteLevel, the pieces handed on are raw bytes and the BPE
// model looks its vocabulary up by raw bytes (see bpe_model.h). ByteLevel
// must therefore be the last step. Immutable after parse; thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "model/tokenizer/function_ref.h"
#include "model/tokenizer/json_util.h"
#include "model/tokenizer/regex.h"

namespace troupe::tok {

// Receives each piece in order, and whether it starts at offset 0 of the
// original input (Metaspace's prepend_scheme "first" needs that).
using piece_sink = function_ref<void(std::string_view piece, bool at_origin)>;

enum class split_behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

class pre_tokenizer {
 public:
  // The "pre_tokenizer" member of tokenizer.json; nullopt spec: no splitting.
  static result<std::unique_ptr<pre_tokenizer>> parse(std::optional<json> spec);

  void pre_tokenize(std::string_view text, bool at_origin, piece_sink sink) const {
    run(0, text, at_origin, sink);
  }
  // Whether pieces are raw bytes for a byte-level vocabulary.
  bool byte_level() const { return byte_level_; }

 private:
  enum class kind { split, byte_level, metaspace };
  enum class prepend_scheme { always, first, never };
  struct step {
    kind type = kind::split;
    std::optional<regex> pattern;  // split, and byte_level with use_regex
    split_behavior behavior = split_behavior::isolated;
    bool invert = false;
    bool add_prefix_space = false;  // byte_level
    std::string replacement;        // metaspace
    prepend_scheme scheme = prepend_scheme::always;
    bool split = true;  // metaspace
  };

  status add(json spec);
  status add_split(json spec);
  status add_byte_level(json spec);
  status add_metaspace(json spec);
  void run(size_t index, std::string_view text, bool at_origin, piece_sink sink) const;
  void run_split(size_t index, std::string_view text, bool at_origin, piece_sink sink) const;
  void run_byte_level(size_t index, std::string_view text, bool at_origin, piece_sink sink) const;
  void run_metaspace(size_t index, std::string_view text, bool at_origin, piece_sink sink) const;

  std::vector<step> steps_;
  bool byte_level_ = false;
};

// tokenizers' NormalizedString::split: applies `behavior` to the spans of a
// find_matches result and returns the [start, end) ranges to keep.
void apply_split_behavior(split_behavior behavior, std::vector<match_span>& spans);

}  // namespace troupe::tok
