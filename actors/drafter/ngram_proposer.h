// ngram_proposer: prompt-lookup (n-gram) draft tokens for speculative
// decoding, as vLLM's `method: ngram`. For a request's token history (prompt
// and output so far), find the longest suffix of between `prompt_lookup_min`
// and `prompt_lookup_max` tokens that occurred earlier in the history; its
// most recent earlier occurrence is followed by the proposal: up to
// `num_speculative_tokens` tokens (fewer when the caller's limit is smaller:
// max_model_len and the request's remaining max_tokens). Where the tokens
// after the occurrence reach the end of the history, the copy continues
// over its own proposal (an overlapping match, as in LZ77): a loop of
// period p keeps repeating. Nothing matches: no proposal.
//
// Each request's history is indexed incrementally: for every n-gram length,
// a hash map from the n-gram (its tokens' bytes: exact, no collisions) to
// the end of its latest occurrence, updated in O(prompt_lookup_max^2) per
// appended token, so a proposal never rescans the history.
//
// Plain class, no CAF: the drafter actor's (actors/drafter/drafter_actor.h).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace troupe {

using request_id = uint64_t;

struct ngram_config {
  int32_t num_speculative_tokens = 1;  // k, >= 1
  int32_t prompt_lookup_min = 1;       // 1 <= min <= max
  int32_t prompt_lookup_max = 1;
};

class ngram_proposer {
 public:
  // REQUIRES: 1 <= prompt_lookup_min <= prompt_lookup_max; k >= 1.
  explicit ngram_proposer(const ngram_config& config);

  // Starts (or restarts) a request's history.
  void add(request_id id, const std::vector<int32_t>& tokens);
  // Appends tokens the request has emitted. Unknown ids are ignored.
  void append(request_id id, const std::vector<int32_t>& tokens);
  void remove(request_id id);
  bool has(request_id id) const { return requests_.count(id) != 0; }
  size_t num_requests() const { return requests_.size(); }

  // Up to min(k, limit) draft tokens for the request (empty: no match,
  // limit <= 0, or an unknown id).
  std::vector<int32_t> propose(request_id id, int64_t limit) const;

 private:
  struct history {
    std::vector<int32_t> tokens;
    // Per n-gram length n (index n - min): n-gram -> end position
    // (inclusive) of its latest occurrence ending before the last token.
    std::vector<std::unordered_map<std::string, int64_t>> index;
    int64_t indexed_end = -1;  // n-grams ending at positions <= this are indexed
  };
  // The n tokens ending at `end` (inclusive), as bytes.
  static std::string key(const std::vector<int32_t>& t, int64_t end, int32_t n);
  // Indexes the n-grams ending at positions up to `end`.
  void index_through(history& h, int64_t end) const;

  ngram_config config_;
  std::unordered_map<request_id, history> requests_;
};

}  // namespace troupe
