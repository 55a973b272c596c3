#include "actors/block_manager/block_pool.h"

#include "common/check.h"

namespace troupe {

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
  --num_free_;
}

std::vector<int32_t> block_pool::allocate(int64_t n) {
  TROUPE_CHECK(n >= 0 && n <= num_free_);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t block = head_;
    unlink(block);
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

}  // namespace troupe
