#include "grammar/stack_walker.h"

#include <algorithm>

namespace troupe::grammar {
namespace {

uint64_t hash_key(int32_t state, int32_t parent) {
  uint64_t k = (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(parent);
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

void stack_walker::reset(const compiled_grammar& g) {
  g_ = &g;
  for (memo_entry& e : memo_) e.key = -1;
  memo_used_ = 0;
  memo_pool_.clear();
  nodes_.clear();
  std::fill(table_.begin(), table_.end(), 0);
}

int32_t stack_walker::node(int32_t state, int32_t parent) {
  if (table_.size() < 2 * (nodes_.size() + 1)) {
    table_.assign(std::max<size_t>(1024, table_.size() * 2), 0);
    const size_t mask = table_.size() - 1;
    for (size_t id = 0; id < nodes_.size(); ++id) {
      size_t at = hash_key(nodes_[id].state, nodes_[id].parent) & mask;
      while (table_[at] != 0) at = (at + 1) & mask;
      table_[at] = static_cast<int32_t>(id) + 1;
    }
  }
  const size_t mask = table_.size() - 1;
  size_t at = hash_key(state, parent) & mask;
  while (table_[at] != 0) {
    const frame& f = nodes_[static_cast<size_t>(table_[at] - 1)];
    if (f.state == state && f.parent == parent) return table_[at] - 1;
    at = (at + 1) & mask;
  }
  const int32_t depth = parent < 0 ? 1 : nodes_[static_cast<size_t>(parent)].depth + 1;
  nodes_.push_back({state, parent, depth});
  table_[at] = static_cast<int32_t>(nodes_.size());
  return static_cast<int32_t>(nodes_.size()) - 1;
}

std::vector<int32_t> stack_walker::stack_of(int32_t n) const {
  std::vector<int32_t> out;
  for (; n >= 0; n = nodes_[static_cast<size_t>(n)].parent) out.push_back(nodes_[static_cast<size_t>(n)].state);
  std::reverse(out.begin(), out.end());
  return out;
}

int32_t stack_walker::import(const std::vector<int32_t>& stack, int32_t bottom_parent) {
  int32_t n = bottom_parent;
  for (int32_t s : stack) n = node(s, n);
  return n;
}

void stack_walker::expand(int32_t n, std::vector<int32_t>& out, bool& ended) {
  visited_.clear();
  expand_into(n, out, ended);
}

void stack_walker::expand_into(int32_t n, std::vector<int32_t>& out, bool& ended) {
  if (std::find(visited_.begin(), visited_.end(), n) != visited_.end()) return;
  visited_.push_back(n);
  const frame f = nodes_[static_cast<size_t>(n)];
  const compiled_grammar::state& st = g_->at(f.state);
  if (st.consumes) out.push_back(n);
  if (f.depth < kMaxDepth) {
    for (const compiled_grammar::call& c : st.calls) {
      const int32_t back = node(c.target, f.parent);
      expand_into(node(g_->rule_start(c.rule), back), out, ended);
    }
  }
  if (st.final) {
    if (f.parent < 0) {
      ended = true;
    } else {
      expand_into(f.parent, out, ended);
    }
  }
}

const stack_walker::memo_entry& stack_walker::step_one(int32_t n, uint8_t b) {
  if (memo_.size() < 2 * (memo_used_ + 1)) {
    std::vector<memo_entry> old = std::move(memo_);
    memo_.assign(std::max<size_t>(1024, old.size() * 2), memo_entry{});
    for (const memo_entry& e : old) {
      if (e.key < 0) continue;
      size_t at = hash_key(static_cast<int32_t>(e.key >> 8), static_cast<int32_t>(e.key & 255)) & (memo_.size() - 1);
      while (memo_[at].key >= 0) at = (at + 1) & (memo_.size() - 1);
      memo_[at] = e;
    }
  }
  const int32_t cls = g_->byte_class(b);
  const int64_t key = static_cast<int64_t>(n) * 256 + cls;
  const size_t mask = memo_.size() - 1;
  size_t at = hash_key(n, cls) & mask;
  while (memo_[at].key >= 0) {
    if (memo_[at].key == key) return memo_[at];
    at = (at + 1) & mask;
  }
  memo_entry e;
  e.key = key;
  e.first = static_cast<int32_t>(memo_pool_.size());
  const frame f = nodes_[static_cast<size_t>(n)];
  const int32_t t = g_->next(f.state, b);
  if (t >= 0) {
    std::vector<int32_t> out;
    expand(node(t, f.parent), out, e.ended);
    memo_pool_.insert(memo_pool_.end(), out.begin(), out.end());
    e.count = static_cast<int32_t>(out.size());
  }
  // expand() does not touch memo_: `at` is still the free slot.
  memo_[at] = e;
  ++memo_used_;
  return memo_[at];
}

void stack_walker::step(const std::vector<int32_t>& from, uint8_t b, std::vector<int32_t>& out, bool& ended) {
  out.clear();
  for (int32_t n : from) {
    const memo_entry& e = step_one(n, b);
    out.insert(out.end(), memo_pool_.begin() + e.first, memo_pool_.begin() + e.first + e.count);
    ended = ended || e.ended;
  }
  if (out.size() > 1) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    if (out.size() > kMaxStacks) out.resize(kMaxStacks);
  }
}

void stack_walker::grow_levels(size_t n) {
  if (levels_.size() < n) {
    levels_.resize(n);
    ended_at_.resize(n);
    ended_before_.resize(n);
  }
}

bool stack_walker::read(const std::string& bytes, const std::vector<int32_t>& start) {
  grow_levels(bytes.size() + 1);
  levels_[0] = start;
  ended_at_[0] = false;
  for (size_t d = 0; d < bytes.size(); ++d) {
    if (levels_[d].empty()) return false;
    bool ended = false;
    step(levels_[d], static_cast<uint8_t>(bytes[d]), levels_[d + 1], ended);
    ended_at_[d + 1] = ended;
  }
  return !levels_[bytes.size()].empty() || ended_at_[bytes.size()];
}

}  // namespace troupe::grammar
