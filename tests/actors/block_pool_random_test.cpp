// block_pool and kv_ledger driven through long random operation sequences
// (fixed seeds, several pool sizes), checked after every operation against
// a plain model: expected ref counts, LRU free-list order (through what
// allocate() hands out), the prefix cache's entries, and the pool's own
// check_invariants(). The ledger runs random transactions over prompts drawn
// from a few shared prefixes, so prefix-cache hits, sharing and eviction
// interleave; an oracle of what each block holds checks every hit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <list>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/block_manager/block_pool.h"
#include "actors/block_manager/kv_ledger.h"

namespace troupe {
namespace {

using ids = std::vector<int32_t>;

// ---- block_pool against a model ---------------------------------------------

constexpr int64_t kBlockSize = 4;
constexpr int kNumContents = 6;

// Block contents come from a small set so that equal contents recur; the
// hash is deliberately weak (contents 0 and 4, 1 and 5 collide) so token
// verification is exercised.
ids content_tokens(int c) { return {c, c + 10, c + 20, c + 30}; }
uint64_t weak_hash(int c) { return static_cast<uint64_t>(c % 4); }

class pool_model_run {
 public:
  pool_model_run(int64_t num_blocks, uint64_t seed)
      : pool_(num_blocks), rng_(seed), refs_(static_cast<size_t>(num_blocks), 0),
        content_(static_cast<size_t>(num_blocks), -1),
        cached_hash_(static_cast<size_t>(num_blocks), -1) {
    for (int32_t b = 1; b < num_blocks; ++b) free_list_.push_back(b);
  }

  // One random operation; returns its name (for failure messages).
  std::string step() {
    switch (pick(0, 7)) {
      case 0: return allocate_sequence();
      case 1: return append();
      case 2: return fork();
      case 3:
      case 4: return free_sequence();
      case 5: return cache_block();
      case 6: return hit();
      default: return evict();
    }
  }

  // Everything the pool says against the model; "" when they agree.
  std::string compare() const {
    const std::string inv = pool_.check_invariants();
    if (!inv.empty()) return "check_invariants: " + inv;
    if (pool_.num_blocks_free() != static_cast<int64_t>(free_list_.size())) {
      return "free count " + std::to_string(pool_.num_blocks_free()) + ", model " +
             std::to_string(free_list_.size());
    }
    if (pool_.num_blocks_cached() != static_cast<int64_t>(cache_.size())) return "cached count";
    if (pool_.ref_count(0) != 1) return "null block";
    for (int32_t b = 1; b < pool_.num_blocks_total(); ++b) {
      if (pool_.ref_count(b) != refs_[static_cast<size_t>(b)]) {
        return "ref count of block " + std::to_string(b) + ": " +
               std::to_string(pool_.ref_count(b)) + ", model " +
               std::to_string(refs_[static_cast<size_t>(b)]);
      }
      if (pool_.is_cached(b) != (cached_hash_[static_cast<size_t>(b)] >= 0)) {
        return "cached flag of block " + std::to_string(b);
      }
    }
    int64_t sequence_refs = 0;
    for (const ids& s : sequences_) sequence_refs += static_cast<int64_t>(s.size());
    if (sequence_refs != pool_.num_blocks_used_refs_for_test()) return "sequence references";
    return "";
  }

  int64_t num_hits = 0, num_evictions = 0, num_collisions = 0;

 private:
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

  // The model's allocate: the free list's head, evicting cached blocks.
  ids model_allocate(int64_t n) {
    ids out;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t b = free_list_.front();
      free_list_.pop_front();
      if (cached_hash_[static_cast<size_t>(b)] >= 0) {
        cache_.erase(static_cast<uint64_t>(cached_hash_[static_cast<size_t>(b)]));
        cached_hash_[static_cast<size_t>(b)] = -1;
        ++num_evictions;
      }
      refs_[static_cast<size_t>(b)] = 1;
      content_[static_cast<size_t>(b)] = static_cast<int>(pick(0, kNumContents - 1));
      out.push_back(b);
    }
    return out;
  }

  ids checked_allocate(int64_t n, std::string& err) {
    const ids want = model_allocate(n);
    const ids got = pool_.allocate(n);
    if (got != want) err = " handed out other blocks than the LRU head";
    return got;
  }

