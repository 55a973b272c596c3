// block_pool: the paged KV cache's blocks. Block 0 is the reserved null
// block (never handed out; padding slots point at it). Every other block is
// either free (on the LRU free list, ref_count 0) or owned (ref_count >= 1).
// The free list is intrusive and doubly linked, so taking a block from its
// middle (a prefix-cache hit on a cached free block, later) is O(1), as in
// vLLM's FreeKVCacheBlockQueue. Blocks are allocated from the head (least
// recently freed) and freed to the tail.
//
// Plain class, no CAF; one thread (the block manager actor's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace troupe {

class block_pool {
 public:
  // REQUIRES: num_blocks >= 2 (the null block plus at least one).
  explicit block_pool(int64_t num_blocks);

  int64_t num_blocks_total() const { return num_blocks_; }
  // Usable blocks, excluding the null block.
  int64_t num_blocks_usable() const { return num_blocks_ - 1; }
  int64_t num_blocks_free() const { return num_free_; }
  int64_t num_blocks_used() const { return num_blocks_usable() - num_free_; }

  // Takes n blocks from the free list (ref_count becomes 1).
  // REQUIRES: n <= num_blocks_free().
  std::vector<int32_t> allocate(int64_t n);

  // Drops one reference to each block; blocks reaching 0 go to the free
  // list's tail, in the order given. REQUIRES: each block is owned.
  void free(const std::vector<int32_t>& blocks);

  int32_t ref_count(int32_t block) const { return nodes_[static_cast<size_t>(block)].ref_count; }

 private:
  struct node {
    int32_t prev = -1;
    int32_t next = -1;
    int32_t ref_count = 0;
  };
  void push_back(int32_t block);
  void unlink(int32_t block);

  int64_t num_blocks_;
  int64_t num_free_ = 0;
  std::vector<node> nodes_;
  int32_t head_ = -1;
  int32_t tail_ = -1;
};

}  // namespace troupe
