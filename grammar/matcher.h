// token_grammar and matcher: a compiled grammar over one vocabulary, and
// one request's place in it.
//
// The token masks follow xgrammar's design: for each state that reads a
// byte, the tokens are split once into those the state's rule reads whole
// whatever is below it on the stack (accepted), those it refuses whatever
// is below (rejected), and the rest, which end the rule partway and depend
// on the stack (uncertain). A position's mask is then, for each stack of
// the matcher's set, the state's accepted bitmask plus the uncertain tokens
// that this stack reads whole, so a step costs a bitmask OR and a walk over
// a few tokens. The split is computed the first time a state is met and
// shared by every request on the same grammar (thread-safe).
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <vector>

#include "grammar/compiled.h"
#include "grammar/vocabulary.h"

namespace troupe::grammar {

class token_grammar {
 public:
  token_grammar(std::shared_ptr<const compiled_grammar> g, std::shared_ptr<const token_vocabulary> vocab);

  struct state_masks {
    std::vector<uint32_t> accepted;  // bit t % 32 of word t / 32: token t
    std::vector<int32_t> uncertain;  // sorted positions (token_vocabulary)
  };
  // The split for a reading state (computed on first use).
  const state_masks& masks(int32_t state) const;

  const compiled_grammar& automaton() const { return *g_; }
  const token_vocabulary& vocab() const { return *vocab_; }
  // How many states have their split computed (for tests and benchmarks).
  int64_t num_computed() const;

  // Whole masks by matcher state (its set of stacks, serialized), the most
  // recently used kMaskCacheEntries: inside a string or a number a request
  // stays in one state for many tokens, and requests on one schema meet the
  // same states; a hit is a copy.
  static constexpr size_t kMaskCacheEntries = 256;
  bool cached_mask(const std::string& key, uint32_t* words) const;
  void cache_mask(const std::string& key, const uint32_t* words) const;

 private:
  std::shared_ptr<const compiled_grammar> g_;
  std::shared_ptr<const token_vocabulary> vocab_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<state_masks>> masks_;
  mutable std::mutex cache_mu_;
  mutable std::list<std::pair<std::string, std::vector<uint32_t>>> cache_;  // most recent first
  mutable std::unordered_map<std::string, decltype(cache_)::iterator> cache_index_;
};

class matcher {
 public:
  static constexpr size_t kMaxStacks = 256;  // parses kept between tokens
  explicit matcher(std::shared_ptr<const token_grammar> g);

  // Reads the token's bytes: false, and nothing changes, when the grammar
  // refuses them (a token with no bytes is always refused).
  bool accept(int32_t token);
  // Sets the bits (bit t % 32 of words[t / 32]) of the tokens accept()
  // would take next; clears every other bit. End-of-sequence tokens are the
  // caller's to add where can_end().
  void fill_mask(uint32_t* words) const;
  bool can_end() const { return !stacks_.empty() && stacks_.front().empty(); }
  // Nothing but the end is left.
  bool is_terminated() const { return stacks_.size() == 1 && stacks_.front().empty(); }

 private:
  std::shared_ptr<const token_grammar> g_;
  // The set of stacks (bottom first; an empty one: the grammar complete),
  // each top a reading state; sorted, unique.
  std::vector<std::vector<int32_t>> stacks_;
};

}  // namespace troupe::grammar
