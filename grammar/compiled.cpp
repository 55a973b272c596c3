// compiled_grammar: Thompson automata per rule, made deterministic by the
// subset construction over byte classes and called rules, then checked
// (left recursion, a root that admits nothing) and trimmed of what cannot
// finish.
#include "grammar/compiled.h"

#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <unordered_map>

namespace troupe::grammar {
namespace {

constexpr size_t kMaxNfaStates = 2'000'000;
constexpr size_t kMaxStates = 300'000;
// Nodes visited while building the automata (a repeat of an item that adds
// no state still costs its copies), and rules: past these a grammar is too
// large to compile at a request's edge.
constexpr int64_t kMaxBuildSteps = 4'000'000;
constexpr size_t kMaxRules = 4000;
// NFA states visited while making the automata deterministic (each subset's
// closure, its lookup and its edges' classes, summed over every subset): a
// state bound alone lets nested counted repeats such as (.{0,40}){0,40}
// make a few thousand subsets of thousands of NFA states each (minutes of
// work).
constexpr int64_t kMaxSubsetWork = 10'000'000;

using class_set = std::bitset<256>;

struct nfa {
  struct byte_edge {
    class_set classes;
    int32_t to;
  };
  struct call_edge {
    int32_t rule, to;
  };
  std::vector<std::vector<int32_t>> eps;
  std::vector<std::vector<byte_edge>> bytes;
  std::vector<std::vector<call_edge>> calls;
  int32_t add() {
    eps.emplace_back();
    bytes.emplace_back();
    calls.emplace_back();
    return static_cast<int32_t>(eps.size()) - 1;
  }
};

// FNV-1a over a sorted NFA state set (the subset construction's map key).
struct set_hash {
  size_t operator()(const std::vector<int32_t>& set) const {
    uint64_t h = 1469598103934665603ULL;
    for (int32_t s : set) h = (h ^ static_cast<uint32_t>(s)) * 1099511628211ULL;
    return static_cast<size_t>(h);
  }
};

}  // namespace

class automaton_builder {
 public:
  explicit automaton_builder(const grammar& g) : g_(g) {}

  result<std::shared_ptr<const compiled_grammar>> run() {
    out_ = std::make_shared<compiled_grammar>();
    if (g_.root() < 0) return make_error("grammar has no root rule");
    if (g_.rules().size() > kMaxRules) {
      return make_error("grammar too large (" + std::to_string(g_.rules().size()) + " rules; at most " +
                        std::to_string(kMaxRules) + ")");
    }
    for (const rule& r : g_.rules()) {
      if (r.body < 0) return make_error("rule '" + r.name + "' is used but never defined");
    }
    make_classes();
    out_->root_ = g_.root();
    for (size_t r = 0; r < g_.rules().size(); ++r) {
      if (status s = build_rule(static_cast<int32_t>(r)); !s) return std::move(s).take_error();
    }
    if (status s = check_left_recursion(); !s) return std::move(s).take_error();
    std::vector<bool> productive = productive_rules();
    if (!productive[static_cast<size_t>(g_.root())]) {
      return make_error("the grammar admits no string (rule '" + g_.rules()[g_.root()].name +
                        "' can never be completed)");
    }
    trim(productive);
    return std::shared_ptr<const compiled_grammar>(std::move(out_));
  }

 private:
  // Bytes that every byte set of the grammar treats alike share a class.
  void make_classes() {
    std::array<int32_t, 256> cls{};
    int32_t count = 1;
    for (const node& n : g_.nodes()) {
      if (n.kind != node::bytes || n.set.none() || n.set.all()) continue;
      std::map<std::pair<int32_t, bool>, int32_t> renumber;
      for (int b = 0; b < 256; ++b) {
        const auto key = std::make_pair(cls[b], static_cast<bool>(n.set[b]));
        auto it = renumber.emplace(key, static_cast<int32_t>(renumber.size())).first;
        cls[b] = it->second;
      }
      count = static_cast<int32_t>(renumber.size());
    }
    for (int b = 0; b < 256; ++b) out_->byte_class_[b] = static_cast<uint8_t>(cls[b]);
    out_->num_classes_ = count;
  }

  class_set classes_of(const byte_set& s) const {
    class_set c;
    for (int b = 0; b < 256; ++b) {
      if (s[b]) c.set(out_->byte_class_[b]);
    }
    return c;
  }

  // classes_of a bytes node's set, computed once per node (a repeated item
  // is built many times).
  const class_set& node_classes(int32_t id) {
    if (node_classes_.empty()) node_classes_.resize(g_.nodes().size());
    auto& c = node_classes_[static_cast<size_t>(id)];
    if (!c) c = classes_of(g_.at(id).set);
    return *c;
  }

