#include "actors/block_manager/kv_ledger.h"

#include "common/check.h"

namespace troupe {

kv_grant kv_ledger::apply(const kv_transaction& txn) {
  for (request_id id : txn.free_ids) {
    auto it = blocks_.find(id);
    if (it == blocks_.end()) continue;  // never grown (e.g. aborted while waiting)
    // Free the tail first so a request's earlier blocks stay longest in the
    // LRU order (they are the likeliest prefix-cache hits later).
    std::vector<int32_t> reversed(it->second.rbegin(), it->second.rend());
    pool_.free(reversed);
    blocks_.erase(it);
  }
  kv_grant grant;
  grant.new_block_ids.reserve(txn.grow_ids.size());
  TROUPE_CHECK(txn.grow_ids.size() == txn.grow_num_blocks.size());
  for (size_t i = 0; i < txn.grow_ids.size(); ++i) {
    TROUPE_CHECK_MSG(txn.grow_num_blocks[i] <= pool_.num_blocks_free(),
                     "scheduler's free-block mirror is out of step with the pool");
    std::vector<int32_t> fresh = pool_.allocate(txn.grow_num_blocks[i]);
    std::vector<int32_t>& mine = blocks_[txn.grow_ids[i]];
    mine.insert(mine.end(), fresh.begin(), fresh.end());
    grant.new_block_ids.push_back(std::move(fresh));
  }
  grant.num_blocks_free = pool_.num_blocks_free();
  return grant;
}

const std::vector<int32_t>* kv_ledger::blocks_of(request_id id) const {
  auto it = blocks_.find(id);
  return it == blocks_.end() ? nullptr : &it->second;
}

}  // namespace troupe
