// block_pool (null block, counts, LRU free list, ref counts) and kv_ledger
// (one transaction a step: frees first, then grows in order).
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
}

// ---- kv_ledger -------------------------------------------------------------

kv_transaction txn(std::vector<request_id> free_ids, std::vector<request_id> grow_ids,
                   std::vector<int32_t> grow_num_blocks) {
  kv_transaction t;
  t.free_ids = std::move(free_ids);
  t.grow_ids = std::move(grow_ids);
  t.grow_num_blocks = std::move(grow_num_blocks);
  return t;
}

int64_t sum_of_held(const kv_ledger& ledger, const std::vector<request_id>& id_list) {
  int64_t n = 0;
  for (request_id id : id_list) {
    if (const ids* b = ledger.blocks_of(id)) n += static_cast<int64_t>(b->size());
  }
  return n;
}

TEST(block_pool_kv_ledger_test, grows_append_per_request_in_order) {
  kv_ledger ledger(10);  // 9 usable
  kv_grant g = ledger.apply(txn({}, {1, 2}, {2, 3}));
  ASSERT_EQ(g.new_block_ids.size(), 2u);
  EXPECT_EQ(g.new_block_ids[0], (ids{1, 2}));
  EXPECT_EQ(g.new_block_ids[1], (ids{3, 4, 5}));
  EXPECT_EQ(g.num_blocks_free, 4);
  g = ledger.apply(txn({}, {2, 1, 3}, {1, 0, 2}));
  EXPECT_EQ(g.new_block_ids[0], (ids{6}));
  EXPECT_TRUE(g.new_block_ids[1].empty());
  EXPECT_EQ(g.new_block_ids[2], (ids{7, 8}));
  EXPECT_EQ(g.num_blocks_free, 1);
  EXPECT_EQ(*ledger.blocks_of(1), (ids{1, 2}));
  EXPECT_EQ(*ledger.blocks_of(2), (ids{3, 4, 5, 6}));
  EXPECT_EQ(*ledger.blocks_of(3), (ids{7, 8}));
  EXPECT_EQ(ledger.blocks_of(4), nullptr);
  EXPECT_EQ(sum_of_held(ledger, {1, 2, 3}), ledger.pool().num_blocks_used());
}

TEST(block_pool_kv_ledger_test, frees_apply_before_grows) {
  kv_ledger ledger(5);  // 4 usable
  ledger.apply(txn({}, {1}, {3}));
  EXPECT_EQ(ledger.pool().num_blocks_free(), 1);
  // Request 2 needs all 4 blocks: fits only because 1's frees come first.
  const kv_grant g = ledger.apply(txn({1}, {2}, {4}));
  // 1's blocks went to the tail last block first, after the untouched 4.
  EXPECT_EQ(g.new_block_ids[0], (ids{4, 3, 2, 1}));
  EXPECT_EQ(g.num_blocks_free, 0);
  EXPECT_EQ(ledger.blocks_of(1), nullptr);
  EXPECT_EQ(ledger.num_requests(), 1u);
}

TEST(block_pool_kv_ledger_test, freeing_returns_every_block_and_unknown_ids_are_ignored) {
  kv_ledger ledger(9);
  ledger.apply(txn({}, {1, 2}, {3, 2}));
  ledger.apply(txn({}, {1}, {1}));
  kv_grant g = ledger.apply(txn({7, 2}, {}, {}));  // 7 never grew
  EXPECT_EQ(g.num_blocks_free, 4);
  EXPECT_TRUE(g.new_block_ids.empty());
  EXPECT_EQ(ledger.blocks_of(2), nullptr);
  g = ledger.apply(txn({1}, {}, {}));
  EXPECT_EQ(g.num_blocks_free, 8);
  EXPECT_EQ(ledger.pool().num_blocks_free(), ledger.pool().num_blocks_usable());
  EXPECT_EQ(ledger.num_requests(), 0u);
}

TEST(block_pool_kv_ledger_death_test, a_grow_that_does_not_fit_is_caught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        kv_ledger ledger(4);
        ledger.apply(txn({}, {1, 2}, {2, 2}));
      },
      "out of step");
}

}  // namespace
}  // namespace troupe