  void model_share(int32_t b) {
    if (refs_[static_cast<size_t>(b)]++ == 0) free_list_.remove(b);
  }

  std::string allocate_sequence() {
    const int64_t n = pick(0, std::min<int64_t>(pool_.num_blocks_free(), 4));
    std::string err;
    sequences_.push_back(checked_allocate(n, err));
    return "allocate " + std::to_string(n) + err;
  }

  std::string append() {
    if (sequences_.empty() || pool_.num_blocks_free() == 0) return "append (skipped)";
    std::string err;
    ids& s = sequences_[static_cast<size_t>(pick(0, int64_t(sequences_.size()) - 1))];
    const ids more = checked_allocate(1, err);
    s.insert(s.end(), more.begin(), more.end());
    return "append" + err;
  }

  std::string fork() {
    if (sequences_.empty()) return "fork (skipped)";
    const ids s = sequences_[static_cast<size_t>(pick(0, int64_t(sequences_.size()) - 1))];
    for (int32_t b : s) {
      pool_.share(b);
      model_share(b);
    }
    sequences_.push_back(s);
    return "fork of " + std::to_string(s.size());
  }

  std::string free_sequence() {
    if (sequences_.empty()) return "free (skipped)";
    const size_t i = static_cast<size_t>(pick(0, int64_t(sequences_.size()) - 1));
    ids s = sequences_[i];
    sequences_.erase(sequences_.begin() + static_cast<std::ptrdiff_t>(i));
    if (pick(0, 1)) std::reverse(s.begin(), s.end());  // as kv_ledger frees: tail first
    pool_.free(s);
    for (int32_t b : s) {
      if (--refs_[static_cast<size_t>(b)] == 0) free_list_.push_back(b);
    }
    return "free of " + std::to_string(s.size());
  }

  std::string cache_block() {
    std::vector<int32_t> candidates;
    for (int32_t b = 1; b < pool_.num_blocks_total(); ++b) {
      if (refs_[static_cast<size_t>(b)] > 0 && cached_hash_[static_cast<size_t>(b)] < 0) {
        candidates.push_back(b);
      }
    }
    if (candidates.empty()) return "cache (skipped)";
    const int32_t b = candidates[static_cast<size_t>(pick(0, int64_t(candidates.size()) - 1))];
    const int c = content_[static_cast<size_t>(b)];
    const ids t = content_tokens(c);
    pool_.cache(b, weak_hash(c), t.data(), kBlockSize);
    if (cache_.count(weak_hash(c)) == 0) {  // else a no-op: the first block stays
      cache_[weak_hash(c)] = {b, t};
      cached_hash_[static_cast<size_t>(b)] = static_cast<int64_t>(weak_hash(c));
    }
    return "cache block " + std::to_string(b);
  }

  std::string hit() {
    const int c = static_cast<int>(pick(0, kNumContents - 1));
    const ids t = content_tokens(c);
    auto it = cache_.find(weak_hash(c));
    int32_t want = -1;
    if (it != cache_.end()) {
      if (it->second.second == t) {
        want = it->second.first;
      } else {
        ++num_collisions;
      }
    }
    const int32_t got = pool_.find_cached(weak_hash(c), t.data(), kBlockSize);
    if (got != want) {
      return "find_cached of content " + std::to_string(c) + " gave " + std::to_string(got) +
             ", model " + std::to_string(want) + " MISMATCH";
    }
    if (got >= 0) {
      pool_.share(got);
      model_share(got);
      sequences_.push_back({got});
      ++num_hits;
    }
    return "hit of content " + std::to_string(c);
  }

  std::string evict() {
    int64_t k = 0;
    auto it = free_list_.begin();
    while (it != free_list_.end() && cached_hash_[static_cast<size_t>(*it)] < 0) ++it, ++k;
    if (it == free_list_.end()) return "evict (skipped)";
    const int32_t victim = *it;
    std::string err;
    sequences_.push_back(checked_allocate(k + 1, err));
    if (pool_.is_cached(victim)) err += " victim still cached";
    return "evict block " + std::to_string(victim) + " after " + std::to_string(k) + err;
  }

