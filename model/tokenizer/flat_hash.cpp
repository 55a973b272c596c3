#include "model/tokenizer/flat_hash.h"

#include <utility>

namespace troupe::tok {
namespace {

size_t capacity_for(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  return cap;
}

}  // namespace

void string_id_map::reserve(size_t n) {
  if (capacity_for(n) <= slots_.size()) return;
  std::vector<slot> old = std::move(slots_);
  slots_.assign(capacity_for(n), slot{});
  mask_ = slots_.size() - 1;
  for (const slot& s : old) {
    if (s.id < 0) continue;
    size_t i = s.hash & mask_;
    while (slots_[i].id >= 0) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void string_id_map::grow() { reserve(slots_.empty() ? 8 : slots_.size()); }

void string_id_map::insert(std::string_view key, int32_t id) {
  if (2 * (size_ + 1) > slots_.size()) grow();
  const uint64_t h = hash_bytes(key);
  size_t i = h & mask_;
  for (;; i = (i + 1) & mask_) {
    slot& s = slots_[i];
    if (s.id < 0) break;
    if (s.hash == h && s.length == key.size() && arena_.compare(s.offset, s.length, key) == 0) {
      s.id = id;
      return;
    }
  }
  slots_[i] = slot{h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id};
  arena_.append(key);
  ++size_;
}

void pair_merge_map::reserve(size_t n) {
  if (capacity_for(n) <= slots_.size()) return;
  std::vector<slot> old = std::move(slots_);
  slots_.assign(capacity_for(n), slot{});
  mask_ = slots_.size() - 1;
  for (const slot& s : old) {
    if (s.key == kEmpty) continue;
    size_t i = hash_mix(s.key) & mask_;
    while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

void pair_merge_map::grow() { reserve(slots_.size()); }

void pair_merge_map::insert(int32_t left, int32_t right, bpe_merge merge) {
  if (2 * (size_ + 1) > slots_.size()) grow();
  const uint64_t key = pack(left, right);
  size_t i = hash_mix(key) & mask_;
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  if (slots_[i].key == kEmpty) ++size_;
  slots_[i] = slot{key, merge};
}

}  // namespace troupe::tok