  // Thompson construction: the automaton for node id from state `from`;
  // returns its end state.
  result<int32_t> build(nfa& a, int32_t id, int32_t from) {
    if (a.eps.size() > kMaxNfaStates || ++build_steps_ > kMaxBuildSteps) {
      return make_error("grammar too large (its automaton passes " + std::to_string(kMaxNfaStates) +
                        " states or " + std::to_string(kMaxBuildSteps) + " expansions of repeated items)");
    }
    const node& n = g_.at(id);
    switch (n.kind) {
      case node::bytes: {
        const int32_t to = a.add();
        if (n.set.any()) a.bytes[static_cast<size_t>(from)].push_back({node_classes(id), to});
        return to;
      }
      case node::seq: {
        int32_t cur = from;
        for (int32_t item : n.items) {
          result<int32_t> next = build(a, item, cur);
          if (!next) return next;
          cur = *next;
        }
        return cur;
      }
      case node::alt: {
        const int32_t to = a.add();
        for (int32_t item : n.items) {
          const int32_t start = a.add();
          a.eps[static_cast<size_t>(from)].push_back(start);
          result<int32_t> end = build(a, item, start);
          if (!end) return end;
          a.eps[static_cast<size_t>(*end)].push_back(to);
        }
        return to;
      }
      case node::repeat: {
        int32_t cur = from;
        for (int32_t i = 0; i < n.min; ++i) {
          result<int32_t> next = build(a, n.items[0], cur);
          if (!next) return next;
          cur = *next;
        }
        if (n.max < 0) {
          const int32_t loop = a.add();
          a.eps[static_cast<size_t>(cur)].push_back(loop);
          result<int32_t> end = build(a, n.items[0], loop);
          if (!end) return end;
          a.eps[static_cast<size_t>(*end)].push_back(loop);
          return loop;
        }
        const int32_t to = a.add();
        a.eps[static_cast<size_t>(cur)].push_back(to);
        for (int32_t i = n.min; i < n.max; ++i) {
          result<int32_t> next = build(a, n.items[0], cur);
          if (!next) return next;
          cur = *next;
          a.eps[static_cast<size_t>(cur)].push_back(to);
        }
        return to;
      }
      case node::rule_ref: {
        const int32_t to = a.add();
        a.calls[static_cast<size_t>(from)].push_back({n.rule, to});
        return to;
      }
    }
    return make_error("grammar node of unknown kind");
  }

  // The epsilon closure of `set`, sorted. Marks states with a generation
  // stamp (no per-call allocation of the NFA's size).
  void closure(const nfa& a, std::vector<int32_t>& set) {
    if (mark_.size() < a.eps.size()) mark_.resize(a.eps.size(), 0);
    if (++generation_ == 0) {  // wrapped: start the stamps over
      std::fill(mark_.begin(), mark_.end(), 0);
      generation_ = 1;
    }
    std::vector<int32_t> todo = set;
    for (int32_t s : set) mark_[static_cast<size_t>(s)] = generation_;
    while (!todo.empty()) {
      const int32_t s = todo.back();
      todo.pop_back();
      for (int32_t t : a.eps[static_cast<size_t>(s)]) {
        if (mark_[static_cast<size_t>(t)] != generation_) {
          mark_[static_cast<size_t>(t)] = generation_;
          set.push_back(t);
          todo.push_back(t);
        }
      }
    }
    std::sort(set.begin(), set.end());
    subset_work_ += static_cast<int64_t>(set.size());
  }