  // A block_pool that also sums its ref counts over the usable blocks.
  class counting_pool : public block_pool {
   public:
    using block_pool::block_pool;
    int64_t num_blocks_used_refs_for_test() const {
      int64_t n = 0;
      for (int32_t b = 1; b < num_blocks_total(); ++b) n += ref_count(b);
      return n;
    }
  };

  counting_pool pool_;
  std::mt19937_64 rng_;
  std::vector<int32_t> refs_;
  std::list<int32_t> free_list_;  // LRU order, head first
  std::vector<int> content_;      // per block
  std::vector<int64_t> cached_hash_;  // per block, -1: not cached
  std::map<uint64_t, std::pair<int32_t, ids>> cache_;
  std::vector<ids> sequences_;
};

TEST(block_pool_random_test, every_operation_keeps_the_pool_equal_to_its_model) {
  for (int64_t num_blocks : {2, 3, 9, 33, 257}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE("num_blocks " + std::to_string(num_blocks) + " seed " + std::to_string(seed));
      pool_model_run run(num_blocks, seed);
      for (int op = 0; op < 20000; ++op) {
        const std::string what = run.step();
        const std::string diff = run.compare();
        const bool bad = !diff.empty() || what.find("MISMATCH") != std::string::npos ||
                         what.find(" handed out") != std::string::npos ||
                         what.find("still cached") != std::string::npos;
        ASSERT_FALSE(bad) << "operation " << op << " (" << what << "): " << diff;
      }
      if (num_blocks > 3) {  // the paths under test were really taken
        EXPECT_GT(run.num_hits, 0);
        EXPECT_GT(run.num_evictions, 0);
        EXPECT_GT(run.num_collisions, 0);
      }
    }
  }
}

// ---- kv_ledger: random transactions ----------------------------------------

struct live_request {
  ids tokens;  // as the ledger knows them
  int64_t num_computed = 0;
};

class ledger_run {
 public:
  ledger_run(int64_t num_blocks, uint64_t seed)
      : ledger_(num_blocks, kBlockSize, true), rng_(seed) {
    for (int i = 0; i < 4; ++i) {  // shared prefixes, some shorter than a block
      ids p;
      for (int64_t k = pick(0, 14); k > 0; --k) p.push_back(static_cast<int32_t>(pick(1, 3)));
      prefixes_.push_back(p);
    }
  }

  // One transaction; false (with a failure recorded) when something is off.
  bool step() {
    kv_transaction txn;
    // Frees.
    for (const auto& [id, r] : live_) {
      if (pick(0, 6) == 0) txn.free_ids.push_back(id);
    }
    std::unordered_map<int32_t, int64_t> holders = count_holders();
    int64_t free_now = ledger_.pool().num_blocks_free();
    for (request_id id : txn.free_ids) {
      for (int32_t b : *ledger_.blocks_of(id)) free_now += --holders[b] == 0;
    }
    for (request_id id : txn.free_ids) live_.erase(id);
    // Grows that fit.
    std::vector<int64_t> grow_fresh;
    for (auto& [id, r] : live_) {
      if (pick(0, 2) == 0) continue;
      kv_grow g;
      g.id = id;
      if (r.num_computed == static_cast<int64_t>(r.tokens.size()) || pick(0, 3) == 0) {
        g.new_token_ids.push_back(static_cast<int32_t>(pick(1, 3)));  // a sampled token
      }
      const int64_t known = static_cast<int64_t>(r.tokens.size() + g.new_token_ids.size());
      g.num_tokens_after = r.num_computed + pick(1, std::min<int64_t>(known - r.num_computed, 9));
      const int64_t fresh = blocks_for(g.num_tokens_after) - num_blocks_of(id);
      if (fresh > free_now) continue;
      free_now -= fresh;
      grow_fresh.push_back(fresh);
      txn.grows.push_back(g);
    }
    const int64_t free_before_admits = free_now;
    // Admissions.
    for (int64_t k = pick(0, 2); k > 0; --k) {
      kv_admit a;
      a.id = next_id_++;
      a.token_ids = prefixes_[static_cast<size_t>(pick(0, 3))];
      for (int64_t s = pick(a.token_ids.empty() ? 1 : 0, 5); s > 0; --s) {
        a.token_ids.push_back(static_cast<int32_t>(pick(1, 3)));
      }
      a.num_new_tokens = pick(1, static_cast<int64_t>(a.token_ids.size()));
      a.use_prefix_cache = pick(0, 6) != 0;
      txn.admits.push_back(a);
    }
    const kv_grant grant = ledger_.apply(txn);
    return check_grant(txn, grant, grow_fresh, free_before_admits);
  }

