// flat_hash: open-addressing hash tables for the hot lookups of encoding
// (token string -> id, symbol pair -> merge). Built once at load, then only
// read, so concurrent finds are safe. Linear probing, power-of-two capacity,
// load factor at most 1/2.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::tok {

inline uint64_t hash_mix(uint64_t x) {
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ULL;
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ULL;
  x ^= x >> 32;
  return x;
}

inline uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
  return hash_mix(h ^ tail);
}

// Maps byte strings to int32 ids; find() returns -1 when absent.
class string_id_map {
 public:
  void reserve(size_t n);
  // Inserts or overwrites.
  void insert(std::string_view key, int32_t id);
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash_bytes(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == h && s.length == key.size() &&
          std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0) {
        return s.id;
      }
    }
  }
  size_t size() const { return size_; }

 private:
  struct slot {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t length = 0;
    int32_t id = -1;
  };
  void grow();

  std::vector<slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// A BPE merge: the rank (lower merges first) and the id of the merged token.
struct bpe_merge {
  int32_t rank = -1;
  int32_t new_id = -1;
};

// Maps a pair of symbol ids to its merge; find() returns rank -1 when absent.
class pair_merge_map {
 public:
  void reserve(size_t n);
  void insert(int32_t left, int32_t right, bpe_merge merge);  // inserts or overwrites
  bpe_merge find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = hash_mix(key) & mask_;; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.key == key) return s.merge;
      if (s.key == kEmpty) return {};
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ULL;
  struct slot {
    uint64_t key = kEmpty;
    bpe_merge merge;
  };
  static uint64_t pack(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  void grow();

  std::vector<slot> slots_ = std::vector<slot>(16);
  size_t mask_ = 15;
  size_t size_ = 0;
};

}  // namespace troupe::tok
