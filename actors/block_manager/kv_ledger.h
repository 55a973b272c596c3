// kv_ledger: which blocks each request holds, over a block_pool of device
// blocks and (with swap_space) a block_pool of host blocks, and the prefix
// cache's bookkeeping. Applies the scheduler's one transaction a step:
// rollbacks (blocks that held only rejected draft tokens go back),
// swap-outs (device blocks -> fresh host blocks, device blocks freed), frees,
// grows of running requests, then admissions (each looking up the prefix
// cache once; a swapped request gets device blocks back for its host ones),
// and registers every block that becomes full of computed tokens under its
// chained hash. The grant lists the block copies the worker must run before
// the step's forward pass (swap-outs first).
//
// A block is registered when the step that computes it is scheduled, so a
// later admission in the same transaction may hit a block this very step is
// computing. That is safe because the model writes the step's K/V for every
// token of a layer before that layer's attention reads any (the ops
// contract: write_kv_cache, then paged_attention); the hitting request only
// reads those slots. Steps run one at a time; overlapping steps must keep
// this ordering.
//
// Plain class, no CAF; one thread (the block manager actor's).
// Invariant: every block of every request is owned in the pool, once per
// request holding it.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "actors/block_manager/block_pool.h"
#include "actors/messages.h"

namespace troupe {

class kv_ledger {
 public:
  kv_ledger(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching,
            int64_t num_cpu_blocks = 0);

  // Grows that do not fit are refused (with every later grow and admission):
  // the scheduler's free count is an estimate once blocks are shared.
  kv_grant apply(const kv_transaction& txn);

  const block_pool& pool() const { return pool_; }
  int64_t num_cpu_blocks_free() const { return cpu_pool_ ? cpu_pool_->num_blocks_free() : 0; }
  size_t num_requests() const { return requests_.size(); }
  const std::vector<int32_t>* blocks_of(request_id id) const;

 private:
  struct request_blocks {
    std::vector<int32_t> blocks;
    std::vector<int32_t> tokens;  // every known token
    int64_t num_hashed_blocks = 0;
    uint64_t last_hash = 0;  // hash of block num_hashed_blocks - 1
    bool cacheable = false;
    int64_t lora_id = 0;  // its adapter: part of every block hash
    std::vector<int32_t> cpu_blocks;  // while swapped out
    int64_t num_computed = 0;  // tokens whose KV the blocks hold (after the step)
  };

  void free_request(request_id id);
  // Rejected drafts: the KV past item.num_tokens is invalid; blocks past it go.
  void rollback(const kv_rollback& item);
  // false when it does not fit (nothing changed then).
  bool grow(request_blocks& r, int64_t num_tokens_after, kv_grant& grant);
  void fork(const kv_fork& item);
  kv_admit_result admit(const kv_admit& item);
  void swap_out(request_id id, kv_grant& grant);
  kv_admit_result swap_in(const kv_admit& item, kv_grant& grant);
  // Hit blocks of the longest cached prefix (at most num_tokens - 1 tokens).
  std::vector<int32_t> lookup(const std::vector<int32_t>& tokens, int64_t lora_id,
                              uint64_t& last_hash) const;
  void register_full_blocks(request_blocks& r, int64_t num_computed_tokens);

  block_pool pool_;
  std::unique_ptr<block_pool> cpu_pool_;  // null without swap space
  int64_t block_size_;
  bool prefix_caching_;
  std::unordered_map<request_id, request_blocks> requests_;
  int64_t queries_ = 0;
  int64_t hits_ = 0;
};

}  // namespace troupe
