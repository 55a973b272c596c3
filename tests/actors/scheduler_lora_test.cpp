// LoRA admission (scheduler_limits::max_loras): the running requests never
// use more distinct adapters than the worker has slots; a request whose
// adapter would be one too many waits without holding back requests of a
// resident adapter or of the base, and runs once a slot's adapter is done.
// The prefix cache keys on the adapter: the same prompt under two adapters
// shares no blocks. With a host cache (lora_host_cache), a request whose
// adapter is being read waits while others run, keeps its room under
// max_loras, and one whose adapter cannot be read ends with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "actors/block_manager/kv_ledger.h"
#include "actors/scheduler/token_budget_scheduler.h"
#include "tests/actors/fake_worker.h"

namespace troupe {
namespace {

// Both tests' limits: room for 8 sequences and 2 adapters.
scheduler_limits two_slots() {
  scheduler_limits l;
  l.block_size = 4;
  l.num_blocks_usable = 64;
  l.max_model_len = 64;
  l.max_num_batched_tokens = 256;
  l.max_num_seqs = 8;
  l.max_loras = 2;
  return l;
}

TEST(scheduler_lora, adapters_beyond_max_loras_wait_without_blocking_others) {
  const scheduler_limits l = two_slots();
  token_budget_scheduler sched(l);
  kv_ledger ledger(l.num_blocks_usable + 1, l.block_size, true);
  testing::fake_worker worker;
  std::map<request_id, int64_t> adapter_of;
  std::map<request_id, size_t> tokens;
  std::map<request_id, int> first_step;
  int step_no = 0;
  int64_t found_computed = 0;  // prefix-cache hits of admitted requests
  size_t max_running_adapters = 0;
  auto step = [&] {
    const step_plan plan = sched.commit(ledger.apply(sched.schedule()));
    ++step_no;
    for (const new_request_data& d : plan.new_requests) {
      first_step.emplace(d.id, step_no);
      found_computed += d.num_computed_tokens;
    }
    if (plan.step_id != 0) {
      std::set<int64_t> adapters;
      for (const auto& [id, h] : worker.state) {
        if (adapter_of[id] != 0) adapters.insert(adapter_of[id]);
      }
      sched.update(worker.execute(plan));
      std::set<int64_t> running;
      for (const auto& [id, h] : worker.state) {
        if (adapter_of[id] != 0) running.insert(adapter_of[id]);
      }
      max_running_adapters = std::max({max_running_adapters, adapters.size(), running.size()});
    }
    for (const request_output& o : sched.take_outputs()) tokens[o.id] += o.new_token_ids.size();
  };
  // Adapters 1 and 2 long (20 tokens), adapter 3 and the base short. The
  // same prompt under every adapter (request 5 has its own: it may share
  // request 1's blocks, same adapter).
  auto add = [&](request_id id, int64_t lora, int32_t max_tokens,
                 const std::vector<int32_t>& ids = std::vector<int32_t>(12, 5)) {
    sampling_params p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.lora_id = lora;
    adapter_of[id] = lora;
    EXPECT_EQ(sched.add_request(id, ids, p), "");
  };
  add(1, 1, 20);
  add(2, 2, 20);
  add(3, 3, 4);  // a third adapter: waits for a slot
  add(4, 0, 4);  // the base: admitted at once
  add(5, 1, 4, std::vector<int32_t>(12, 6));  // a resident adapter: admitted at once
  for (int i = 0; i < 200 && sched.has_unfinished(); ++i) step();
  step();
  for (request_id id = 1; id <= 5; ++id) EXPECT_EQ(tokens[id], id <= 2 ? 20u : 4u) << id;
  EXPECT_LE(max_running_adapters, 2u);
  EXPECT_EQ(first_step[4], first_step[1]) << "the base waited behind an adapter";
  EXPECT_EQ(first_step[5], first_step[1]) << "a resident adapter waited";
  EXPECT_GT(first_step[3], first_step[1] + 10) << "adapter 3 ran beside two others";
  // No prefix-cache hits across adapters: every request computed its prompt.
  EXPECT_EQ(found_computed, 0);
  EXPECT_EQ(ledger.pool().num_blocks_free(), l.num_blocks_usable);
}


// A host cache whose reads the test ends: adapter 2 is being read, adapter
// 3 would need a read too, adapter 4 cannot be read.
TEST(scheduler_lora, requests_wait_for_their_adapters_reads) {
  const scheduler_limits l = two_slots();
  token_budget_scheduler sched(l);
  std::map<int64_t, lora_host_cache::state> host = {{1, lora_host_cache::state::ready},
                                                     {2, lora_host_cache::state::loading},
                                                     {3, lora_host_cache::state::loading},
                                                     {4, lora_host_cache::state::failed}};
  std::multiset<int64_t> reads;  // reads started
  std::vector<int64_t> protected_ids;
  lora_host_cache cache;
  cache.prefetch = [&](int64_t id, std::string& error, bool start_read) {
    lora_host_cache::state s = host.at(id);
    if (s == lora_host_cache::state::failed) error = "adapter 4 is gone";
    if (s == lora_host_cache::state::loading && reads.count(id) == 0) {
      if (!start_read) return lora_host_cache::state::absent;
      reads.insert(id);
    }
    return s;
  };
  cache.protect = [&](std::vector<int64_t> ids) {
    std::sort(ids.begin(), ids.end());
    protected_ids = ids;
  };
  sched.set_lora_cache(cache);
  kv_ledger ledger(l.num_blocks_usable + 1, l.block_size, true);
  testing::fake_worker worker;
  std::map<request_id, request_output> last;
  auto step = [&] {
    const step_plan plan = sched.commit(ledger.apply(sched.schedule()));
    if (plan.step_id != 0) sched.update(worker.execute(plan));
    for (const request_output& o : sched.take_outputs()) last[o.id] = o;
    return plan.new_requests.size();
  };
  auto add = [&](request_id id, int64_t lora) {
    sampling_params p;
    p.max_tokens = 30;
    p.ignore_eos = true;
    p.lora_id = lora;
    EXPECT_EQ(sched.add_request(id, std::vector<int32_t>(8, static_cast<int32_t>(id)), p), "");
  };
  add(3, 1);  // in host memory: runs
  add(4, 0);  // the base: runs
  EXPECT_EQ(step(), 2u);
  add(1, 2);  // a read starts: waits, and its read keeps the last room
  add(2, 3);  // needs a read, but no room is left for one: none starts
  add(5, 4);  // unreadable: ends with the reason
  add(6, 1);  // in host memory and running: runs
  EXPECT_EQ(step(), 1u);
  EXPECT_TRUE(sched.waiting_for_adapters());
  EXPECT_EQ(reads.count(2), 1u);
  EXPECT_EQ(reads.count(3), 0u) << "a read started for an adapter without room";
  EXPECT_EQ(protected_ids, std::vector<int64_t>({1}));
  ASSERT_EQ(last.count(5), 1u);
  EXPECT_EQ(last[5].finish, finish_reason::error);
  EXPECT_EQ(last[5].error, "adapter 4 is gone");
  EXPECT_EQ(step(), 0u);  // still reading
  host[2] = lora_host_cache::state::ready;
  EXPECT_EQ(step(), 1u);  // request 1 now; adapters 1 and 2 fill max_loras
  EXPECT_FALSE(sched.waiting_for_adapters());
  EXPECT_EQ(protected_ids, std::vector<int64_t>({1, 2}));
  EXPECT_EQ(reads.count(3), 0u);
  for (int i = 0; i < 200 && sched.has_unfinished(); ++i) {
    step();
    if (reads.count(3) > 0) host[3] = lora_host_cache::state::ready;
  }
  step();
  for (request_id id : {1, 2, 3, 4, 6}) EXPECT_EQ(last[id].finish, finish_reason::length) << id;
  EXPECT_EQ(reads.count(3), 1u);
  EXPECT_EQ(ledger.pool().num_blocks_free(), l.num_blocks_usable);
}

}  // namespace
}  // namespace troupe