  bool free_everything() {
    kv_transaction txn;
    for (const auto& [id, r] : live_) txn.free_ids.push_back(id);
    live_.clear();
    const kv_grant grant = ledger_.apply(txn);
    EXPECT_EQ(grant.num_blocks_free, ledger_.pool().num_blocks_usable());
    EXPECT_EQ(ledger_.pool().num_blocks_free(), ledger_.pool().num_blocks_usable());
    EXPECT_EQ(ledger_.num_requests(), 0u);
    EXPECT_EQ(ledger_.pool().check_invariants(), "");
    return !::testing::Test::HasFailure();
  }

  int64_t num_hit_tokens = 0, num_refused = 0, num_shared_blocks_seen = 0;

 private:
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  static int64_t blocks_for(int64_t tokens) { return (tokens + kBlockSize - 1) / kBlockSize; }
  int64_t num_blocks_of(request_id id) const {
    return static_cast<int64_t>(ledger_.blocks_of(id)->size());
  }

  std::unordered_map<int32_t, int64_t> count_holders() const {
    std::unordered_map<int32_t, int64_t> holders;
    for (const auto& [id, r] : live_) {
      for (int32_t b : *ledger_.blocks_of(id)) ++holders[b];
    }
    return holders;
  }

  // Blocks [from, to) of a request that it computed itself now hold its
  // tokens; a block handed out fresh holds nothing valid yet.
  void record_computed(const live_request& r, const ids& blocks, int64_t from_tokens,
                       int64_t to_tokens) {
    for (int64_t j = from_tokens / kBlockSize; j < to_tokens / kBlockSize; ++j) {
      content_[blocks[static_cast<size_t>(j)]] =
          ids(r.tokens.begin() + j * kBlockSize, r.tokens.begin() + (j + 1) * kBlockSize);
    }
  }

