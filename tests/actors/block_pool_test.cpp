// block_pool (null block, counts, LRU free list, ref counts, sharing, the
// prefix cache with lazy eviction) and kv_ledger (one transaction a step:
// frees, then grows, then admissions with their prefix-cache lookups).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "actors/block_manager/block_pool.h"
#include "actors/block_manager/kv_ledger.h"

namespace troupe {
namespace {

using ids = std::vector<int32_t>;

TEST(block_pool_test, counts_exclude_the_null_block) {
  block_pool pool(8);
  EXPECT_EQ(pool.num_blocks_total(), 8);
  EXPECT_EQ(pool.num_blocks_usable(), 7);
  EXPECT_EQ(pool.num_blocks_free(), 7);
  EXPECT_EQ(pool.num_blocks_used(), 0);
  const ids a = pool.allocate(3);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(pool.num_blocks_free(), 4);
  EXPECT_EQ(pool.num_blocks_used(), 3);
  pool.free(a);
  EXPECT_EQ(pool.num_blocks_free(), 7);
  EXPECT_EQ(pool.num_blocks_used(), 0);
  EXPECT_TRUE(pool.allocate(0).empty());
  EXPECT_EQ(pool.num_blocks_free(), 7);
}

TEST(block_pool_test, null_block_is_never_handed_out) {
  block_pool pool(6);
  for (int round = 0; round < 4; ++round) {
    const ids all = pool.allocate(5);
    EXPECT_EQ(std::set<int32_t>(all.begin(), all.end()), (std::set<int32_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(pool.num_blocks_free(), 0);
    EXPECT_EQ(pool.ref_count(0), 1);  // permanently owned
    ids shuffled = all;
    std::rotate(shuffled.begin(), shuffled.begin() + round % 5, shuffled.end());
    pool.free(shuffled);
  }
}

TEST(block_pool_test, allocates_from_the_head_and_frees_to_the_tail) {
  block_pool pool(7);
  EXPECT_EQ(pool.allocate(6), (ids{1, 2, 3, 4, 5, 6}));  // initial order
  pool.free({4, 2, 6});                                  // free list: 4 2 6
  pool.free({1});                                        // 4 2 6 1
  EXPECT_EQ(pool.allocate(2), (ids{4, 2}));              // 6 1
  pool.free({3, 4});                                     // 6 1 3 4
  EXPECT_EQ(pool.allocate(4), (ids{6, 1, 3, 4}));
  EXPECT_EQ(pool.num_blocks_free(), 0);
}

TEST(block_pool_test, ref_counts_follow_ownership) {
  block_pool pool(5);
  const ids a = pool.allocate(2);
  for (int32_t b : a) EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(pool.ref_count(3), 0);
  EXPECT_EQ(pool.ref_count(4), 0);
  pool.free({a[0]});
  EXPECT_EQ(pool.ref_count(a[0]), 0);
  EXPECT_EQ(pool.ref_count(a[1]), 1);
}

TEST(block_pool_test, share_adds_a_reference_and_takes_a_free_block_off_the_list) {
  block_pool pool(6);
  const ids a = pool.allocate(2);  // 1 2; free: 3 4 5
  pool.share(a[0]);
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  EXPECT_EQ(pool.num_blocks_free(), 3);
  pool.free({a[0]});
  EXPECT_EQ(pool.ref_count(a[0]), 1);  // still owned: not on the free list
  EXPECT_FALSE(pool.is_free(a[0]));
  EXPECT_EQ(pool.num_blocks_free(), 3);
  // Sharing a free block takes it from the middle of the free list.
  pool.share(4);
  EXPECT_EQ(pool.ref_count(4), 1);
  EXPECT_EQ(pool.num_blocks_free(), 2);
  EXPECT_EQ(pool.check_invariants(), "");
  EXPECT_EQ(pool.allocate(2), (ids{3, 5}));
  pool.free({a[0], a[1], 4});
  EXPECT_EQ(pool.num_blocks_free(), 3);
  EXPECT_EQ(pool.allocate(3), (ids{1, 2, 4}));
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(block_pool_test, find_cached_verifies_the_tokens) {
  block_pool pool(5);
  const ids a = pool.allocate(2);
  const ids t1 = {11, 12, 13, 14}, t2 = {21, 22, 23, 24};
  EXPECT_EQ(pool.num_blocks_cached(), 0);
  pool.cache(a[0], 0xabc, t1.data(), 4);
  EXPECT_TRUE(pool.is_cached(a[0]));
  EXPECT_FALSE(pool.is_cached(a[1]));
  EXPECT_EQ(pool.num_blocks_cached(), 1);
  EXPECT_EQ(pool.find_cached(0xabc, t1.data(), 4), a[0]);
  EXPECT_EQ(pool.find_cached(0xabd, t1.data(), 4), -1);  // another hash
  // The same hash with other tokens (a collision) is a miss, never a wrong hit.
  EXPECT_EQ(pool.find_cached(0xabc, t2.data(), 4), -1);
  const ids t1_changed = {11, 12, 13, 15};
  EXPECT_EQ(pool.find_cached(0xabc, t1_changed.data(), 4), -1);
  EXPECT_EQ(pool.find_cached(0xabc, t1.data(), 3), -1);  // a shorter block
  // A hash already held keeps its first block.
  pool.cache(a[1], 0xabc, t2.data(), 4);
  EXPECT_FALSE(pool.is_cached(a[1]));
  EXPECT_EQ(pool.find_cached(0xabc, t1.data(), 4), a[0]);
  EXPECT_EQ(pool.find_cached(0xabc, t2.data(), 4), -1);
  EXPECT_EQ(pool.num_blocks_cached(), 1);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(block_pool_test, cached_free_blocks_stay_findable_until_allocate_reuses_them) {
  block_pool pool(6);
  const ids a = pool.allocate(5);  // 1..5, nothing free
  const ids t[3] = {{1, 1}, {2, 2}, {3, 3}};
  pool.cache(2, 102, t[0].data(), 2);
  pool.cache(4, 104, t[1].data(), 2);
  pool.cache(5, 105, t[2].data(), 2);
  pool.free({4, 1, 2, 3, 5});  // free list: 4 1 2 3 5
  EXPECT_EQ(pool.num_blocks_free(), 5);
  EXPECT_EQ(pool.num_blocks_cached(), 3);
  for (int32_t b : {2, 4, 5}) {
    EXPECT_TRUE(pool.is_free(b) && pool.is_cached(b)) << "block " << b;
  }
  EXPECT_EQ(pool.find_cached(104, t[1].data(), 2), 4);
  EXPECT_EQ(pool.check_invariants(), "");
  // The least recently freed go first: 4 is evicted, 2 and 5 stay cached.
  EXPECT_EQ(pool.allocate(2), (ids{4, 1}));
  EXPECT_FALSE(pool.is_cached(4));
  EXPECT_EQ(pool.find_cached(104, t[1].data(), 2), -1);
  EXPECT_EQ(pool.find_cached(102, t[0].data(), 2), 2);
  EXPECT_EQ(pool.num_blocks_cached(), 2);
  // A hit takes 5 off the free list (it stays cached while owned), so the
  // next allocations pass it by.
  pool.share(pool.find_cached(105, t[2].data(), 2));
  EXPECT_EQ(pool.ref_count(5), 1);
  EXPECT_TRUE(pool.is_cached(5));
  EXPECT_EQ(pool.allocate(2), (ids{2, 3}));
  EXPECT_EQ(pool.find_cached(102, t[0].data(), 2), -1);
  EXPECT_EQ(pool.num_blocks_cached(), 1);
  EXPECT_EQ(pool.num_blocks_free(), 0);
  EXPECT_EQ(pool.check_invariants(), "");
  // Freed again, a cached block is findable again; re-registering a block
  // that was evicted works.
  pool.free({5, 2});
  EXPECT_EQ(pool.find_cached(105, t[2].data(), 2), 5);
  pool.share(2);
  pool.cache(2, 102, t[0].data(), 2);
  EXPECT_EQ(pool.find_cached(102, t[0].data(), 2), 2);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(block_pool_test, kv_block_hash_chains_parent_tokens_and_adapter) {
  const ids t = {5, 6, 7, 8}, u = {5, 6, 7, 9};
  const uint64_t h = kv_block_hash(0, t.data(), 4, 0);
  EXPECT_EQ(h, kv_block_hash(0, t.data(), 4, 0));
  EXPECT_NE(h, kv_block_hash(0, u.data(), 4, 0));
  EXPECT_NE(h, kv_block_hash(1, t.data(), 4, 0));  // another prefix before it
  EXPECT_NE(h, kv_block_hash(0, t.data(), 4, 1));  // another LoRA adapter
  EXPECT_NE(h, kv_block_hash(0, t.data(), 3, 0));
  EXPECT_NE(kv_block_hash(h, t.data(), 4, 0), h);
}

TEST(block_pool_death_test, misuse_is_caught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(block_pool(1), "check failed");
  EXPECT_DEATH(
      {
        block_pool pool(4);
        pool.allocate(4);
      },
      "check failed");
  EXPECT_DEATH(
      {
        block_pool pool(4);
        pool.free({0});
      },
      "check failed");
  EXPECT_DEATH(
      {
        block_pool pool(4);
        const ids a = pool.allocate(1);
        pool.free(a);
        pool.free(a);
      },
      "check failed");
  const ids t = {1, 2};
  EXPECT_DEATH(
      {
        block_pool pool(4);
        pool.cache(1, 7, t.data(), 2);  // a free block
      },
      "check failed");
  EXPECT_DEATH(
      {
        block_pool pool(4);
        pool.allocate(1);
        pool.cache(1, 7, t.data(), 2);
        pool.cache(1, 8, t.data(), 2);  // already cached
      },
      "check failed");
  EXPECT_DEATH(
      {
        block_pool pool(4);
        pool.share(0);
      },
      "check failed");
  EXPECT_DEATH(
      {
        block_pool pool(4);
        pool.share(4);
      },
      "check failed");
}

// ---- kv_ledger -------------------------------------------------------------

ids toks(int32_t first, int64_t n) {
  ids v;
  for (int64_t i = 0; i < n; ++i) v.push_back(first + static_cast<int32_t>(i));
  return v;
}

ids concat(ids a, const ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

kv_grow grow_of(request_id id, ids new_token_ids, int64_t num_tokens_after) {
  return kv_grow{id, std::move(new_token_ids), num_tokens_after};
}

kv_admit admit_of(request_id id, ids token_ids, int64_t num_new_tokens,
                  bool use_prefix_cache = true) {
  kv_admit a;
  a.id = id;
  a.token_ids = std::move(token_ids);
  a.num_new_tokens = num_new_tokens;
  a.use_prefix_cache = use_prefix_cache;
  return a;
}

kv_transaction txn(std::vector<request_id> free_ids, std::vector<kv_grow> grows = {},
                   std::vector<kv_admit> admits = {}) {
  kv_transaction t;
  t.free_ids = std::move(free_ids);
  t.grows = std::move(grows);
  t.admits = std::move(admits);
  return t;
}

// Every block's ref count is the number of listed requests holding it.
void expect_ref_counts_match(const kv_ledger& ledger, const std::vector<request_id>& live) {
  std::vector<int32_t> refs(static_cast<size_t>(ledger.pool().num_blocks_total()), 0);
  for (request_id id : live) {
    const ids* b = ledger.blocks_of(id);
    ASSERT_NE(b, nullptr) << "request " << id;
    for (int32_t block : *b) ++refs[static_cast<size_t>(block)];
  }
  for (int32_t b = 1; b < ledger.pool().num_blocks_total(); ++b) {
    EXPECT_EQ(ledger.pool().ref_count(b), refs[static_cast<size_t>(b)]) << "block " << b;
  }
  EXPECT_EQ(ledger.num_requests(), live.size());
  EXPECT_EQ(ledger.pool().check_invariants(), "");
}

TEST(block_pool_kv_ledger_test, admissions_take_blocks_for_the_scheduled_tokens) {
  kv_ledger ledger(10, 4, false);  // 9 usable
  const kv_grant g = ledger.apply(txn({}, {}, {admit_of(1, toks(100, 10), 10),
                                               admit_of(2, toks(200, 9), 5)}));  // a chunk
  ASSERT_EQ(g.admits.size(), 2u);
  EXPECT_TRUE(g.admits[0].admitted);
  EXPECT_EQ(g.admits[0].num_cached_tokens, 0);
  EXPECT_EQ(g.admits[0].block_ids, (ids{1, 2, 3}));
  EXPECT_TRUE(g.admits[1].admitted);
  EXPECT_EQ(g.admits[1].block_ids, (ids{4, 5}));
  EXPECT_TRUE(g.grow_block_ids.empty());
  EXPECT_EQ(g.num_blocks_free, 4);
  EXPECT_EQ(*ledger.blocks_of(1), (ids{1, 2, 3}));
  EXPECT_EQ(*ledger.blocks_of(2), (ids{4, 5}));
  EXPECT_EQ(ledger.blocks_of(3), nullptr);
  expect_ref_counts_match(ledger, {1, 2});
}

TEST(block_pool_kv_ledger_test, grows_append_per_request_in_order) {
  kv_ledger ledger(10, 4, false);
  ledger.apply(txn({}, {}, {admit_of(1, toks(100, 8), 8), admit_of(2, toks(200, 9), 5)}));
  // 1 learnt its first token and decodes it (9 tokens: a third block); 2
  // computes the rest of its prompt (9 tokens: a third block).
  kv_grant g = ledger.apply(txn({}, {grow_of(2, {}, 9), grow_of(1, {7}, 9)}));
  ASSERT_EQ(g.grow_block_ids.size(), 2u);
  EXPECT_EQ(g.grow_block_ids[0], (ids{5}));
  EXPECT_EQ(g.grow_block_ids[1], (ids{6}));
  EXPECT_EQ(g.grow_ok, (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(g.num_blocks_free, 3);
  // Within the last block: nothing new.
  g = ledger.apply(txn({}, {grow_of(1, {8}, 10), grow_of(2, {9}, 10)}));
  EXPECT_TRUE(g.grow_block_ids[0].empty());
  EXPECT_TRUE(g.grow_block_ids[1].empty());
  EXPECT_EQ(g.num_blocks_free, 3);
  // A chunk spanning two new blocks.
  g = ledger.apply(txn({}, {grow_of(1, {9}, 17)}));
  EXPECT_EQ(g.grow_block_ids[0], (ids{7, 8}));
  EXPECT_EQ(*ledger.blocks_of(1), (ids{1, 2, 6, 7, 8}));
  EXPECT_EQ(*ledger.blocks_of(2), (ids{3, 4, 5}));
  expect_ref_counts_match(ledger, {1, 2});
}

TEST(block_pool_kv_ledger_test, frees_apply_before_grows_and_admissions) {
  kv_ledger ledger(5, 4, false);  // 4 usable
  ledger.apply(txn({}, {}, {admit_of(1, toks(100, 12), 12)}));
  ledger.apply(txn({}, {}, {admit_of(2, toks(200, 1), 1)}));
  EXPECT_EQ(ledger.pool().num_blocks_free(), 0);
  // 2 grows into a block 1 frees in the same transaction; 3 takes the rest.
  const kv_grant g = ledger.apply(txn({1}, {grow_of(2, {5}, 5)}, {admit_of(3, toks(300, 8), 8)}));
  EXPECT_EQ(g.grow_ok, (std::vector<uint8_t>{1}));
  // 1's blocks went to the tail last block first.
  EXPECT_EQ(g.grow_block_ids[0], (ids{3}));
  ASSERT_TRUE(g.admits[0].admitted);
  EXPECT_EQ(g.admits[0].block_ids, (ids{2, 1}));
  EXPECT_EQ(g.num_blocks_free, 0);
  EXPECT_EQ(ledger.blocks_of(1), nullptr);
  expect_ref_counts_match(ledger, {2, 3});
}

TEST(block_pool_kv_ledger_test, freeing_returns_every_block_and_unknown_ids_are_ignored) {
  kv_ledger ledger(9, 4, false);
  ledger.apply(txn({}, {}, {admit_of(1, toks(100, 12), 12), admit_of(2, toks(200, 8), 8)}));
  ledger.apply(txn({}, {grow_of(1, {1}, 13)}));
  kv_grant g = ledger.apply(txn({7, 2}));  // 7 was never admitted
  EXPECT_EQ(g.num_blocks_free, 4);
  EXPECT_TRUE(g.grow_block_ids.empty());
  EXPECT_EQ(ledger.blocks_of(2), nullptr);
  g = ledger.apply(txn({1}));
  EXPECT_EQ(g.num_blocks_free, 8);
  EXPECT_EQ(ledger.pool().num_blocks_free(), ledger.pool().num_blocks_usable());
  EXPECT_EQ(ledger.num_requests(), 0u);
  EXPECT_EQ(ledger.pool().check_invariants(), "");
}

TEST(block_pool_kv_ledger_test, a_refused_admission_refuses_every_later_one) {
  kv_ledger ledger(5, 4, false);  // 4 usable
  const kv_grant g = ledger.apply(txn({}, {}, {admit_of(1, toks(100, 8), 8),
                                               admit_of(2, toks(200, 12), 12),  // 3: too many
                                               admit_of(3, toks(300, 4), 4)}));  // would fit
  ASSERT_EQ(g.admits.size(), 3u);
  EXPECT_TRUE(g.admits[0].admitted);
  EXPECT_FALSE(g.admits[1].admitted);
  EXPECT_TRUE(g.admits[1].block_ids.empty());
  EXPECT_FALSE(g.admits[2].admitted);
  EXPECT_EQ(g.num_blocks_free, 2);
  EXPECT_EQ(ledger.blocks_of(2), nullptr);
  EXPECT_EQ(ledger.blocks_of(3), nullptr);
  expect_ref_counts_match(ledger, {1});
  // Asked again on its own, 3 fits.
  EXPECT_TRUE(ledger.apply(txn({}, {}, {admit_of(3, toks(300, 4), 4)})).admits[0].admitted);
  expect_ref_counts_match(ledger, {1, 3});
}

TEST(block_pool_kv_ledger_test, a_grow_that_does_not_fit_is_refused_with_everything_after_it) {
  kv_ledger ledger(5, 4, false);  // 4 usable
  ledger.apply(txn({}, {}, {admit_of(1, toks(100, 8), 8), admit_of(2, toks(200, 3), 3),
                            admit_of(3, toks(300, 4), 4)}));  // 2 + 1 + 1 blocks: full
  EXPECT_EQ(ledger.pool().num_blocks_free(), 0);
  const kv_grant g = ledger.apply(txn({}, {grow_of(2, {1}, 4), grow_of(1, {2}, 9),
                                           grow_of(3, {3}, 5)},
                                      {admit_of(4, toks(400, 1), 1)}));
  EXPECT_EQ(g.grow_ok, (std::vector<uint8_t>{1, 0, 0}));  // 2 fits its block; 1 and 3 do not
  ASSERT_EQ(g.grow_block_ids.size(), 3u);
  EXPECT_TRUE(g.grow_block_ids[1].empty());
  EXPECT_TRUE(g.grow_block_ids[2].empty());
  EXPECT_FALSE(g.admits[0].admitted);
  EXPECT_EQ(ledger.blocks_of(1)->size(), 2u);
  expect_ref_counts_match(ledger, {1, 2, 3});
  // Once 3 is freed, 1's growth fits.
  const kv_grant again = ledger.apply(txn({3}, {grow_of(1, {}, 9)}));
  EXPECT_EQ(again.grow_ok, (std::vector<uint8_t>{1}));
  EXPECT_EQ(again.grow_block_ids[0].size(), 1u);
  expect_ref_counts_match(ledger, {1, 2});
}

TEST(block_pool_kv_ledger_death_test, misuse_is_caught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        kv_ledger ledger(4, 4, false);
        ledger.apply(txn({}, {grow_of(1, {}, 2)}));
      },
      "does not hold");
  EXPECT_DEATH(
      {
        kv_ledger ledger(8, 4, false);
        ledger.apply(txn({}, {}, {admit_of(1, toks(1, 4), 4), admit_of(1, toks(1, 4), 4)}));
      },
      "check failed");
}

// ---- kv_ledger: prefix caching ---------------------------------------------

TEST(block_pool_kv_ledger_prefix_test, a_second_admission_hits_the_full_blocks_and_shares_them) {
  kv_ledger ledger(20, 4, true);
  const ids prompt = toks(100, 10);  // 2 full blocks and 2 tokens
  const kv_grant a = ledger.apply(txn({}, {}, {admit_of(1, prompt, 10)}));
  EXPECT_EQ(a.admits[0].num_cached_tokens, 0);
  EXPECT_EQ(ledger.pool().num_blocks_cached(), 2);
  const ids a_blocks = *ledger.blocks_of(1);
  const kv_grant b = ledger.apply(txn({}, {}, {admit_of(2, prompt, 10)}));
  ASSERT_TRUE(b.admits[0].admitted);
  EXPECT_EQ(b.admits[0].num_cached_tokens, 8);
  ASSERT_EQ(b.admits[0].block_ids.size(), 3u);
  EXPECT_EQ(b.admits[0].block_ids[0], a_blocks[0]);  // hits first
  EXPECT_EQ(b.admits[0].block_ids[1], a_blocks[1]);
  EXPECT_NE(b.admits[0].block_ids[2], a_blocks[2]);  // then a fresh block
  EXPECT_EQ(ledger.pool().ref_count(a_blocks[0]), 2);
  EXPECT_EQ(ledger.pool().ref_count(a_blocks[1]), 2);
  EXPECT_EQ(ledger.pool().ref_count(a_blocks[2]), 1);
  EXPECT_EQ(b.num_blocks_free, 19 - 4);
  EXPECT_EQ(b.prefix_cache_queries, 20);
  EXPECT_EQ(b.prefix_cache_hits, 8);
  expect_ref_counts_match(ledger, {1, 2});
}

TEST(block_pool_kv_ledger_prefix_test, the_last_token_is_always_computed) {
  kv_ledger ledger(20, 4, true);
  ledger.apply(txn({}, {}, {admit_of(1, toks(100, 12), 12)}));  // 3 full blocks cached
  // Exactly two blocks: only the first hits, the second is computed again.
  kv_grant g = ledger.apply(txn({}, {}, {admit_of(2, toks(100, 8), 8)}));
  EXPECT_EQ(g.admits[0].num_cached_tokens, 4);
  EXPECT_EQ(g.admits[0].block_ids.size(), 2u);
  // One token more: both hit.
  g = ledger.apply(txn({}, {}, {admit_of(3, toks(100, 9), 9)}));
  EXPECT_EQ(g.admits[0].num_cached_tokens, 8);
  EXPECT_EQ(g.admits[0].block_ids.size(), 3u);
  // A one-token prompt never hits.
  g = ledger.apply(txn({}, {}, {admit_of(4, toks(100, 1), 1)}));
  EXPECT_EQ(g.admits[0].num_cached_tokens, 0);
  expect_ref_counts_match(ledger, {1, 2, 3, 4});
}

TEST(block_pool_kv_ledger_prefix_test, freed_blocks_stay_cached_and_free_and_still_hit) {
  kv_ledger ledger(10, 4, true);  // 9 usable
  const ids prompt = toks(100, 10);
  ledger.apply(txn({}, {}, {admit_of(1, prompt, 10)}));
  ledger.apply(txn({}, {}, {admit_of(2, prompt, 10)}));
  const ids shared = {(*ledger.blocks_of(1))[0], (*ledger.blocks_of(1))[1]};
  const kv_grant g = ledger.apply(txn({1, 2}));
  EXPECT_EQ(g.num_blocks_free, 9);
  EXPECT_EQ(ledger.num_requests(), 0u);
  EXPECT_EQ(ledger.pool().num_blocks_cached(), 2);
  for (int32_t b : shared) {
    EXPECT_TRUE(ledger.pool().is_free(b) && ledger.pool().is_cached(b)) << "block " << b;
  }
  // A hit on a free cached block takes it off the free list too.
  const kv_grant c = ledger.apply(txn({}, {}, {admit_of(3, prompt, 10)}));
  EXPECT_EQ(c.admits[0].num_cached_tokens, 8);
  EXPECT_EQ(ids(c.admits[0].block_ids.begin(), c.admits[0].block_ids.begin() + 2), shared);
  EXPECT_EQ(c.num_blocks_free, 9 - 3);
  expect_ref_counts_match(ledger, {3});
}

TEST(block_pool_kv_ledger_prefix_test, allocation_evicts_the_least_recently_freed_cached_blocks) {
  kv_ledger ledger(11, 4, true);  // 10 usable
  const ids p1 = toks(100, 9), p2 = toks(200, 9);  // 2 full blocks and 1 token each
  ledger.apply(txn({}, {}, {admit_of(1, p1, 9), admit_of(2, p2, 9)}));
  EXPECT_EQ(*ledger.blocks_of(1), (ids{1, 2, 3}));
  EXPECT_EQ(*ledger.blocks_of(2), (ids{4, 5, 6}));
  ledger.apply(txn({1}));  // free list: 7 8 9 10 3 2 1 (a request's last block first)
  ledger.apply(txn({2}));  // 7 8 9 10 3 2 1 6 5 4
  EXPECT_EQ(ledger.pool().num_blocks_cached(), 4);
  const uint64_t p1_h0 = kv_block_hash(0, p1.data(), 4, 0);
  const uint64_t p1_h1 = kv_block_hash(p1_h0, p1.data() + 4, 4, 0);
  EXPECT_EQ(ledger.pool().find_cached(p1_h1, p1.data() + 4, 4), 2);
  // A 6-block request that does not use the cache evicts p1's second block,
  // the least recently freed cached one, and nothing else.
  const kv_grant g = ledger.apply(txn({}, {}, {admit_of(3, toks(300, 24), 24, false)}));
  EXPECT_EQ(g.admits[0].block_ids, (ids{7, 8, 9, 10, 3, 2}));
  EXPECT_EQ(ledger.pool().num_blocks_cached(), 3);
  EXPECT_FALSE(ledger.pool().is_cached(2));
  EXPECT_EQ(ledger.pool().find_cached(p1_h1, p1.data() + 4, 4), -1);
  EXPECT_EQ(ledger.pool().find_cached(p1_h0, p1.data(), 4), 1);
  for (int32_t b : {1, 4, 5}) EXPECT_TRUE(ledger.pool().is_cached(b)) << "block " << b;
  // p2 still hits both of its blocks; its fresh block is the head, 1.
  const kv_grant h = ledger.apply(txn({}, {}, {admit_of(4, p2, 9)}));
  EXPECT_EQ(h.admits[0].num_cached_tokens, 8);
  EXPECT_EQ(h.admits[0].block_ids, (ids{4, 5, 1}));
  EXPECT_FALSE(ledger.pool().is_cached(1));  // evicted in turn
  const kv_grant k = ledger.apply(txn({3}, {}, {admit_of(5, p1, 9)}));
  ASSERT_TRUE(k.admits[0].admitted);
  EXPECT_EQ(k.admits[0].num_cached_tokens, 0);  // its first block went too
  expect_ref_counts_match(ledger, {4, 5});
}

TEST(block_pool_kv_ledger_prefix_test, only_fully_computed_blocks_are_registered) {
  kv_ledger ledger(20, 4, true);
  const ids prompt = toks(100, 12);
  ledger.apply(txn({}, {}, {admit_of(1, prompt, 6)}));  // a 6-token chunk
  const ids a = *ledger.blocks_of(1);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_TRUE(ledger.pool().is_cached(a[0]));
  EXPECT_FALSE(ledger.pool().is_cached(a[1]));  // 2 of its 4 tokens computed
  kv_grant g = ledger.apply(txn({}, {}, {admit_of(2, prompt, 1)}));
  EXPECT_EQ(g.admits[0].num_cached_tokens, 4);
  EXPECT_EQ(g.admits[0].block_ids.size(), 2u);  // the hit and one token's block
  // The rest of 1's prompt: blocks 1 and 2 become full and registered.
  g = ledger.apply(txn({}, {grow_of(1, {}, 12)}));
  EXPECT_EQ(g.grow_block_ids[0].size(), 1u);
  EXPECT_EQ(ledger.pool().num_blocks_cached(), 3);
  g = ledger.apply(txn({}, {}, {admit_of(3, prompt, 12)}));
  EXPECT_EQ(g.admits[0].num_cached_tokens, 8);  // capped at 11 tokens: 2 blocks
  EXPECT_EQ(g.admits[0].block_ids[1], (*ledger.blocks_of(1))[1]);
  expect_ref_counts_match(ledger, {1, 2, 3});
}

TEST(block_pool_kv_ledger_prefix_test, generated_tokens_fill_blocks_that_later_prompts_hit) {
  kv_ledger ledger(20, 4, true);
  const ids prompt = toks(100, 6);
  ledger.apply(txn({}, {}, {admit_of(1, prompt, 6)}));
  ledger.apply(txn({}, {grow_of(1, {900}, 7)}));  // computes its first output
  EXPECT_EQ(ledger.pool().num_blocks_cached(), 1);
  ledger.apply(txn({}, {grow_of(1, {901}, 8)}));  // block 1 is now prompt[4:6] + 900, 901
  EXPECT_EQ(ledger.pool().num_blocks_cached(), 2);
  kv_grant g = ledger.apply(txn({}, {}, {admit_of(2, concat(prompt, {900, 901, 5}), 9)}));
  EXPECT_EQ(g.admits[0].num_cached_tokens, 8);
  // Another continuation shares only the first block.
  g = ledger.apply(txn({}, {}, {admit_of(3, concat(prompt, {900, 902, 5}), 9)}));
  EXPECT_EQ(g.admits[0].num_cached_tokens, 4);
  expect_ref_counts_match(ledger, {1, 2, 3});
}

TEST(block_pool_kv_ledger_prefix_test, a_request_admitted_later_in_the_transaction_hits) {
  // The model writes a layer's KV for the whole batch before any attention
  // reads it, so a block the step fills may serve another request of the
  // same step.
  kv_ledger ledger(20, 4, true);
  const kv_grant g = ledger.apply(
      txn({}, {}, {admit_of(1, toks(100, 9), 9), admit_of(2, toks(100, 9), 9)}));
  EXPECT_EQ(g.admits[0].num_cached_tokens, 0);
  EXPECT_EQ(g.admits[1].num_cached_tokens, 8);
  expect_ref_counts_match(ledger, {1, 2});
}

TEST(block_pool_kv_ledger_prefix_test, requests_without_the_prefix_cache_neither_hit_nor_register) {
  kv_ledger ledger(20, 4, true);
  const ids prompt = toks(100, 9);
  kv_grant g = ledger.apply(txn({}, {}, {admit_of(1, prompt, 9, false)}));
  EXPECT_EQ(ledger.pool().num_blocks_cached(), 0);
  EXPECT_EQ(g.prefix_cache_queries, 0);
  ledger.apply(txn({}, {}, {admit_of(2, prompt, 9)}));
  EXPECT_EQ(ledger.pool().num_blocks_cached(), 2);
  g = ledger.apply(txn({}, {}, {admit_of(3, prompt, 9, false)}));
  EXPECT_EQ(g.admits[0].num_cached_tokens, 0);
  EXPECT_EQ(g.prefix_cache_queries, 9);
  EXPECT_EQ(g.prefix_cache_hits, 0);
  g = ledger.apply(txn({}, {}, {admit_of(4, prompt, 9)}));
  EXPECT_EQ(g.admits[0].num_cached_tokens, 8);
  EXPECT_EQ(g.prefix_cache_queries, 18);
  EXPECT_EQ(g.prefix_cache_hits, 8);

  kv_ledger off(20, 4, false);  // enable_prefix_caching off: nothing ever hits
  off.apply(txn({}, {}, {admit_of(1, prompt, 9)}));
  g = off.apply(txn({}, {}, {admit_of(2, prompt, 9)}));
  EXPECT_EQ(g.admits[0].num_cached_tokens, 0);
  EXPECT_EQ(off.pool().num_blocks_cached(), 0);
  EXPECT_EQ(g.prefix_cache_queries, 0);
  EXPECT_EQ(g.prefix_cache_hits, 0);
}

TEST(block_pool_kv_ledger_prefix_test, hits_on_free_blocks_count_against_the_free_blocks) {
  kv_ledger ledger(5, 4, true);  // 4 usable
  const ids prompt = toks(100, 9);
  ledger.apply(txn({}, {}, {admit_of(1, prompt, 9)}));  // 1 2 3
  ledger.apply(txn({1}));                               // free list: 4 3 2 1
  ledger.apply(txn({}, {}, {admit_of(2, toks(200, 8), 8)}));  // takes 4 and 3
  EXPECT_EQ(ledger.pool().num_blocks_free(), 2);              // 2 and 1, both cached
  // Two hits on free blocks plus a fresh one: 3 blocks off a free list of 2.
  kv_grant g = ledger.apply(txn({}, {}, {admit_of(3, prompt, 9)}));
  EXPECT_FALSE(g.admits[0].admitted);
  EXPECT_EQ(g.prefix_cache_queries, 9 + 8);  // a refused admission counts nothing
  EXPECT_EQ(g.prefix_cache_hits, 0);
  EXPECT_TRUE(ledger.pool().is_cached(1) && ledger.pool().is_cached(2));
  EXPECT_EQ(ledger.pool().num_blocks_free(), 2);
  expect_ref_counts_match(ledger, {2});
  g = ledger.apply(txn({2}, {}, {admit_of(3, prompt, 9)}));  // free list: 2 1 3 4
  ASSERT_TRUE(g.admits[0].admitted);
  EXPECT_EQ(g.admits[0].block_ids, (ids{1, 2, 3}));
  EXPECT_EQ(g.prefix_cache_queries, 9 + 8 + 9);
  EXPECT_EQ(g.prefix_cache_hits, 8);
  expect_ref_counts_match(ledger, {3});
}

}  // namespace
}  // namespace troupe
