// compiled_grammar: a grammar (grammar/grammar.h) turned into one
// deterministic automaton per rule, read by a pushdown matcher
// (grammar/matcher.h). A rule's automaton has byte edges (over the
// grammar's byte classes: bytes no byte set tells apart share a class) and
// call edges (enter rule r, come back to state t); the matcher's stack
// holds the return states. Immutable once built; shared by every request
// with the same constraint (grammar/cache.h).
//
// compile() refuses what the matcher could not run or what admits nothing:
// an undefined rule, left recursion (a rule that can reach itself without
// reading a byte), a root that admits no string, and automata past the size
// limit. It also trims what can never finish (states from which no final
// state is reachable, calls to rules that admit nothing), so every state the
// matcher reaches can still complete: a constrained request never walks into
// a dead end.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "grammar/grammar.h"

namespace troupe::grammar {

class compiled_grammar {
 public:
  struct call {
    int32_t rule;    // the rule entered
    int32_t target;  // the state (of the caller's rule) returned to
  };
  struct state {
    int32_t rule = -1;
    bool final = false;          // the rule may end here
    bool consumes = false;       // has a byte edge
    int32_t first_edge = 0;      // into edges(): num_classes() entries when consumes
    std::vector<call> calls;
  };

  static result<std::shared_ptr<const compiled_grammar>> compile(const grammar& g);

  int32_t num_states() const { return static_cast<int32_t>(states_.size()); }
  const state& at(int32_t s) const { return states_[static_cast<size_t>(s)]; }
  // The state after byte b from s (a consuming state), -1: none.
  int32_t next(int32_t s, uint8_t b) const {
    const state& st = states_[static_cast<size_t>(s)];
    return st.consumes ? edges_[static_cast<size_t>(st.first_edge + byte_class_[b])] : -1;
  }
  int32_t byte_class(uint8_t b) const { return byte_class_[b]; }
  int32_t rule_start(int32_t rule) const { return rule_start_[static_cast<size_t>(rule)]; }
  int32_t root_start() const { return rule_start(root_); }
  int32_t num_classes() const { return num_classes_; }

 private:
  std::vector<state> states_;
  std::vector<int32_t> edges_;  // per consuming state: next state per byte class
  std::array<uint8_t, 256> byte_class_{};
  int32_t num_classes_ = 0;
  std::vector<int32_t> rule_start_;
  int32_t root_ = -1;
  friend class automaton_builder;
};

}  // namespace troupe::grammar
