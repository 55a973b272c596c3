// The BPE merge loop: tokenizers' BPE::merge_word and Word::merge_all. The
// lowest-ranked adjacent pair merges first, the leftmost among equal ranks.
// Short words use a linear scan for the best pair (cheaper than a heap at
// these sizes); long ones use a heap exactly as `tokenizers` does.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>

#include "model/tokenizer/bpe_model.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

constexpr size_t kScanLimit = 96;  // symbols; above it the heap is used

std::string byte_token(unsigned char b) {
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "<0x%02X>", b);
  return buffer;
}

}  // namespace

// merge_word's handling of one character (one byte for byte-level pieces)
// that is not simply in the vocabulary: prefix/suffix, byte fallback, unk.
void bpe_model::add_unit(std::string_view unit, bool first, bool last, int32_t& unk,
                         std::vector<symbol>& symbols) const {
  std::string s;
  if (!first) s += continuing_subword_prefix_;
  if (byte_level_) {
    s += byte_level_char(static_cast<unsigned char>(unit[0]));
  } else {
    s += unit;
  }
  if (last) s += end_of_word_suffix_;
  const auto push = [&](int32_t id) { symbols.push_back({id, -1, -1}); };
  if (const int32_t id = vocab_.find(s); id >= 0) {
    if (unk >= 0) push(unk);
    unk = -1;
    push(id);
    return;
  }
  if (byte_fallback_) {
    std::vector<int32_t> bytes;
    for (const char c : s) {
      const int32_t id = vocab_.find(byte_token(static_cast<unsigned char>(c)));
      if (id < 0) break;
      bytes.push_back(id);
    }
    if (bytes.size() == s.size()) {  // a pending unk stays pending, as in tokenizers
      for (const int32_t id : bytes) push(id);
      return;
    }
  }
  if (unk_id_ < 0) return;  // no usable unk token: the character is dropped
  if (unk >= 0 && !fuse_unk_) push(unk);
  unk = unk_id_;
}

void bpe_model::initial_symbols(std::string_view piece, std::vector<symbol>& symbols) const {
  symbols.clear();
  const bool plain = continuing_subword_prefix_.empty() && end_of_word_suffix_.empty();
  int32_t unk = -1;  // a pending (possibly fused) unk
  for (size_t i = 0; i < piece.size();) {
    const size_t len = byte_level_ ? 1 : utf8_len(static_cast<unsigned char>(piece[i]));
    const std::string_view unit = piece.substr(i, len);
    const int32_t id = !plain        ? -1
                       : byte_level_ ? byte_ids_[static_cast<unsigned char>(piece[i])]
                                     : vocab_.find(unit);
    if (id >= 0) {
      if (unk >= 0) symbols.push_back({unk, -1, -1});
      unk = -1;
      symbols.push_back({id, -1, -1});
    } else {
      add_unit(unit, i == 0, i + len >= piece.size(), unk, symbols);
    }
    i += len;
  }
  if (unk >= 0) symbols.push_back({unk, -1, -1});
  const auto n = static_cast<int32_t>(symbols.size());
  for (int32_t k = 0; k < n; ++k) {
    symbols[k].prev = k - 1;
    symbols[k].next = k + 1 < n ? k + 1 : -1;
  }
}

namespace {

// Merges symbol `pos` with its right neighbour, which is removed (id -1), so
// live symbols keep their index order.
template <class Symbol>
void merge_symbols(std::vector<Symbol>& symbols, int32_t pos, int32_t new_id) {
  const int32_t right = symbols[pos].next;
  symbols[pos].id = new_id;
  symbols[pos].next = symbols[right].next;
  if (symbols[right].next >= 0) symbols[symbols[right].next].prev = pos;
  symbols[right].id = -1;
}

}  // namespace

void bpe_model::merge_all(std::vector<symbol>& symbols) const {
  if (symbols.size() < 2) return;
  if (symbols.size() <= kScanLimit) {
    merge_by_scan(symbols);
  } else {
    merge_by_heap(symbols);
  }
}

void bpe_model::merge_by_scan(std::vector<symbol>& symbols) const {
  bpe_merge pairs[kScanLimit];  // the merge of each live symbol with its right neighbour
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    pairs[i] = merges_.find(symbols[i].id, symbols[i + 1].id);
  }
  for (;;) {
    int32_t best = -1;
    for (int32_t i = 0; symbols[i].next >= 0; i = symbols[i].next) {
      if (pairs[i].rank >= 0 && (best < 0 || pairs[i].rank < pairs[best].rank)) best = i;
    }
    if (best < 0) return;
    merge_symbols(symbols, best, pairs[best].new_id);
    const symbol& s = symbols[best];
    pairs[best] = s.next >= 0 ? merges_.find(s.id, symbols[s.next].id) : bpe_merge{};
    if (s.prev >= 0) pairs[s.prev] = merges_.find(symbols[s.prev].id, s.id);
  }
}

// A min-heap of (rank << 32 | pos): lowest rank first, then leftmost. An
// entry is stale when its pair has changed since it was pushed.
void bpe_model::merge_by_heap(std::vector<symbol>& symbols) const {
  std::vector<uint64_t> heap;
  heap.reserve(symbols.size());
  const auto entry = [&](int32_t pos) -> std::optional<uint64_t> {
    const symbol& s = symbols[pos];
    const bpe_merge m = merges_.find(s.id, symbols[s.next].id);
    if (m.rank < 0) return std::nullopt;
    return (static_cast<uint64_t>(m.rank) << 32) | static_cast<uint32_t>(pos);
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const auto e = entry(static_cast<int32_t>(i))) heap.push_back(*e);
  }
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  const auto push = [&](int32_t pos) {
    if (const auto e = entry(pos)) {
      heap.push_back(*e);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
    const symbol& s = symbols[pos];
    if (s.id < 0 || s.next < 0) continue;
    const bpe_merge m = merges_.find(s.id, symbols[s.next].id);
    if (m.rank != static_cast<int32_t>(top >> 32)) continue;  // stale
    merge_symbols(symbols, pos, m.new_id);
    if (s.prev >= 0) push(s.prev);
    if (s.next >= 0) push(pos);
  }
}

void bpe_model::merge_word(std::string_view piece, std::vector<int32_t>& ids) const {
  thread_local std::vector<symbol> symbols;
  initial_symbols(piece, symbols);
  merge_all(symbols);
  for (const symbol& s : symbols) {
    if (s.id >= 0) ids.push_back(s.id);
  }
}

}  // namespace troupe::tok