  // The rule's automaton, made deterministic, appended to out_'s states.
  status build_rule(int32_t r) {
    nfa a;
    const int32_t start = a.add();
    result<int32_t> end = build(a, g_.rules()[static_cast<size_t>(r)].body, start);
    if (!end) return std::move(end).take_error();
    std::unordered_map<std::vector<int32_t>, int32_t, set_hash> ids;  // NFA state set -> global state
    std::vector<std::vector<int32_t>> pending;
    const auto state_for = [&](std::vector<int32_t> set) -> int32_t {
      closure(a, set);
      auto it = ids.find(set);
      if (it != ids.end()) return it->second;
      const auto id = static_cast<int32_t>(out_->states_.size());
      compiled_grammar::state st;
      st.rule = r;
      st.final = std::binary_search(set.begin(), set.end(), *end);
      out_->states_.push_back(st);
      ids.emplace(set, id);
      pending.push_back(std::move(set));
      return id;
    };
    out_->rule_start_.push_back(state_for({start}));
    const int32_t classes = out_->num_classes_;
    while (!pending.empty()) {
      if (out_->states_.size() > kMaxStates) {
        return make_error("grammar too large (its automata pass " + std::to_string(kMaxStates) + " states)");
      }
      if (subset_work_ > kMaxSubsetWork) {
        return make_error("grammar too large (making its automata deterministic passes " +
                          std::to_string(kMaxSubsetWork) + " steps)");
      }
      const std::vector<int32_t> set = std::move(pending.back());
      pending.pop_back();
      const int32_t id = ids.at(set);
      std::vector<std::vector<int32_t>> by_class(static_cast<size_t>(classes));
      std::map<int32_t, std::vector<int32_t>> by_rule;
      subset_work_ += static_cast<int64_t>(set.size());
      for (int32_t s : set) {
        for (const nfa::byte_edge& e : a.bytes[static_cast<size_t>(s)]) {
          // The edge's classes only (a literal's edge has one).
          for (size_t c = e.classes._Find_first(); c < static_cast<size_t>(classes); c = e.classes._Find_next(c)) {
            by_class[c].push_back(e.to);
            ++subset_work_;
          }
        }
        for (const nfa::call_edge& e : a.calls[static_cast<size_t>(s)]) by_rule[e.rule].push_back(e.to);
      }
      std::vector<int32_t> row(static_cast<size_t>(classes), -1);
      bool consumes = false;
      for (int32_t c = 0; c < classes; ++c) {
        if (by_class[static_cast<size_t>(c)].empty()) continue;
        row[static_cast<size_t>(c)] = state_for(std::move(by_class[static_cast<size_t>(c)]));
        consumes = true;
      }
      std::vector<compiled_grammar::call> calls;
      for (auto& [rule, targets] : by_rule) calls.push_back({rule, state_for(std::move(targets))});
      compiled_grammar::state& st = out_->states_[static_cast<size_t>(id)];
      st.calls = std::move(calls);
      if (consumes) {
        st.consumes = true;
        st.first_edge = static_cast<int32_t>(out_->edges_.size());
        out_->edges_.insert(out_->edges_.end(), row.begin(), row.end());
      }
    }
    return {};
  }

  // States of rule r reachable from its start through calls of rules in
  // `through` only (no byte read); calls met on the way go to `met`.
  void reach_without_bytes(int32_t r, const std::vector<bool>& through, std::vector<int32_t>* met,
                           bool& reaches_final) const {
    std::vector<int32_t> todo{out_->rule_start(r)};
    std::vector<int32_t> seen = todo;
    reaches_final = false;
    while (!todo.empty()) {
      const int32_t s = todo.back();
      todo.pop_back();
      const compiled_grammar::state& st = out_->at(s);
      if (st.final) reaches_final = true;
      for (const compiled_grammar::call& c : st.calls) {
        if (met != nullptr) met->push_back(c.rule);
        if (!through[static_cast<size_t>(c.rule)]) continue;
        if (std::find(seen.begin(), seen.end(), c.target) == seen.end()) {
          seen.push_back(c.target);
          todo.push_back(c.target);
        }
      }
    }
  }

