// stack_walker: the pushdown matcher's inner loop. A stack is a chain of
// interned nodes (state, parent): the top's state is where the innermost
// rule is, each parent's state the state its rule returns to. Interning
// makes equal stacks equal ids, so a set of stacks deduplicates by id.
// A bottom node's parent is kRoot (nothing below: when its rule ends, the
// grammar is complete) or kUnknown (the stack below is not known: a
// state's context-independent token masks are computed this way).
//
// walk() runs a sorted list of tokens through the automaton from a set of
// stacks, sharing the work of common prefixes like a trie walk, and says
// for each token whether all its bytes are read (accepted), whether it
// fails while reading (rejected), or whether the bottom rule ended before
// its last byte (popped: the rest depends on what is below).
// Not thread-safe: one walker per thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "grammar/compiled.h"
#include "grammar/vocabulary.h"

namespace troupe::grammar {

class stack_walker {
 public:
  static constexpr int32_t kRoot = -1;
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kMaxDepth = 2000;  // deeper stacks are dropped
  // An ambiguous grammar can hold exponentially many parses: past this many
  // stacks after a byte, the rest are dropped (what is kept is still only
  // valid continuations; grammar/matcher.h keeps fewer between tokens).
  static constexpr size_t kMaxStacks = 4096;
  enum class outcome : uint8_t { rejected, accepted, popped };

  // Forgets every node; walks `g` from now on.
  void reset(const compiled_grammar& g);
  int32_t node(int32_t state, int32_t parent);
  // The stack's states, bottom first.
  std::vector<int32_t> stack_of(int32_t n) const;
  int32_t import(const std::vector<int32_t>& stack, int32_t bottom_parent);

  // The stacks whose tops read a byte, reached from n without reading one
  // (entering rules, leaving finished ones), appended to out; `ended`
  // when the bottom rule can end.
  void expand(int32_t n, std::vector<int32_t>& out, bool& ended);
  // One byte from a set of reading stacks; out sorted and unique.
  void step(const std::vector<int32_t>& from, uint8_t b, std::vector<int32_t>& out, bool& ended);

  // Walks tokens (positions into vocab's sorted order, ascending) from
  // `start` (reading stacks); calls on(position, outcome) for each token
  // accepted or popped (rejected ones may go unreported: a refused prefix
  // skips every token that starts with it). An
  // accepted token also ends with `final_nodes` / `final_ended` holding
  // the stacks after it and whether the bottom rule ended at its last byte.
  template <class F>
  void walk(const token_vocabulary& vocab, const int32_t* positions, size_t count,
            const std::vector<int32_t>& start, F&& on);

  const std::vector<int32_t>& final_nodes(size_t length) const { return levels_[length]; }
  bool final_ended(size_t length) const { return ended_at_[length]; }

  // Reads bytes from `start`; false when a byte is refused (stacks then
  // undefined). After true, final_nodes(bytes.size()) / final_ended(...).
  bool read(const std::string& bytes, const std::vector<int32_t>& start);

 private:
  struct frame {
    int32_t state, parent, depth;
  };
  void grow_levels(size_t n);
  void expand_into(int32_t n, std::vector<int32_t>& out, bool& ended);

  const compiled_grammar* g_ = nullptr;
  std::vector<frame> nodes_;
  std::vector<int32_t> table_;  // open addressing: node id + 1, 0 empty
  std::vector<int32_t> visited_;
  // step() of one node on one byte class, remembered: a walk through the
  // vocabulary reads the same few nodes again and again (inside a string,
  // one node at every depth).
  struct memo_entry {
    int64_t key = -1;  // node * 256 + byte class
    int32_t first = 0, count = 0;
    bool ended = false;
  };
  const memo_entry& step_one(int32_t n, uint8_t b);
  std::vector<memo_entry> memo_;
  size_t memo_used_ = 0;
  std::vector<int32_t> memo_pool_;
  std::vector<std::vector<int32_t>> levels_;  // stacks after d bytes
  std::vector<bool> ended_at_;                // bottom rule ended after byte d
  std::vector<bool> ended_before_;            // ... after some byte 1 .. d
};

template <class F>
void stack_walker::walk(const token_vocabulary& vocab, const int32_t* positions, size_t count,
                        const std::vector<int32_t>& start, F&& on) {
  grow_levels(1);
  levels_[0] = start;
  ended_at_[0] = false;
  ended_before_[0] = false;
  size_t computed = 0;  // levels_[0 .. computed] hold the previous token's prefix
  std::string_view prev;
  bool has_prev = false;
  for (size_t i = 0; i < count; ++i) {
    const std::string_view s = vocab.sorted_bytes(positions[i]);
    size_t common = 0;
    if (has_prev) {
      const size_t limit = std::min({prev.size(), s.size(), computed});
      while (common < limit && prev[common] == s[common]) ++common;
    }
    size_t d = common;
    while (d < s.size() && !levels_[d].empty()) {
      grow_levels(d + 2);
      bool ended = false;
      step(levels_[d], static_cast<uint8_t>(s[d]), levels_[d + 1], ended);
      ++d;
      ended_at_[d] = ended;
      ended_before_[d] = ended_before_[d - 1] || ended;
    }
    computed = d;
    prev = s;
    has_prev = true;
    const size_t length = s.size();
    if (d == length && (!levels_[d].empty() || ended_at_[d])) {
      on(positions[i], outcome::accepted);
      continue;
    }
    const size_t last = std::min(d, length - 1);
    if (ended_before_[last]) {
      on(positions[i], outcome::popped);
      continue;
    }
    // Refused after d bytes (d < length): so is every later token that
    // starts with those d bytes; they are skipped unreported (sorted, they
    // are the run up to the first token that does not start so).
    if (d < length) {
      const std::string_view dead(s.data(), d);
      const int32_t* end = std::partition_point(positions + i + 1, positions + count, [&](int32_t p) {
        return vocab.sorted_bytes(p).substr(0, d) == dead;
      });
      i = static_cast<size_t>(end - positions) - 1;
    }
  }
}

}  // namespace troupe::grammar
