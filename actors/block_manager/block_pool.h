// block_pool: the paged KV cache's blocks. Block 0 is the reserved null
// block (never handed out; padding slots point at it). Every other block is
// either free (on the LRU free list, ref_count 0) or owned (ref_count >= 1,
// shared when > 1: prefix-cache hits and forks).
//
// The free list is intrusive and doubly linked (vLLM's FreeKVCacheBlockQueue),
// so taking a block from its middle — a prefix-cache hit on a cached free
// block — is O(1). Blocks are allocated from the head (least recently freed)
// and freed to the tail.
//
// Prefix cache: a full block may be registered under its chained hash with
// its tokens. A cached block stays findable while free; it is evicted lazily,
// only when allocate() hands it out again (LRU order). Lookups verify the
// tokens, so a hash collision is a miss, never a wrong hit.
//
// Plain class, no CAF; one thread (the block manager actor's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace troupe {

class block_pool {
 public:
  // REQUIRES: num_blocks >= 2 (the null block plus at least one).
  explicit block_pool(int64_t num_blocks);

  int64_t num_blocks_total() const { return num_blocks_; }
  // Usable blocks, excluding the null block.
  int64_t num_blocks_usable() const { return num_blocks_ - 1; }
  // Free blocks, cached ones (evictable) included.
  int64_t num_blocks_free() const { return num_free_; }
  int64_t num_blocks_used() const { return num_blocks_usable() - num_free_; }
  int64_t num_blocks_cached() const { return static_cast<int64_t>(cached_.size()); }

  // Takes n blocks from the free list's head (ref_count becomes 1), evicting
  // the cache entries of cached ones. REQUIRES: n <= num_blocks_free().
  std::vector<int32_t> allocate(int64_t n);

  // Drops one reference to each block; blocks reaching 0 go to the free
  // list's tail, in the order given (cached ones stay findable).
  // REQUIRES: each block is owned.
  void free(const std::vector<int32_t>& blocks);

  // Adds a reference (a prefix-cache hit or a fork); a free block leaves the
  // free list. REQUIRES: block is a usable block.
  void share(int32_t block);

  // The cached block with this hash and exactly these tokens, or -1.
  int32_t find_cached(uint64_t hash, const int32_t* tokens, int64_t num_tokens) const;
  // Registers an owned, uncached block under hash (no-op when another block
  // already holds the hash: the first one stays the cache's copy).
  void cache(int32_t block, uint64_t hash, const int32_t* tokens, int64_t num_tokens);
  bool is_cached(int32_t block) const { return nodes_[static_cast<size_t>(block)].cached; }

  int32_t ref_count(int32_t block) const { return nodes_[static_cast<size_t>(block)].ref_count; }
  bool is_free(int32_t block) const { return ref_count(block) == 0; }

  // Every invariant, checked exhaustively (for tests): "" when all hold.
  std::string check_invariants() const;

 private:
  struct node {
    int32_t prev = -1;
    int32_t next = -1;
    int32_t ref_count = 0;
    bool in_free_list = false;
    bool cached = false;
    uint64_t hash = 0;
  };
  struct cache_entry {
    int32_t block;
    std::vector<int32_t> tokens;
  };
  void push_back(int32_t block);
  void unlink(int32_t block);
  void evict(int32_t block);

  int64_t num_blocks_;
  int64_t num_free_ = 0;
  std::vector<node> nodes_;
  int32_t head_ = -1;
  int32_t tail_ = -1;
  std::unordered_map<uint64_t, cache_entry> cached_;
};

// Chained hash of one full block: (parent block's hash, its tokens, the LoRA
// adapter id). The first block's parent is 0.
uint64_t kv_block_hash(uint64_t parent, const int32_t* tokens, int64_t num_tokens,
                       int64_t lora_id);

}  // namespace troupe
