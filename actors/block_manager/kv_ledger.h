// kv_ledger: which blocks each request holds, over a block_pool. Applies the
// scheduler's one transaction a step (frees first, then grows in order) and
// answers with the appended block ids.
//
// Plain class, no CAF; one thread (the block manager actor's).
// Invariant: every block of every request is owned in the pool; the sum of
// the requests' blocks equals pool.num_blocks_used().
#pragma once

#include <unordered_map>
#include <vector>

#include "actors/block_manager/block_pool.h"
#include "actors/messages.h"

namespace troupe {

class kv_ledger {
 public:
  explicit kv_ledger(int64_t num_blocks) : pool_(num_blocks) {}

  // REQUIRES: the grows fit after the frees (the scheduler's mirror is exact).
  kv_grant apply(const kv_transaction& txn);

  const block_pool& pool() const { return pool_; }
  size_t num_requests() const { return blocks_.size(); }
  const std::vector<int32_t>* blocks_of(request_id id) const;

 private:
  block_pool pool_;
  std::unordered_map<request_id, std::vector<int32_t>> blocks_;
};

}  // namespace troupe