  status check_left_recursion() const {
    const size_t n = g_.rules().size();
    std::vector<bool> nullable(n);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        bool fin = false;
        reach_without_bytes(static_cast<int32_t>(r), nullable, nullptr, fin);
        if (fin) nullable[r] = changed = true;
      }
    }
    std::vector<std::vector<int32_t>> left(n);  // rules entered before any byte
    for (size_t r = 0; r < n; ++r) {
      bool fin = false;
      reach_without_bytes(static_cast<int32_t>(r), nullable, &left[r], fin);
    }
    std::vector<int> color(n);  // 0 new, 1 on the path, 2 done
    std::vector<int32_t> path;
    std::string cycle;
    const auto dfs = [&](auto&& self, int32_t r) -> bool {
      color[static_cast<size_t>(r)] = 1;
      path.push_back(r);
      for (int32_t next : left[static_cast<size_t>(r)]) {
        if (color[static_cast<size_t>(next)] == 1) {
          auto from = std::find(path.begin(), path.end(), next);
          for (auto it = from; it != path.end(); ++it) cycle += g_.rules()[static_cast<size_t>(*it)].name + " -> ";
          cycle += g_.rules()[static_cast<size_t>(next)].name;
          return true;
        }
        if (color[static_cast<size_t>(next)] == 0 && self(self, next)) return true;
      }
      path.pop_back();
      color[static_cast<size_t>(r)] = 2;
      return false;
    };
    for (size_t r = 0; r < n; ++r) {
      if (color[r] == 0 && dfs(dfs, static_cast<int32_t>(r))) {
        return make_error("left recursion: rule '" + cycle.substr(0, cycle.find(' ')) +
                          "' can reach itself without reading a byte (" + cycle + ")");
      }
    }
    return {};
  }

  // Whether each rule's automaton can reach a final state (reading bytes
  // and entering rules that can themselves be completed).
  std::vector<bool> productive_rules() const {
    // A worklist: a rule is (re)checked when a rule it calls becomes
    // productive; each check walks only its own states (stamped, not
    // cleared).
    const size_t n = g_.rules().size();
    std::vector<std::vector<int32_t>> callers(n);
    for (int32_t s = 0; s < out_->num_states(); ++s) {
      const compiled_grammar::state& st = out_->at(s);
      for (const compiled_grammar::call& c : st.calls) callers[static_cast<size_t>(c.rule)].push_back(st.rule);
    }
    std::vector<bool> productive(n);
    std::vector<int64_t> stamp(out_->states_.size(), -1);
    int64_t check = 0;
    std::vector<int32_t> work(n);
    for (size_t r = 0; r < n; ++r) work[r] = static_cast<int32_t>(r);
    std::vector<int32_t> todo;
    while (!work.empty()) {
      const int32_t r = work.back();
      work.pop_back();
      if (productive[static_cast<size_t>(r)]) continue;
      ++check;
      todo.assign(1, out_->rule_start(r));
      stamp[static_cast<size_t>(todo[0])] = check;
      bool reached = false;
      while (!todo.empty() && !reached) {
        const int32_t s = todo.back();
        todo.pop_back();
        const compiled_grammar::state& st = out_->at(s);
        if (st.final) {
          reached = true;
          break;
        }
        const auto visit = [&](int32_t t) {
          if (t >= 0 && stamp[static_cast<size_t>(t)] != check) {
            stamp[static_cast<size_t>(t)] = check;
            todo.push_back(t);
          }
        };
        if (st.consumes) {
          for (int32_t c = 0; c < out_->num_classes_; ++c) visit(out_->edges_[static_cast<size_t>(st.first_edge + c)]);
        }
        for (const compiled_grammar::call& c : st.calls) {
          if (productive[static_cast<size_t>(c.rule)]) visit(c.target);
        }
      }
      if (!reached) continue;
      productive[static_cast<size_t>(r)] = true;
      for (int32_t caller : callers[static_cast<size_t>(r)]) {
        if (!productive[static_cast<size_t>(caller)]) work.push_back(caller);
      }
    }
    return productive;
  }

  // Drops calls of rules that admit nothing and every edge into a state
  // from which the rule cannot be completed.
  void trim(const std::vector<bool>& productive) {
    auto& states = out_->states_;
    const size_t n = states.size();
    for (compiled_grammar::state& st : states) {
      std::erase_if(st.calls, [&](const compiled_grammar::call& c) { return !productive[static_cast<size_t>(c.rule)]; });
    }
    std::vector<std::vector<int32_t>> preds(n);
    for (size_t s = 0; s < n; ++s) {
      const compiled_grammar::state& st = states[s];
      if (st.consumes) {
        for (int32_t c = 0; c < out_->num_classes_; ++c) {
          const int32_t t = out_->edges_[static_cast<size_t>(st.first_edge + c)];
          if (t >= 0) preds[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s));
        }
      }
      for (const compiled_grammar::call& c : st.calls) preds[static_cast<size_t>(c.target)].push_back(static_cast<int32_t>(s));
    }
    std::vector<bool> alive(n);
    std::vector<int32_t> todo;
    for (size_t s = 0; s < n; ++s) {
      if (states[s].final) {
        alive[s] = true;
        todo.push_back(static_cast<int32_t>(s));
      }
    }
    while (!todo.empty()) {
      const int32_t s = todo.back();
      todo.pop_back();
      for (int32_t p : preds[static_cast<size_t>(s)]) {
        if (!alive[static_cast<size_t>(p)]) {
          alive[static_cast<size_t>(p)] = true;
          todo.push_back(p);
        }
      }
    }
    for (compiled_grammar::state& st : states) {
      std::erase_if(st.calls, [&](const compiled_grammar::call& c) { return !alive[static_cast<size_t>(c.target)]; });
      if (!st.consumes) continue;
      bool any = false;
      for (int32_t c = 0; c < out_->num_classes_; ++c) {
        int32_t& t = out_->edges_[static_cast<size_t>(st.first_edge + c)];
        if (t >= 0 && !alive[static_cast<size_t>(t)]) t = -1;
        any = any || t >= 0;
      }
      st.consumes = any;
    }
  }

  const grammar& g_;
  std::shared_ptr<compiled_grammar> out_;
  int64_t build_steps_ = 0;
  int64_t subset_work_ = 0;         // kMaxSubsetWork
  std::vector<std::optional<class_set>> node_classes_;
  std::vector<uint32_t> mark_;      // closure's stamps, per NFA state
  uint32_t generation_ = 0;
};

result<std::shared_ptr<const compiled_grammar>> compiled_grammar::compile(const grammar& g) {
  return automaton_builder(g).run();
}

}  // namespace troupe::grammar
