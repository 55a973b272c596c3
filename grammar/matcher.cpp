#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>

#include "grammar/stack_walker.h"

namespace troupe::grammar {
namespace {

// One walker per thread, reset for each use.
stack_walker& walker_for(const compiled_grammar& g) {
  thread_local stack_walker w;
  w.reset(g);
  return w;
}

void set_bit(uint32_t* words, int32_t t) { words[t / 32] |= 1u << (t % 32); }
bool has_bit(const uint32_t* words, int32_t t) { return (words[t / 32] >> (t % 32)) & 1u; }

// The sorted set of stacks the walker's nodes stand for (ended: add the
// empty stack).
std::vector<std::vector<int32_t>> export_stacks(const stack_walker& w, const std::vector<int32_t>& nodes,
                                                bool ended) {
  std::vector<std::vector<int32_t>> out;
  if (ended) out.emplace_back();
  for (int32_t n : nodes) out.push_back(w.stack_of(n));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  // An ambiguous grammar's parses can multiply with every token: a matcher
  // keeps the first kMaxStacks (the end first, where it is one). Masks and
  // accept() read the same kept set, so they still agree, and every kept
  // stack is a valid continuation.
  if (out.size() > matcher::kMaxStacks) out.resize(matcher::kMaxStacks);
  return out;
}

}  // namespace

token_grammar::token_grammar(std::shared_ptr<const compiled_grammar> g,
                             std::shared_ptr<const token_vocabulary> vocab)
    : g_(std::move(g)), vocab_(std::move(vocab)), masks_(static_cast<size_t>(g_->num_states())) {}

const token_grammar::state_masks& token_grammar::masks(int32_t state) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<state_masks>& slot = masks_[static_cast<size_t>(state)];
  if (slot != nullptr) return *slot;
  auto m = std::make_unique<state_masks>();
  m->accepted.assign(static_cast<size_t>(vocab_->mask_words()), 0);
  stack_walker& w = walker_for(*g_);
  const std::vector<int32_t> start{w.node(state, stack_walker::kUnknown)};
  std::vector<int32_t> all(static_cast<size_t>(vocab_->num_sorted()));
  for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<int32_t>(k);
  w.walk(*vocab_, all.data(), all.size(), start, [&](int32_t position, stack_walker::outcome o) {
    if (o == stack_walker::outcome::accepted) {
      set_bit(m->accepted.data(), vocab_->sorted_id(position));
    } else if (o == stack_walker::outcome::popped) {
      m->uncertain.push_back(position);
    }
  });
  slot = std::move(m);
  return *slot;
}

int64_t token_grammar::num_computed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::count_if(masks_.begin(), masks_.end(), [](const auto& m) { return m != nullptr; });
}

bool token_grammar::cached_mask(const std::string& key, uint32_t* words) const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = cache_index_.find(key);
  if (it == cache_index_.end()) return false;
  cache_.splice(cache_.begin(), cache_, it->second);
  std::memcpy(words, it->second->second.data(), it->second->second.size() * sizeof(uint32_t));
  return true;
}

void token_grammar::cache_mask(const std::string& key, const uint32_t* words) const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_index_.count(key) != 0) return;
  cache_.emplace_front(key, std::vector<uint32_t>(words, words + vocab_->mask_words()));
  cache_index_.emplace(key, cache_.begin());
  if (cache_.size() > kMaskCacheEntries) {
    cache_index_.erase(cache_.back().first);
    cache_.pop_back();
  }
}

matcher::matcher(std::shared_ptr<const token_grammar> g) : g_(std::move(g)) {
  stack_walker& w = walker_for(g_->automaton());
  std::vector<int32_t> start;
  bool ended = false;
  w.expand(w.node(g_->automaton().root_start(), stack_walker::kRoot), start, ended);
  stacks_ = export_stacks(w, start, ended);
}

bool matcher::accept(int32_t token) {
  const std::string& bytes = g_->vocab().bytes_of(token);
  if (bytes.empty()) return false;
  stack_walker& w = walker_for(g_->automaton());
  std::vector<int32_t> start;
  for (const std::vector<int32_t>& s : stacks_) {
    if (!s.empty()) start.push_back(w.import(s, stack_walker::kRoot));
  }
  if (!w.read(bytes, start)) return false;
  stacks_ = export_stacks(w, w.final_nodes(bytes.size()), w.final_ended(bytes.size()));
  return true;
}

void matcher::fill_mask(uint32_t* words) const {
  std::string key;
  for (const std::vector<int32_t>& s : stacks_) {
    key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(int32_t));
    key.append(4, '\xff');  // no state id is -1
  }
  if (g_->cached_mask(key, words)) return;
  const token_vocabulary& vocab = g_->vocab();
  const auto num_words = static_cast<size_t>(vocab.mask_words());
  std::memset(words, 0, num_words * sizeof(uint32_t));
  for (const std::vector<int32_t>& s : stacks_) {
    if (s.empty()) continue;
    const token_grammar::state_masks& m = g_->masks(s.back());
    for (size_t i = 0; i < num_words; ++i) words[i] |= m.accepted[i];
    if (m.uncertain.empty()) continue;
    std::vector<int32_t> todo;
    for (int32_t p : m.uncertain) {
      if (!has_bit(words, vocab.sorted_id(p))) todo.push_back(p);
    }
    stack_walker& w = walker_for(g_->automaton());
    const std::vector<int32_t> start{w.import(s, stack_walker::kRoot)};
    w.walk(vocab, todo.data(), todo.size(), start, [&](int32_t position, stack_walker::outcome o) {
      if (o == stack_walker::outcome::accepted) set_bit(words, vocab.sorted_id(position));
    });
  }
  g_->cache_mask(key, words);
}

}  // namespace troupe::grammar
