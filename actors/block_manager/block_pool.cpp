#include "actors/block_manager/block_pool.h"

#include <algorithm>

#include "common/check.h"

namespace troupe {

namespace {

uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

uint64_t kv_block_hash(uint64_t parent, const int32_t* tokens, int64_t num_tokens,
                       int64_t lora_id) {
  uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ULL) ^ mix64(static_cast<uint64_t>(lora_id) + 1);
  for (int64_t i = 0; i < num_tokens; ++i) {
    h = mix64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) + 0x632be59bd9b4e019ULL));
  }
  return mix64(h ^ static_cast<uint64_t>(num_tokens));
}

block_pool::block_pool(int64_t num_blocks) : num_blocks_(num_blocks) {
  TROUPE_CHECK(num_blocks >= 2);
  nodes_.resize(static_cast<size_t>(num_blocks));
  nodes_[0].ref_count = 1;  // the null block is permanently owned
  for (int64_t b = 1; b < num_blocks; ++b) push_back(static_cast<int32_t>(b));
}

void block_pool::push_back(int32_t block) {
  node& n = nodes_[static_cast<size_t>(block)];
  n.prev = tail_;
  n.next = -1;
  n.in_free_list = true;
  if (tail_ >= 0) {
    nodes_[static_cast<size_t>(tail_)].next = block;
  } else {
    head_ = block;
  }
  tail_ = block;
  ++num_free_;
}

void block_pool::unlink(int32_t block) {
  node& n = nodes_[static_cast<size_t>(block)];
  TROUPE_CHECK(n.in_free_list);
  if (n.prev >= 0) {
    nodes_[static_cast<size_t>(n.prev)].next = n.next;
  } else {
    head_ = n.next;
  }
  if (n.next >= 0) {
    nodes_[static_cast<size_t>(n.next)].prev = n.prev;
  } else {
    tail_ = n.prev;
  }
  n.prev = n.next = -1;
  n.in_free_list = false;
  --num_free_;
}

void block_pool::evict(int32_t block) {
  node& n = nodes_[static_cast<size_t>(block)];
  if (!n.cached) return;
  cached_.erase(n.hash);
  n.cached = false;
  n.hash = 0;
}

std::vector<int32_t> block_pool::allocate(int64_t n) {
  TROUPE_CHECK(n >= 0 && n <= num_free_);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t block = head_;
    unlink(block);
    evict(block);  // lazy eviction: a cached free block is reused only now
    nodes_[static_cast<size_t>(block)].ref_count = 1;
    out.push_back(block);
  }
  return out;
}

void block_pool::free(const std::vector<int32_t>& blocks) {
  for (int32_t block : blocks) {
    TROUPE_CHECK(block > 0 && block < num_blocks_);
    node& n = nodes_[static_cast<size_t>(block)];
    TROUPE_CHECK(n.ref_count > 0);
    if (--n.ref_count == 0) push_back(block);
  }
}

void block_pool::share(int32_t block) {
  TROUPE_CHECK(block > 0 && block < num_blocks_);
  node& n = nodes_[static_cast<size_t>(block)];
  if (n.ref_count == 0) unlink(block);
  ++n.ref_count;
}

int32_t block_pool::find_cached(uint64_t hash, const int32_t* tokens, int64_t num_tokens) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return -1;
  const std::vector<int32_t>& stored = it->second.tokens;
  if (static_cast<int64_t>(stored.size()) != num_tokens ||
      !std::equal(stored.begin(), stored.end(), tokens)) {
    return -1;  // a collision: treat as a miss
  }
  return it->second.block;
}

void block_pool::cache(int32_t block, uint64_t hash, const int32_t* tokens, int64_t num_tokens) {
  node& n = nodes_[static_cast<size_t>(block)];
  TROUPE_CHECK(n.ref_count > 0 && !n.cached);
  if (cached_.count(hash) != 0) return;
  cached_.emplace(hash, cache_entry{block, std::vector<int32_t>(tokens, tokens + num_tokens)});
  n.cached = true;
  n.hash = hash;
}

std::string block_pool::check_invariants() const {
  if (nodes_[0].ref_count != 1 || nodes_[0].in_free_list) return "null block is not owned";
  int64_t walked = 0;
  int32_t prev = -1;
  for (int32_t b = head_; b >= 0; b = nodes_[static_cast<size_t>(b)].next) {
    const node& n = nodes_[static_cast<size_t>(b)];
    if (!n.in_free_list || n.ref_count != 0) return "block " + std::to_string(b) + " in the free list is owned";
    if (n.prev != prev) return "free list links broken at block " + std::to_string(b);
    prev = b;
    if (++walked > num_blocks_) return "free list has a cycle";
  }
  if (prev != tail_) return "free list tail is wrong";
  if (walked != num_free_) return "num_free is " + std::to_string(num_free_) + ", list has " + std::to_string(walked);
  int64_t zero_refs = 0, cached_nodes = 0;
  for (int64_t b = 1; b < num_blocks_; ++b) {
    const node& n = nodes_[static_cast<size_t>(b)];
    if (n.ref_count < 0) return "negative ref count";
    if ((n.ref_count == 0) != n.in_free_list) return "block " + std::to_string(b) + " free-list flag disagrees with ref count";
    zero_refs += n.ref_count == 0;
    if (n.cached) {
      ++cached_nodes;
      auto it = cached_.find(n.hash);
      if (it == cached_.end() || it->second.block != b) return "cached block " + std::to_string(b) + " is not in the map";
    }
  }
  if (zero_refs != num_free_) return "free count disagrees with ref counts";
  if (cached_nodes != static_cast<int64_t>(cached_.size())) return "cache map has stale entries";
  return "";
}

}  // namespace troupe
