// incremental_detokenizer: turns a request's output tokens into text deltas
// as they arrive, the way vLLM's detokenize_incrementally does: it decodes a
// small window of tokens (a few tokens of context before the unread ones) and
// emits the part that is new, holding back text that still ends in an
// incomplete UTF-8 sequence (U+FFFD). The window starts inside the prompt's
// last tokens, so a first output token keeps its leading space where the
// decoder would strip it at the start of a text (SentencePiece's Strip).
//
// Invariant: text() (all deltas so far, then flush()) equals
// decode(prompt + output) minus decode(prompt), whenever the latter is a
// prefix of the former (always for byte-level BPE and SentencePiece prompts
// that end on a character boundary); every delta is valid UTF-8.
//
// Plain class, one thread (the request actor's). The tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace troupe {

class incremental_detokenizer {
 public:
  incremental_detokenizer(const tokenizer& tok, const std::vector<int32_t>& prompt_ids,
                          bool skip_special_tokens);

  // Appends output tokens; returns the text they complete (may be "").
  std::string append(const std::vector<int32_t>& new_ids);
  // At the end of the request: the text still held back (an incomplete
  // sequence decodes to U+FFFD, as a full decode would).
  std::string flush();

  const std::string& text() const { return text_; }

 private:
  std::string decode_range(size_t begin, size_t end) const;
  std::string take_delta(bool final);

  const tokenizer& tok_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;  // prompt tail + output
  size_t prefix_offset_ = 0;  // window start
  size_t read_offset_ = 0;    // tokens before this are already in text_
  std::string text_;
};

// Valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool is_valid_utf8(const std::string& s);

}  // namespace troupe
