#include "model/tokenizer/bpe_cache.h"

#include <array>
#include <memory>

namespace troupe::tok {
namespace {

constexpr size_t kCachesPerThread = 4;

struct thread_caches {
  struct entry {
    uint64_t owner = 0;
    uint64_t last_use = 0;
    std::unique_ptr<bpe_cache> cache;
  };
  std::array<entry, kCachesPerThread> entries;
  uint64_t clock = 0;
  entry* last = nullptr;
};

}  // namespace

bpe_cache& bpe_cache::for_thread(uint64_t owner) {
  thread_local thread_caches caches;
  if (caches.last != nullptr && caches.last->owner == owner) return *caches.last->cache;
  ++caches.clock;
  thread_caches::entry* victim = &caches.entries[0];
  for (auto& e : caches.entries) {
    if (e.owner == owner && e.cache) {
      e.last_use = caches.clock;
      caches.last = &e;
      return *e.cache;
    }
    if (e.last_use < victim->last_use) victim = &e;
  }
  victim->owner = owner;
  victim->last_use = caches.clock;
  victim->cache = std::make_unique<bpe_cache>();  // a recycled owner's entries are stale
  caches.last = victim;
  return *victim->cache;
}

}  // namespace troupe::tok