  bool check_grant(const kv_transaction& txn, const kv_grant& grant,
                   const std::vector<int64_t>& grow_fresh, int64_t free_before_admits) {
    EXPECT_EQ(grant.grow_ok, std::vector<uint8_t>(txn.grows.size(), 1));
    EXPECT_EQ(grant.grow_block_ids.size(), txn.grows.size());
    for (size_t i = 0; i < txn.grows.size() && i < grant.grow_block_ids.size(); ++i) {
      const kv_grow& g = txn.grows[i];
      live_request& r = live_.at(g.id);
      EXPECT_EQ(static_cast<int64_t>(grant.grow_block_ids[i].size()), grow_fresh[i]);
      for (int32_t b : grant.grow_block_ids[i]) content_.erase(b);
      r.tokens.insert(r.tokens.end(), g.new_token_ids.begin(), g.new_token_ids.end());
      record_computed(r, *ledger_.blocks_of(g.id), r.num_computed, g.num_tokens_after);
      r.num_computed = g.num_tokens_after;
    }
    bool refusing = false;
    EXPECT_EQ(grant.admits.size(), txn.admits.size());
    for (size_t i = 0; i < txn.admits.size() && i < grant.admits.size(); ++i) {
      const kv_admit& a = txn.admits[i];
      const kv_admit_result& res = grant.admits[i];
      const auto len = static_cast<int64_t>(a.token_ids.size());
      if (i == 0 && !res.admitted) {
        // Never refused in error: at most this many blocks could be needed.
        const int64_t max_cached = a.use_prefix_cache ? (len - 1) / kBlockSize * kBlockSize : 0;
        EXPECT_GT(blocks_for(std::min(len, max_cached + a.num_new_tokens)), free_before_admits);
      }
      if (refusing) {
        EXPECT_FALSE(res.admitted) << "an admission after a refused one";
      }
      refusing = refusing || !res.admitted;
      if (!res.admitted) {
        EXPECT_EQ(ledger_.blocks_of(a.id), nullptr);
        ++num_refused;
        continue;
      }
      const int64_t cached = res.num_cached_tokens;
      EXPECT_EQ(cached % kBlockSize, 0);
      EXPECT_LE(cached, std::max<int64_t>(0, len - 1));
      if (!a.use_prefix_cache) {
        EXPECT_EQ(cached, 0);
      }
      const int64_t computed = cached + std::min(len - cached, a.num_new_tokens);
      EXPECT_EQ(static_cast<int64_t>(res.block_ids.size()), blocks_for(computed));
      EXPECT_EQ(ledger_.blocks_of(a.id) ? *ledger_.blocks_of(a.id) : ids{}, res.block_ids);
      for (int64_t j = 0; j < cached / kBlockSize && j < int64_t(res.block_ids.size()); ++j) {
        auto it = content_.find(res.block_ids[static_cast<size_t>(j)]);
        const ids want(a.token_ids.begin() + j * kBlockSize,
                       a.token_ids.begin() + (j + 1) * kBlockSize);
        EXPECT_TRUE(it != content_.end() && it->second == want)
            << "hit block " << res.block_ids[static_cast<size_t>(j)] << " does not hold tokens "
            << j * kBlockSize << ".. of request " << a.id;
      }
      for (size_t j = static_cast<size_t>(cached / kBlockSize); j < res.block_ids.size(); ++j) {
        content_.erase(res.block_ids[j]);
      }
      live_request r{a.token_ids, computed};
      record_computed(r, res.block_ids, cached, computed);
      live_[a.id] = r;
      num_hit_tokens += cached;
    }
    // The pool against the ledger's block tables.
    EXPECT_EQ(ledger_.pool().check_invariants(), "");
    EXPECT_EQ(ledger_.num_requests(), live_.size());
    const std::unordered_map<int32_t, int64_t> holders = count_holders();
    int64_t refs_in_tables = 0, refs_in_pool = 0, unheld = 0;
    for (const auto& [id, r] : live_) {
      EXPECT_EQ(num_blocks_of(id), blocks_for(r.num_computed)) << "request " << id;
      refs_in_tables += num_blocks_of(id);
    }
    for (int32_t b = 1; b < ledger_.pool().num_blocks_total(); ++b) {
      auto it = holders.find(b);
      const int64_t want = it == holders.end() ? 0 : it->second;
      EXPECT_EQ(ledger_.pool().ref_count(b), want) << "block " << b;
      refs_in_pool += ledger_.pool().ref_count(b);
      unheld += want == 0;
      num_shared_blocks_seen += want > 1;
    }
    EXPECT_EQ(refs_in_tables, refs_in_pool);
    EXPECT_EQ(ledger_.pool().num_blocks_free(), unheld);
    EXPECT_EQ(grant.num_blocks_free, unheld);
    return !::testing::Test::HasFailure();
  }

  kv_ledger ledger_;
  std::mt19937_64 rng_;
  std::vector<ids> prefixes_;
  std::map<request_id, live_request> live_;
  std::unordered_map<int32_t, ids> content_;  // block -> the tokens it holds, once full
  request_id next_id_ = 1;
};

TEST(block_pool_random_test, random_transactions_keep_the_ledger_and_pool_consistent) {
  for (int64_t num_blocks : {4, 9, 17, 65}) {
    for (uint64_t seed : {11u, 12u, 13u}) {
      SCOPED_TRACE("num_blocks " + std::to_string(num_blocks) + " seed " + std::to_string(seed));
      ledger_run run(num_blocks, seed);
      for (int t = 0; t < 5000; ++t) {
        ASSERT_TRUE(run.step()) << "transaction " << t;
      }
      ASSERT_TRUE(run.free_everything());
      EXPECT_GT(run.num_hit_tokens, 0);
      EXPECT_GT(run.num_shared_blocks_seen, 0);
      if (num_blocks <= 9) {
        EXPECT_GT(run.num_refused, 0);
      }
    }
  }
}

}  // namespace
}  // namespace troupe
