// bpe_cache: a per-thread, direct-mapped cache from a pre-tokenized piece to
// its BPE ids, as `tokenizers` keeps one per BPE model and thread. Pieces
// repeat a lot in real text, so this skips most merge loops. Each thread
// holds caches for a few models at once (keyed by the model's unique
// owner id); the least recently claimed is recycled. No locking: a cache is
// only touched by its own thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::tok {

class bpe_cache {
 public:
  static constexpr size_t kSlots = 8192;
  static constexpr size_t kMaxPieceBytes = 256;  // longer pieces are not cached

  // The ids cached for `piece` (with hash `hash`), or nullptr.
  const std::vector<int32_t>* find(uint64_t hash, std::string_view piece) const {
    const slot& s = slots_[hash & (kSlots - 1)];
    if (s.hash != hash || s.key != piece) return nullptr;
    return &s.ids;
  }
  void store(uint64_t hash, std::string_view piece, const int32_t* ids, size_t n) {
    slot& s = slots_[hash & (kSlots - 1)];
    s.hash = hash;
    s.key.assign(piece);
    s.ids.assign(ids, ids + n);
  }

  // This thread's cache for the model `owner` (a process-unique id).
  static bpe_cache& for_thread(uint64_t owner);

 private:
  struct slot {
    uint64_t hash = 0;
    std::string key;
    std::vector<int32_t> ids;
  };
  std::vector<slot> slots_ = std::vector<slot>(kSlots);
};

}  // namespace troupe::tok
