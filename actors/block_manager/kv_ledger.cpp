#include "actors/block_manager/kv_ledger.h"

#include <algorithm>

#include "common/check.h"

namespace troupe {

kv_ledger::kv_ledger(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching,
                     int64_t num_cpu_blocks)
    : pool_(num_blocks), block_size_(block_size), prefix_caching_(enable_prefix_caching) {
  TROUPE_CHECK(block_size > 0);
  // Host block 0 is reserved like the device's null block.
  if (num_cpu_blocks > 0) cpu_pool_ = std::make_unique<block_pool>(num_cpu_blocks + 1);
}

void kv_ledger::free_request(request_id id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;  // never admitted (aborted while waiting)
  // Free the tail first so a request's earlier blocks stay longest in the
  // LRU order: they are the likeliest prefix-cache hits.
  std::vector<int32_t> reversed(it->second.blocks.rbegin(), it->second.blocks.rend());
  pool_.free(reversed);
  if (!it->second.cpu_blocks.empty()) cpu_pool_->free(it->second.cpu_blocks);
  requests_.erase(it);
}

void kv_ledger::swap_out(request_id id, kv_grant& grant) {
  auto it = requests_.find(id);
  TROUPE_CHECK_MSG(it != requests_.end() && cpu_pool_, "swap-out of an unknown request");
  request_blocks& r = it->second;
  TROUPE_CHECK_MSG(static_cast<int64_t>(r.blocks.size()) <= cpu_pool_->num_blocks_free(),
                   "swap-out does not fit: the scheduler's host-block count is wrong");
  r.cpu_blocks = cpu_pool_->allocate(static_cast<int64_t>(r.blocks.size()));
  for (size_t i = 0; i < r.blocks.size(); ++i) {
    grant.swap_out_src.push_back(r.blocks[i]);
    grant.swap_out_dst.push_back(r.cpu_blocks[i]);
  }
  std::vector<int32_t> reversed(r.blocks.rbegin(), r.blocks.rend());
  pool_.free(reversed);  // the copy runs before anything reuses them
  r.blocks.clear();
}

kv_admit_result kv_ledger::swap_in(const kv_admit& item, kv_grant& grant) {
  kv_admit_result result;
  auto it = requests_.find(item.id);
  TROUPE_CHECK_MSG(it != requests_.end() && !it->second.cpu_blocks.empty(),
                   "swap-in of a request that is not swapped out");
  request_blocks& r = it->second;
  const int64_t num_tokens = static_cast<int64_t>(item.token_ids.size());
  const int64_t scheduled = std::min(num_tokens - item.num_computed_tokens, item.num_new_tokens);
  const int64_t needed = (item.num_computed_tokens + scheduled + block_size_ - 1) / block_size_;
  TROUPE_CHECK(needed >= static_cast<int64_t>(r.cpu_blocks.size()));
  if (needed > pool_.num_blocks_free()) return result;  // refused
  r.blocks = pool_.allocate(needed);
  for (size_t i = 0; i < r.cpu_blocks.size(); ++i) {
    grant.swap_in_src.push_back(r.cpu_blocks[i]);
    grant.swap_in_dst.push_back(r.blocks[i]);
  }
  cpu_pool_->free(r.cpu_blocks);  // copied before the next swap-out can reuse them
  r.cpu_blocks.clear();
  r.tokens = item.token_ids;
  r.num_hashed_blocks = 0;  // new device blocks: register them afresh
  r.last_hash = 0;
  r.num_computed = item.num_computed_tokens + scheduled;
  register_full_blocks(r, item.num_computed_tokens + scheduled);
  result.admitted = true;
  result.num_cached_tokens = item.num_computed_tokens;
  result.block_ids = r.blocks;
  return result;
}

void kv_ledger::register_full_blocks(request_blocks& r, int64_t num_computed_tokens) {
  if (!prefix_caching_ || !r.cacheable) return;
  const int64_t full = std::min<int64_t>(num_computed_tokens / block_size_,
                                         static_cast<int64_t>(r.tokens.size()) / block_size_);
  for (int64_t b = r.num_hashed_blocks; b < full; ++b) {
    const int32_t* tokens = r.tokens.data() + b * block_size_;
    r.last_hash = kv_block_hash(r.last_hash, tokens, block_size_, r.lora_id);
    const int32_t block = r.blocks[static_cast<size_t>(b)];
    if (!pool_.is_cached(block)) pool_.cache(block, r.last_hash, tokens, block_size_);
  }
  r.num_hashed_blocks = std::max(r.num_hashed_blocks, full);
}

bool kv_ledger::grow(request_blocks& r, int64_t num_tokens_after, kv_grant& grant) {
  const int64_t needed = (num_tokens_after + block_size_ - 1) / block_size_;
  const int64_t fresh = std::max<int64_t>(0, needed - static_cast<int64_t>(r.blocks.size()));
  // Copy-on-write: the next token lands in a partly filled block that another
  // request shares (a fork): this request writes into a copy.
  const int64_t write_index = r.num_computed / block_size_;
  const bool cow = num_tokens_after > r.num_computed && r.num_computed % block_size_ != 0 &&
                   write_index < static_cast<int64_t>(r.blocks.size()) &&
                   pool_.ref_count(r.blocks[static_cast<size_t>(write_index)]) > 1;
  if (fresh + (cow ? 1 : 0) > pool_.num_blocks_free()) return false;
  grant.grow_cow_index.push_back(-1);
  grant.grow_cow_block.push_back(-1);
  if (cow) {
    const int32_t old_block = r.blocks[static_cast<size_t>(write_index)];
    const int32_t copy = pool_.allocate(1).front();
    grant.copy_src.push_back(old_block);
    grant.copy_dst.push_back(copy);
    r.blocks[static_cast<size_t>(write_index)] = copy;
    pool_.free({old_block});
    grant.grow_cow_index.back() = static_cast<int32_t>(write_index);
    grant.grow_cow_block.back() = copy;
  }
  std::vector<int32_t> out = pool_.allocate(fresh);
  r.blocks.insert(r.blocks.end(), out.begin(), out.end());
  r.num_computed = num_tokens_after;
  register_full_blocks(r, num_tokens_after);
  grant.grow_block_ids.push_back(std::move(out));
  return true;
}

void kv_ledger::fork(const kv_fork& item) {
  auto parent = requests_.find(item.parent);
  TROUPE_CHECK_MSG(parent != requests_.end(), "a fork names a parent the block manager does not hold");
  const request_blocks& p = parent->second;
  const int64_t shared = item.num_shared_tokens;
  const auto num_blocks = static_cast<size_t>((shared + block_size_ - 1) / block_size_);
  TROUPE_CHECK_MSG(num_blocks <= p.blocks.size() && shared <= p.num_computed,
                   "a fork shares more than its parent has computed");
  request_blocks child;  // the parent's first blocks, shared
  child.blocks.assign(p.blocks.begin(), p.blocks.begin() + static_cast<long>(num_blocks));
  for (int32_t b : child.blocks) pool_.share(b);
  child.tokens = item.token_ids;
  child.cacheable = p.cacheable;
  child.lora_id = p.lora_id;
  child.num_computed = shared;
  register_full_blocks(child, shared);  // its hash chain (the blocks are cached already)
  TROUPE_CHECK(requests_.emplace(item.child, std::move(child)).second);
}

std::vector<int32_t> kv_ledger::lookup(const std::vector<int32_t>& tokens, int64_t lora_id,
                                       uint64_t& last_hash) const {
  std::vector<int32_t> hits;
  last_hash = 0;
  // The last token is always computed: its logits are needed.
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / block_size_;
  uint64_t h = 0;
  for (int64_t b = 0; b < max_blocks; ++b) {
    const int32_t* block_tokens = tokens.data() + b * block_size_;
    h = kv_block_hash(h, block_tokens, block_size_, lora_id);
    const int32_t block = pool_.find_cached(h, block_tokens, block_size_);
    if (block < 0) break;
    hits.push_back(block);
    last_hash = h;
  }
  return hits;
}

kv_admit_result kv_ledger::admit(const kv_admit& item) {
  kv_admit_result result;
  const int64_t num_tokens = static_cast<int64_t>(item.token_ids.size());
  uint64_t last_hash = 0;
  std::vector<int32_t> hits;
  if (prefix_caching_ && item.use_prefix_cache) hits = lookup(item.token_ids, item.lora_id, last_hash);
  const int64_t cached_tokens = static_cast<int64_t>(hits.size()) * block_size_;
  const int64_t scheduled = std::min(num_tokens - cached_tokens, item.num_new_tokens);
  const int64_t needed = (cached_tokens + scheduled + block_size_ - 1) / block_size_;
  const int64_t fresh = needed - static_cast<int64_t>(hits.size());
  // Hits on free (cached) blocks take them off the free list too.
  int64_t free_hits = 0;
  for (int32_t b : hits) free_hits += pool_.is_free(b);
  if (fresh + free_hits > pool_.num_blocks_free()) return result;  // refused
  for (int32_t b : hits) pool_.share(b);
  request_blocks r;
  r.blocks = hits;
  const std::vector<int32_t> more = pool_.allocate(fresh);
  r.blocks.insert(r.blocks.end(), more.begin(), more.end());
  r.tokens = item.token_ids;
  r.num_hashed_blocks = static_cast<int64_t>(hits.size());
  r.last_hash = last_hash;
  r.cacheable = item.use_prefix_cache;
  r.lora_id = item.lora_id;
  r.num_computed = cached_tokens + scheduled;
  register_full_blocks(r, cached_tokens + scheduled);
  if (prefix_caching_ && item.use_prefix_cache) {
    queries_ += num_tokens;
    hits_ += cached_tokens;
  }
  result.admitted = true;
  result.num_cached_tokens = cached_tokens;
  result.block_ids = r.blocks;
  TROUPE_CHECK(requests_.emplace(item.id, std::move(r)).second);
  return result;
}

void kv_ledger::rollback(const kv_rollback& item) {
  auto it = requests_.find(item.id);
  TROUPE_CHECK_MSG(it != requests_.end(), "a rollback names a request the block manager does not hold");
  request_blocks& r = it->second;
  TROUPE_CHECK_MSG(item.num_tokens <= r.num_computed, "a rollback past what was computed");
  r.num_computed = item.num_tokens;
  const auto keep = static_cast<size_t>((item.num_tokens + block_size_ - 1) / block_size_);
  // Registered blocks hold known (verified) tokens only, all before the
  // rollback point.
  TROUPE_CHECK(static_cast<size_t>(r.num_hashed_blocks) <= keep);
  if (r.blocks.size() <= keep) return;
  pool_.free(std::vector<int32_t>(r.blocks.begin() + static_cast<long>(keep), r.blocks.end()));
  r.blocks.resize(keep);
}

kv_grant kv_ledger::apply(const kv_transaction& txn) {
  kv_grant grant;
  for (const kv_rollback& rb : txn.rollbacks) rollback(rb);
  for (request_id id : txn.swap_out_ids) swap_out(id, grant);
  for (const kv_fork& f : txn.forks) fork(f);
  for (request_id id : txn.free_ids) free_request(id);
  bool refusing = false;
  for (const kv_grow& g : txn.grows) {
    auto it = requests_.find(g.id);
    TROUPE_CHECK_MSG(it != requests_.end(), "a grow names a request the block manager does not hold");
    request_blocks& r = it->second;
    r.tokens.insert(r.tokens.end(), g.new_token_ids.begin(), g.new_token_ids.end());
    refusing = refusing || !grow(r, g.num_tokens_after, grant);
    grant.grow_ok.push_back(refusing ? 0 : 1);
    if (refusing) {
      grant.grow_block_ids.emplace_back();
      grant.grow_cow_index.push_back(-1);
      grant.grow_cow_block.push_back(-1);
    }
  }
  for (const kv_admit& a : txn.admits) {
    kv_admit_result r = refusing ? kv_admit_result{} : a.swap_in ? swap_in(a, grant) : admit(a);
    refusing = !r.admitted;
    grant.admits.push_back(std::move(r));
  }
  grant.num_blocks_free = pool_.num_blocks_free();
  grant.prefix_cache_queries = queries_;
  grant.prefix_cache_hits = hits_;
  grant.num_cpu_blocks_free = num_cpu_blocks_free();
  return grant;
}

const std::vector<int32_t>* kv_ledger::blocks_of(request_id id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second.blocks;
}

}  // namespace troupe
