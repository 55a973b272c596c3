// token_budget_scheduler driven step by step against a real kv_ledger (the
// block manager) and a fake worker that keeps request state exactly as
// actors/worker/model_runner.cpp does, plus a simulated KV cache that checks
// every token's context is where the block table says it is.
//
// The simulated KV cache is content-addressed: the KV at position p stands
// for the whole context it was computed from (tokens 0..p), whoever wrote it.
// So a prefix-cache hit passes only when the hit block holds exactly the new
// request's prefix, and overwriting KV that another request still reads is
// caught when it is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/block_manager/kv_ledger.h"
#include "actors/scheduler/token_budget_scheduler.h"

namespace troupe {
namespace {

using token_fn = std::function<int32_t(request_id, int64_t output_index)>;
using context = std::vector<int32_t>;  // tokens 0..p: what the KV at position p encodes

// The token a context-driven model samples after this context: a function of
// the context only, so the reference below needs no scheduler.
int32_t next_of_context(const context& ctx) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : ctx) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ULL;
  return 100 + static_cast<int32_t>(h % 50);
}

// What a context-driven model generates for this prompt, computed directly.
std::vector<int32_t> reference_generation(context prompt, int32_t max_tokens) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < max_tokens; ++i) {
    out.push_back(next_of_context(prompt));
    prompt.push_back(out.back());
  }
  return out;
}

// Emulates model_runner::apply_plan / run_swaps / build_batch / execute,
// minus the model.
struct fake_worker {
  struct held {
    std::vector<int32_t> token_ids;
    int64_t num_prompt_tokens = 0;
    uint64_t seed = 0;
    std::vector<int32_t> block_ids;
    int64_t num_computed_tokens = 0;
    int64_t num_scheduled_tokens = 0;
  };
  int64_t block_size = 0;
  token_fn next_token = [](request_id, int64_t) { return 7; };
  // Sample next_of_context(the context read back from the KV cache) instead.
  bool sample_from_context = false;
  std::unordered_map<request_id, held> requests;
  std::unordered_map<request_id, uint64_t> first_seed;  // seed at first admission
  std::unordered_map<int64_t, context> kv;       // device slot -> content
  std::unordered_map<int64_t, context> host_kv;  // swap space slot -> content
  int64_t num_tokens_found_computed = 0;  // new requests' num_computed_tokens, summed

  int64_t slot(const held& r, int64_t p) const {
    return int64_t{r.block_ids[static_cast<size_t>(p / block_size)]} * block_size + p % block_size;
  }

  static void copy_blocks(const std::vector<int32_t>& src, const std::vector<int32_t>& dst,
                          std::unordered_map<int64_t, context>& from,
                          std::unordered_map<int64_t, context>& to, int64_t bs) {
    EXPECT_EQ(src.size(), dst.size());
    for (size_t i = 0; i < src.size() && i < dst.size(); ++i) {
      for (int64_t o = 0; o < bs; ++o) {
        auto it = from.find(int64_t{src[i]} * bs + o);
        if (it == from.end()) {
          to.erase(int64_t{dst[i]} * bs + o);
        } else {
          context c = it->second;  // from and to may be the same store
          to[int64_t{dst[i]} * bs + o] = std::move(c);
        }
      }
    }
  }

  // Writing slot s for `writer`: no other held request may lose KV it
  // already had there (content it counts as computed, replaced by another).
  // A request admitted this step on a block another one fills this step
  // (a same-step prefix hit) had nothing valid there yet: that is fine.
  void check_overwrite(request_id writer, int64_t s, const context& content) const {
    auto old = kv.find(s);
    if (old == kv.end() || old->second == content) return;
    const int32_t block = static_cast<int32_t>(s / block_size);
    const auto old_len = static_cast<int64_t>(old->second.size());
    for (const auto& [id, q] : requests) {
      if (id == writer) continue;
      for (size_t i = 0; i < q.block_ids.size(); ++i) {
        const int64_t pos = static_cast<int64_t>(i) * block_size + s % block_size;
        const bool had_it = pos < q.num_computed_tokens && old_len == pos + 1 &&
                            std::equal(old->second.begin(), old->second.end(), q.token_ids.begin());
        if (q.block_ids[i] == block && had_it) {
          ADD_FAILURE() << "request " << writer << " overwrote block " << block
                        << " that request " << id << " still reads";
        }
      }
    }
  }

  step_output execute(const step_plan& plan, const kv_ledger& ledger,
                      std::map<request_id, int64_t>& scheduled) {
    for (request_id id : plan.finished_ids) requests.erase(id);
    // Swap-outs first: their device blocks may be the swap-ins' destinations.
    copy_blocks(plan.swap_out_src, plan.swap_out_dst, kv, host_kv, block_size);
    copy_blocks(plan.swap_in_src, plan.swap_in_dst, host_kv, kv, block_size);
    copy_blocks(plan.copy_src, plan.copy_dst, kv, kv, block_size);  // copy-on-write
    std::vector<request_id> order;
    for (const new_request_data& d : plan.new_requests) {
      held r{d.token_ids, d.num_prompt_tokens, d.seed, d.block_ids, d.num_computed_tokens,
             d.num_scheduled_tokens};
      EXPECT_TRUE(requests.emplace(d.id, r).second) << "new request " << d.id << " already held";
      EXPECT_TRUE(first_seed.emplace(d.id, d.seed).first->second == d.seed)
          << "request " << d.id << " came back with another seed";
      num_tokens_found_computed += d.num_computed_tokens;
      EXPECT_TRUE(d.fork_children.empty()) << "this fake worker does not sample forks";
      order.push_back(d.id);
    }
    for (const cached_request_data& d : plan.cached_requests) {
      auto it = requests.find(d.id);
      if (it == requests.end()) {
        ADD_FAILURE() << "plan names request " << d.id << " the worker does not hold";
        continue;
      }
      EXPECT_TRUE(d.fork_children.empty()) << "this fake worker does not sample forks";
      for (size_t k = 0; k < d.replaced_index.size(); ++k) {  // copy-on-write
        it->second.block_ids.at(static_cast<size_t>(d.replaced_index[k])) = d.replaced_block[k];
      }
      it->second.block_ids.insert(it->second.block_ids.end(), d.new_block_ids.begin(),
                                  d.new_block_ids.end());
      it->second.num_scheduled_tokens = d.num_scheduled_tokens;
      order.push_back(d.id);
    }
    // As each layer of the model does: every KV write of the batch, then
    // every read.
    int64_t total = 0;
    for (request_id id : order) {
      held& r = requests.at(id);
      const std::vector<int32_t>* owned = ledger.blocks_of(id);
      EXPECT_TRUE(owned != nullptr && *owned == r.block_ids) << "block table of " << id;
      const int64_t end = r.num_computed_tokens + r.num_scheduled_tokens;
      EXPECT_GT(r.num_scheduled_tokens, 0);
      EXPECT_LE(end, static_cast<int64_t>(r.token_ids.size()));
      EXPECT_LE(end, static_cast<int64_t>(r.block_ids.size()) * block_size);
      if (end > static_cast<int64_t>(r.token_ids.size()) ||
          end > static_cast<int64_t>(r.block_ids.size()) * block_size) {
        return {};
      }
      for (int64_t p = r.num_computed_tokens; p < end; ++p) {
        context content(r.token_ids.begin(), r.token_ids.begin() + p + 1);
        check_overwrite(id, slot(r, p), content);
        kv[slot(r, p)] = std::move(content);
      }
      scheduled[id] = r.num_scheduled_tokens;
      total += r.num_scheduled_tokens;
    }
    EXPECT_EQ(total, plan.total_num_scheduled_tokens);
    step_output out;
    out.step_id = plan.step_id;
    for (request_id id : order) {
      held& r = requests.at(id);
      const int64_t end = r.num_computed_tokens + r.num_scheduled_tokens;
      const context* last = nullptr;
      for (int64_t p = 0; p < end; ++p) {  // the whole context attention would read
        auto it = kv.find(slot(r, p));
        const bool ok = it != kv.end() && static_cast<int64_t>(it->second.size()) == p + 1 &&
                        std::equal(it->second.begin(), it->second.end(), r.token_ids.begin());
        EXPECT_TRUE(ok) << "request " << id << " position " << p << " lost its KV";
        if (it != kv.end()) last = &it->second;
      }
      sampled_output s;
      s.id = id;
      if (end == static_cast<int64_t>(r.token_ids.size())) {
        s.token_id = sample_from_context ? (last ? next_of_context(*last) : 0)
                                         : next_token(id, end - r.num_prompt_tokens);
      }
      out.outputs.push_back(s);
      r.num_computed_tokens = end;
      r.num_scheduled_tokens = 0;
      if (s.token_id >= 0) r.token_ids.push_back(s.token_id);
    }
    return out;
  }
};

struct result {
  std::vector<int32_t> tokens;
  finish_reason finish = finish_reason::none;
  int num_finishes = 0;
};

struct hooks {
  std::function<void()> after_schedule;  // before the grant is committed
  std::function<void()> after_execute;   // before update
};

class harness {
 public:
  explicit harness(const scheduler_limits& l)
      : limits(l), sched(l), ledger(l.num_blocks_usable + 1, l.block_size, l.enable_prefix_caching) {
    worker.block_size = l.block_size;
  }

  // The scheduler's free count after its frees against the pool's, counted
  // here from the ledger's block tables (a block shared by several requests
  // is freed only with its last holder): what the scheduler planned (grows
  // exactly, admissions as if nothing were cached) plus what it has left.
  // Exact without sharing. With prefix caching the scheduler's count is an
  // estimate (kv_grant::grow_ok): a step it overcounts is only recorded.
  void check_free_count(const kv_transaction& txn) {
    std::unordered_map<int32_t, int64_t> holders;
    for (request_id id : ids) {
      if (const std::vector<int32_t>* b = ledger.blocks_of(id)) {
        for (int32_t block : *b) ++holders[block];
      }
    }
    int64_t free_after_frees = ledger.pool().num_blocks_free();
    auto release = [&](request_id id) {
      if (const std::vector<int32_t>* b = ledger.blocks_of(id)) {
        for (int32_t block : *b) free_after_frees += --holders[block] == 0;
      }
    };
    for (request_id id : txn.swap_out_ids) release(id);
    for (request_id id : txn.free_ids) release(id);
    int64_t planned = 0;
    for (const kv_grow& g : txn.grows) {
      const std::vector<int32_t>* b = ledger.blocks_of(g.id);
      const int64_t needed = (g.num_tokens_after + limits.block_size - 1) / limits.block_size;
      planned += std::max<int64_t>(0, needed - (b ? static_cast<int64_t>(b->size()) : 0));
    }
    const int64_t grows = planned;
    for (const kv_admit& a : txn.admits) {
      planned += (a.num_computed_tokens + a.num_new_tokens + limits.block_size - 1) / limits.block_size;
    }
    if (!limits.enable_prefix_caching) {
      EXPECT_EQ(sched.num_blocks_free() + planned, free_after_frees)
          << "the scheduler's free-block count is off after step " << num_steps;
    }
    EXPECT_LE(sched.num_blocks_free() + planned, free_after_frees + num_blocks_overcount_bound(txn))
        << "the scheduler counts blocks no request ever freed, step " << num_steps;
    num_steps_overcounted += sched.num_blocks_free() + planned > free_after_frees;
    num_steps_grows_unfit += grows > free_after_frees;
  }

  // The most a scheduler could overcount: every block of every freed or
  // swapped-out request taken as freed.
  int64_t num_blocks_overcount_bound(const kv_transaction& txn) const {
    int64_t n = 0;
    for (const std::vector<request_id>* list : {&txn.swap_out_ids, &txn.free_ids}) {
      for (request_id id : *list) {
        if (const std::vector<int32_t>* b = ledger.blocks_of(id)) {
          for (int32_t block : *b) n += ledger.pool().ref_count(block) > 1;
        }
      }
    }
    return n;
  }

  std::string add(request_id id, int64_t prompt_len, sampling_params p) {
    ids.push_back(id);
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < prompt_len; ++i) prompt.push_back(300 + int32_t((id * 7 + i) % 100));
    return sched.add_request(id, std::move(prompt), p);
  }
  std::string add_prompt(request_id id, std::vector<int32_t> prompt, sampling_params p) {
    ids.push_back(id);
    prompts[id] = prompt;
    return sched.add_request(id, std::move(prompt), p);
  }

  // One schedule -> commit -> execute -> update round; what each request ran.
  std::map<request_id, int64_t> step(const hooks& h = {}) {
    std::map<request_id, int64_t> scheduled;
    const kv_transaction txn = sched.schedule();
    if (h.after_schedule) h.after_schedule();
    collect();
    check_free_count(txn);
    const kv_grant grant = ledger.apply(txn);
    num_steps_refusing_grows +=
        std::count(grant.grow_ok.begin(), grant.grow_ok.end(), uint8_t{0}) > 0;
    // Without prefix caching admissions are counted exactly too.
    if (!limits.enable_prefix_caching) {
      EXPECT_EQ(grant.num_blocks_free, sched.num_blocks_free());
    }
    const step_plan plan = sched.commit(grant);
    EXPECT_EQ(sched.num_blocks_free(), ledger.pool().num_blocks_free());
    last_plan = plan;
    if (plan.step_id == 0) return scheduled;  // nothing to run
    EXPECT_LE(plan.total_num_scheduled_tokens, limits.max_num_batched_tokens);
    EXPECT_LE(int64_t(plan.new_requests.size() + plan.cached_requests.size()), limits.max_num_seqs);
    const step_output out = worker.execute(plan, ledger, scheduled);
    if (h.after_execute) h.after_execute();
    collect();
    sched.update(out);
    collect();
    ++num_steps;
    return scheduled;
  }

  void run_to_completion() {
    for (int i = 0; i < 10000 && sched.has_unfinished(); ++i) step();
    ASSERT_FALSE(sched.has_unfinished());
  }

  // Finished requests' frees travel in the next transaction: send one.
  void drain_and_expect_all_blocks_free() {
    EXPECT_TRUE(step().empty());
    EXPECT_EQ(ledger.pool().num_blocks_free(), limits.num_blocks_usable);
    EXPECT_EQ(ledger.num_requests(), 0u);
    EXPECT_EQ(sched.num_blocks_free(), limits.num_blocks_usable);
    EXPECT_EQ(num_steps_refusing_grows, num_steps_grows_unfit);
    if (!limits.enable_prefix_caching) {
      EXPECT_EQ(num_steps_refusing_grows, 0);
    }
  }

  void collect() {
    for (const request_output& o : sched.take_outputs()) {
      result& r = results[o.id];
      EXPECT_EQ(r.num_finishes, 0) << "output for request " << o.id << " after it finished";
      r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finish != finish_reason::none) {
        r.finish = o.finish;
        ++r.num_finishes;
      }
    }
  }

  scheduler_limits limits;
  token_budget_scheduler sched;
  kv_ledger ledger;
  fake_worker worker;
  std::map<request_id, result> results;
  std::map<request_id, std::vector<int32_t>> prompts;  // those given to add_prompt
  std::vector<request_id> ids;                          // every request added
  int64_t num_steps_overcounted = 0;  // the scheduler counted more free blocks than exist
  int64_t num_steps_grows_unfit = 0;     // grows planned beyond the real free count
  int64_t num_steps_refusing_grows = 0;  // the block manager refused a grow (grow_ok)
  step_plan last_plan;
  int num_steps = 0;
};

scheduler_limits small_limits() {
  scheduler_limits l;
  l.max_num_batched_tokens = 16;
  l.max_num_seqs = 8;
  l.max_model_len = 64;
  l.block_size = 4;
  l.num_blocks_usable = 200;
  return l;
}

sampling_params tokens(int32_t max_tokens) {
  sampling_params p;
  p.max_tokens = max_tokens;
  return p;
}

TEST(scheduler_test, respects_token_budget_and_max_num_seqs) {
  scheduler_limits l = small_limits();
  l.max_num_batched_tokens = 10;
  l.max_num_seqs = 3;
  harness h(l);
  const std::vector<int64_t> prompts = {3, 25, 7, 12, 1, 30, 9, 4};
  int64_t expected_computed = 0, expected_generated = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int32_t max_tokens = 2 + int32_t(i % 5);
    ASSERT_EQ(h.add(i + 1, prompts[i], tokens(max_tokens)), "");
    expected_computed += prompts[i] + max_tokens - 1;  // the last token is never run
    expected_generated += max_tokens;
  }
  const auto first = h.step();
  int64_t first_total = 0;
  for (auto [id, n] : first) first_total += n;
  EXPECT_EQ(first_total, 10);  // enough work waits: the budget is filled
  EXPECT_EQ(first, (std::map<request_id, int64_t>{{1, 3}, {2, 7}}));
  h.run_to_completion();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const result& r = h.results[i + 1];
    EXPECT_EQ(r.tokens, std::vector<int32_t>(2 + i % 5, 7)) << "request " << i + 1;
    EXPECT_EQ(r.finish, finish_reason::length);
    EXPECT_EQ(r.num_finishes, 1);
  }
  const engine_stats s = h.sched.stats();
  EXPECT_EQ(s.num_requests_finished, 8);
  EXPECT_EQ(s.num_generated_tokens, expected_generated);
  EXPECT_EQ(s.num_computed_tokens, expected_computed);
  EXPECT_EQ(s.num_preemptions, 0);
  EXPECT_EQ(s.num_steps, h.num_steps);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, chunked_prefill_splits_a_long_prompt_and_mixes_in_decodes) {
  harness h(small_limits());  // budget 16
  ASSERT_EQ(h.add(1, 4, tokens(10)), "");
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 4}}));
  ASSERT_EQ(h.add(2, 40, tokens(2)), "");
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 1}, {2, 15}}));
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 1}, {2, 15}}));
  EXPECT_TRUE(h.results[2].tokens.empty());  // no token from a partial prefill
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 1}, {2, 10}}));
  EXPECT_EQ(h.results[2].tokens.size(), 1u);
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 1}, {2, 1}}));
  EXPECT_EQ(h.results[2].finish, finish_reason::length);
  h.run_to_completion();
  EXPECT_EQ(h.results[1].tokens.size(), 10u);
  h.drain_and_expect_all_blocks_free();
}

// Three decoders leave 29 of 32 tokens; a 30-token prompt must wait for them
// whole when chunked prefill is off, and starts at once as a chunk when on.
void run_long_prompt_behind_decodes(bool chunked, std::vector<std::map<request_id, int64_t>>& log) {
  scheduler_limits l = small_limits();
  l.max_num_batched_tokens = 32;
  l.max_model_len = 32;
  l.enable_chunked_prefill = chunked;
  harness h(l);
  for (request_id id : {1, 2, 3}) ASSERT_EQ(h.add(id, 2, tokens(6)), "");
  log.push_back(h.step());
  ASSERT_EQ(h.add(4, 30, tokens(2)), "");
  while (h.sched.has_unfinished()) log.push_back(h.step());
  for (request_id id : {1, 2, 3, 4}) EXPECT_EQ(h.results[id].finish, finish_reason::length);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, without_chunked_prefill_a_prompt_over_the_budget_left_waits) {
  std::vector<std::map<request_id, int64_t>> log;
  run_long_prompt_behind_decodes(false, log);
  size_t first = 0;
  while (first < log.size() && !log[first].count(4)) ++first;
  ASSERT_LT(first, log.size());
  EXPECT_EQ(log[first].at(4), 30);  // whole, never chunked
  EXPECT_EQ(first, 6u);             // after the decoders' 5 remaining steps
  for (size_t i = 0; i < first; ++i) EXPECT_EQ(log[i].size(), 3u) << "step " << i;
  std::vector<std::map<request_id, int64_t>> chunked_log;
  run_long_prompt_behind_decodes(true, chunked_log);
  EXPECT_EQ(chunked_log[1].at(4), 29);  // chunked: starts right away
}

TEST(scheduler_test, preemption_under_a_tiny_cache_keeps_every_output_exact) {
  scheduler_limits l = small_limits();
  l.max_num_batched_tokens = 8;  // small: a victim could come back as a chunk at once
  l.num_blocks_usable = 10;
  harness h(l);
  h.worker.next_token = [](request_id id, int64_t i) {
    return 100 + int32_t((id * 13 + i * 7) % 50);
  };
  // (prompt, max_tokens): each fits the cache alone (5 blocks), not all at once.
  const std::vector<std::pair<int64_t, int32_t>> reqs = {
      {6, 12}, {9, 10}, {5, 14}, {11, 9}, {7, 13}};
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(h.add(i + 1, reqs[i].first, tokens(reqs[i].second)), "");
  }
  int64_t preemptions = 0, preempting_steps = 0;
  hooks k;
  bool preempted_now = false;
  k.after_schedule = [&] {
    preempted_now = h.sched.stats().num_preemptions > preemptions;
    preemptions = h.sched.stats().num_preemptions;
  };
  for (int i = 0; i < 1000 && h.sched.has_unfinished(); ++i) {
    h.step(k);
    if (!preempted_now) continue;
    ++preempting_steps;  // as vLLM: a step that preempts admits nobody
    EXPECT_TRUE(h.last_plan.new_requests.empty()) << "step " << h.last_plan.step_id;
  }
  ASSERT_FALSE(h.sched.has_unfinished());
  EXPECT_GT(preempting_steps, 0);
  EXPECT_GT(h.sched.stats().num_preemptions, 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const request_id id = i + 1;
    std::vector<int32_t> want;
    for (int32_t k = 0; k < reqs[i].second; ++k) want.push_back(h.worker.next_token(id, k));
    EXPECT_EQ(h.results[id].tokens, want) << "request " << id;
    EXPECT_EQ(h.results[id].finish, finish_reason::length);
    EXPECT_EQ(h.results[id].num_finishes, 1);
  }
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, requests_keep_their_seed_or_get_one_from_the_engine) {
  harness h(small_limits());
  sampling_params seeded = tokens(2);
  seeded.has_seed = true;
  seeded.seed = 424242;
  ASSERT_EQ(h.add(1, 3, seeded), "");
  ASSERT_EQ(h.add(2, 3, tokens(2)), "");
  ASSERT_EQ(h.add(3, 3, tokens(2)), "");
  h.step();
  EXPECT_EQ(h.worker.first_seed.at(1), 424242u);
  EXPECT_NE(h.worker.first_seed.at(2), h.worker.first_seed.at(3));
  // A fixed engine seed reproduces the drawn seeds.
  harness again(small_limits());
  ASSERT_EQ(again.add(1, 3, seeded), "");
  ASSERT_EQ(again.add(2, 3, tokens(2)), "");
  again.step();
  EXPECT_EQ(again.worker.first_seed.at(2), h.worker.first_seed.at(2));
}

TEST(scheduler_test, eos_stops_unless_ignore_eos) {
  scheduler_limits l = small_limits();
  l.eos_token_ids = {2, 3};
  harness h(l);
  h.worker.next_token = [](request_id, int64_t i) { return i == 3 ? 3 : 9; };
  ASSERT_EQ(h.add(1, 5, tokens(8)), "");
  sampling_params ignore = tokens(8);
  ignore.ignore_eos = true;
  ASSERT_EQ(h.add(2, 5, ignore), "");
  h.run_to_completion();
  EXPECT_EQ(h.results[1].tokens, (std::vector<int32_t>{9, 9, 9, 3}));
  EXPECT_EQ(h.results[1].finish, finish_reason::stop);
  EXPECT_EQ(h.results[2].tokens, (std::vector<int32_t>{9, 9, 9, 3, 9, 9, 9, 9}));
  EXPECT_EQ(h.results[2].finish, finish_reason::length);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, stop_token_ids_stop_even_with_ignore_eos) {
  harness h(small_limits());
  h.worker.next_token = [](request_id, int64_t i) { return i == 2 ? 55 : 9; };
  sampling_params p = tokens(8);
  p.ignore_eos = true;
  p.stop_token_ids = {54, 55};
  ASSERT_EQ(h.add(1, 5, p), "");
  h.run_to_completion();
  EXPECT_EQ(h.results[1].tokens, (std::vector<int32_t>{9, 9, 55}));
  EXPECT_EQ(h.results[1].finish, finish_reason::stop);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, finishes_at_max_model_len) {
  scheduler_limits l = small_limits();
  l.max_model_len = 16;
  harness h(l);
  ASSERT_EQ(h.add(1, 10, tokens(100)), "");
  ASSERT_EQ(h.add(2, 16, tokens(100)), "");  // a full-length prompt still gets one token
  h.run_to_completion();
  EXPECT_EQ(h.results[1].tokens.size(), 6u);
  EXPECT_EQ(h.results[1].finish, finish_reason::length);
  EXPECT_EQ(h.results[2].tokens.size(), 1u);
  EXPECT_EQ(h.results[2].finish, finish_reason::length);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, add_request_rejects_what_can_never_run) {
  scheduler_limits l = small_limits();
  l.max_model_len = 16;
  l.num_blocks_usable = 3;  // 12 tokens of KV
  token_budget_scheduler s(l);
  EXPECT_EQ(s.add_request(1, {}, tokens(4)), "the prompt is empty");
  EXPECT_EQ(s.add_request(2, std::vector<int32_t>(17, 5), tokens(4)),
            "the prompt has 17 tokens, more than max_model_len 16");
  EXPECT_EQ(s.add_request(3, std::vector<int32_t>(10, 5), tokens(5)),
            "the request needs up to 4 KV blocks but the cache has only 3");
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.stats().num_prompt_tokens, 0);
  EXPECT_EQ(s.add_request(4, std::vector<int32_t>(10, 5), tokens(2)), "");  // 12 tokens fit
  EXPECT_TRUE(s.has_unfinished());
}

// ---- abort -------------------------------------------------------------------

TEST(scheduler_test, abort_while_waiting_finishes_at_once) {
  scheduler_limits l = small_limits();
  l.max_num_seqs = 1;
  harness h(l);
  ASSERT_EQ(h.add(1, 4, tokens(3)), "");
  ASSERT_EQ(h.add(2, 4, tokens(3)), "");
  h.step();
  EXPECT_EQ(h.sched.stats().num_waiting, 1);
  h.sched.abort_request(2);
  h.sched.abort_request(99);  // unknown: ignored
  h.collect();
  EXPECT_EQ(h.results[2].finish, finish_reason::abort);
  EXPECT_TRUE(h.results[2].tokens.empty());
  EXPECT_EQ(h.results.count(99), 0u);
  EXPECT_EQ(h.sched.stats().num_waiting, 0);
  h.run_to_completion();
  EXPECT_EQ(h.results[1].tokens.size(), 3u);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, abort_while_running_between_steps_frees_blocks) {
  harness h(small_limits());
  ASSERT_EQ(h.add(1, 9, tokens(20)), "");
  for (int i = 0; i < 3; ++i) h.step();
  EXPECT_GT(h.ledger.pool().num_blocks_used(), 0);
  h.sched.abort_request(1);
  h.collect();
  EXPECT_EQ(h.results[1].finish, finish_reason::abort);
  EXPECT_EQ(h.results[1].tokens.size(), 3u);
  EXPECT_FALSE(h.sched.has_unfinished());
  // The worker is told to drop it with the next plan.
  ASSERT_EQ(h.add(2, 3, tokens(1)), "");
  h.step();
  EXPECT_EQ(h.worker.requests.count(1), 0u);
  h.drain_and_expect_all_blocks_free();
}

// Aborts at each point of a step in flight: the step's token is discarded.
void abort_in_flight(bool before_commit) {
  harness h(small_limits());
  ASSERT_EQ(h.add(1, 9, tokens(20)), "");
  ASSERT_EQ(h.add(2, 5, tokens(4)), "");
  h.step();
  h.step();
  hooks k;
  auto abort = [&] {
    h.sched.abort_request(1);
    EXPECT_TRUE(h.sched.take_outputs().empty());  // not yet: the step is out
  };
  (before_commit ? k.after_schedule : k.after_execute) = abort;
  EXPECT_EQ(h.step(k).count(1), 1u);
  EXPECT_EQ(h.results[1].finish, finish_reason::abort);
  EXPECT_EQ(h.results[1].tokens.size(), 2u);
  h.run_to_completion();
  EXPECT_EQ(h.results[2].tokens.size(), 4u);
  EXPECT_EQ(h.worker.requests.count(1), 0u);
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_test, abort_in_flight_after_commit) { abort_in_flight(false); }
TEST(scheduler_test, abort_in_flight_before_commit) { abort_in_flight(true); }

TEST(scheduler_test, abort_of_a_request_preempted_by_the_step_in_flight) {
  scheduler_limits l = small_limits();
  l.num_blocks_usable = 4;  // two requests of up to 3 blocks each
  harness h(l);
  ASSERT_EQ(h.add(1, 4, tokens(8)), "");
  ASSERT_EQ(h.add(2, 4, tokens(8)), "");
  bool aborted = false;
  hooks k;
  k.after_schedule = [&] {
    if (aborted || h.sched.stats().num_preemptions == 0) return;
    EXPECT_EQ(h.sched.stats().num_waiting, 1);  // the newest, 2, went back to waiting
    h.sched.abort_request(2);
    aborted = true;
  };
  for (int i = 0; i < 100 && h.sched.has_unfinished(); ++i) h.step(k);
  ASSERT_TRUE(aborted);
  EXPECT_EQ(h.results[2].finish, finish_reason::abort);
  EXPECT_EQ(h.results[1].tokens.size(), 8u);
  EXPECT_EQ(h.results[1].finish, finish_reason::length);
  EXPECT_EQ(h.worker.requests.count(2), 0u);
  h.drain_and_expect_all_blocks_free();
}

// ---- prefix caching ------------------------------------------------------

scheduler_limits prefix_limits() {
  scheduler_limits l = small_limits();
  l.enable_prefix_caching = true;
  return l;
}

std::vector<int32_t> seq(int32_t first, int64_t n) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(first + static_cast<int32_t>(i));
  return v;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every request that ran to its length produced the context-driven reference.
void expect_reference_outputs(harness& h, const std::map<request_id, int32_t>& max_tokens) {
  for (const auto& [id, n] : max_tokens) {
    EXPECT_EQ(h.results[id].tokens, reference_generation(h.prompts.at(id), n)) << "request " << id;
    EXPECT_EQ(h.results[id].finish, finish_reason::length) << "request " << id;
    EXPECT_EQ(h.results[id].num_finishes, 1) << "request " << id;
  }
}

// A (shared prefix + 3) runs to the end; then B (shared prefix + 2) and C
// (the first two blocks of the prefix, exactly) arrive.
struct later_hit_run {
  std::vector<new_request_data> b_first, c_first;
  int64_t computed_after_a = 0, computed_after_b_step = 0, computed_after_b = 0;
  engine_stats stats;
  std::map<request_id, result> results;
  int64_t num_blocks_cached = 0;
};

later_hit_run run_later_hit(bool caching) {
  scheduler_limits l = prefix_limits();
  l.enable_prefix_caching = caching;
  harness h(l);
  h.worker.sample_from_context = true;
  const std::vector<int32_t> shared = seq(500, 20);  // 5 blocks of 4
  later_hit_run run;
  EXPECT_EQ(h.add_prompt(1, concat(shared, {900, 901, 902}), tokens(4)), "");
  h.run_to_completion();
  run.computed_after_a = h.sched.stats().num_computed_tokens;
  EXPECT_EQ(h.add_prompt(2, concat(shared, {910, 911}), tokens(4)), "");
  h.step();
  run.b_first = h.last_plan.new_requests;
  run.computed_after_b_step = h.sched.stats().num_computed_tokens;
  h.run_to_completion();
  run.computed_after_b = h.sched.stats().num_computed_tokens;
  EXPECT_EQ(h.add_prompt(3, seq(500, 8), tokens(2)), "");
  h.step();
  run.c_first = h.last_plan.new_requests;
  h.run_to_completion();
  expect_reference_outputs(h, {{1, 4}, {2, 4}, {3, 2}});
  run.stats = h.sched.stats();
  run.results = h.results;
  h.drain_and_expect_all_blocks_free();
  run.num_blocks_cached = h.ledger.pool().num_blocks_cached();
  return run;
}

TEST(scheduler_prefix_test, a_later_request_computes_only_what_the_cache_lacks) {
  const later_hit_run on = run_later_hit(true);
  EXPECT_EQ(on.computed_after_a, 23 + 3);
  ASSERT_EQ(on.b_first.size(), 1u);
  EXPECT_EQ(on.b_first[0].id, 2u);
  EXPECT_EQ(on.b_first[0].num_computed_tokens, 20);  // all 5 shared blocks
  EXPECT_EQ(on.b_first[0].num_scheduled_tokens, 2);  // only the suffix
  EXPECT_EQ(on.computed_after_b_step - on.computed_after_a, 2);
  EXPECT_EQ(on.computed_after_b - on.computed_after_a, 2 + 3);
  // A prompt of exactly two blocks: its last token must be computed, so
  // only the first block is a hit.
  ASSERT_EQ(on.c_first.size(), 1u);
  EXPECT_EQ(on.c_first[0].num_computed_tokens, 4);
  EXPECT_EQ(on.c_first[0].num_scheduled_tokens, 4);
  EXPECT_EQ(on.stats.prefix_cache_queries, 23 + 22 + 8);
  EXPECT_EQ(on.stats.prefix_cache_hits, 20 + 4);
  EXPECT_GT(on.num_blocks_cached, 0);  // finished requests' blocks stay cached

  const later_hit_run off = run_later_hit(false);
  ASSERT_EQ(off.b_first.size(), 1u);
  EXPECT_EQ(off.b_first[0].num_computed_tokens, 0);
  EXPECT_EQ(off.computed_after_b - off.computed_after_a, 22 + 3);
  EXPECT_EQ(off.stats.prefix_cache_queries, 0);
  EXPECT_EQ(off.stats.prefix_cache_hits, 0);
  EXPECT_EQ(off.num_blocks_cached, 0);
  for (request_id id : {1, 2, 3}) {
    EXPECT_EQ(on.results.at(id).tokens, off.results.at(id).tokens) << "request " << id;
  }
}

TEST(scheduler_prefix_test, a_running_request_shares_its_prefix_blocks) {
  harness h(prefix_limits());  // budget 16
  h.worker.sample_from_context = true;
  const std::vector<int32_t> shared = seq(500, 20);
  ASSERT_EQ(h.add_prompt(1, concat(shared, {900, 901, 902}), tokens(6)), "");
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 16}}));  // 4 blocks computed
  ASSERT_EQ(h.add_prompt(2, concat(shared, {910, 911}), tokens(5)), "");
  // Admitted in the step that computes A's fifth block: A's grow registers
  // it before B's lookup, and the model writes every KV of a layer before
  // any attention reads, so B may use it at once.
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 7}, {2, 2}}));
  ASSERT_EQ(h.last_plan.new_requests.size(), 1u);
  EXPECT_EQ(h.last_plan.new_requests[0].num_computed_tokens, 20);
  const std::vector<int32_t> a = *h.ledger.blocks_of(1);
  const std::vector<int32_t> b = *h.ledger.blocks_of(2);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(a[i], b[i]) << "block " << i;
    EXPECT_EQ(h.ledger.pool().ref_count(a[i]), 2) << "block " << i;
  }
  EXPECT_NE(a[5], b[5]);
  EXPECT_EQ(h.ledger.pool().num_blocks_used(), 7);
  h.run_to_completion();
  expect_reference_outputs(h, {{1, 6}, {2, 5}});
  EXPECT_EQ(h.sched.stats().num_computed_tokens, (23 + 5) + (2 + 4));
  h.drain_and_expect_all_blocks_free();
}

// B shares A's two prefix blocks. When A and C both cross a block boundary
// with no block free, B (the newest) is preempted: that frees one block, not
// three, as B's other two stay A's. The scheduler counts three (its free
// count is an estimate once blocks are shared), so C's grow does not fit:
// the block manager must refuse it (grow_ok), never abort, C and the later
// requests sit the step out, and every output is still exact.
TEST(scheduler_prefix_test, preempting_a_request_that_shares_blocks) {
  scheduler_limits l = prefix_limits();
  l.max_num_batched_tokens = 64;
  l.num_blocks_usable = 14;
  harness h(l);
  h.worker.sample_from_context = true;
  const std::vector<int32_t> shared = seq(500, 8);
  ASSERT_EQ(h.add_prompt(1, concat(shared, {900}), tokens(10)), "");  // A: 3 blocks
  ASSERT_EQ(h.add_prompt(2, seq(600, 9), tokens(10)), "");            // C: 3 blocks
  ASSERT_EQ(h.add_prompt(3, seq(700, 7), tokens(10)), "");            // D: crosses in step 3
  ASSERT_EQ(h.add_prompt(4, seq(800, 10), tokens(10)), "");           // E: crosses in step 4
  h.step();
  EXPECT_EQ(h.ledger.pool().num_blocks_free(), 3);
  ASSERT_EQ(h.add_prompt(5, concat(shared, {910}), tokens(10)), "");  // B
  h.step();
  ASSERT_EQ(h.last_plan.new_requests.size(), 1u);
  EXPECT_EQ(h.last_plan.new_requests[0].num_computed_tokens, 8);
  EXPECT_EQ(h.ledger.pool().ref_count((*h.ledger.blocks_of(1))[0]), 2);
  h.step();
  h.step();
  EXPECT_EQ(h.ledger.pool().num_blocks_free(), 0);
  EXPECT_EQ(h.sched.stats().num_preemptions, 0);
  const std::map<request_id, int64_t> fifth = h.step();
  EXPECT_EQ(fifth.count(1), 1u);      // A grows into B's own block
  EXPECT_EQ(fifth.count(5), 0u);      // B was preempted
  EXPECT_GE(h.sched.stats().num_preemptions, 1);
  EXPECT_EQ(h.ledger.blocks_of(5), nullptr);
  EXPECT_EQ(h.ledger.pool().ref_count((*h.ledger.blocks_of(1))[0]), 1);
  h.run_to_completion();
  expect_reference_outputs(h, {{1, 10}, {2, 10}, {3, 10}, {4, 10}, {5, 10}});
  h.drain_and_expect_all_blocks_free();
}

// A prefill aborted after its first chunk leaves only the blocks that chunk
// filled in the cache; the next request with that prompt computes the rest.
TEST(scheduler_prefix_test, an_aborted_chunked_prefill_caches_only_its_full_blocks) {
  scheduler_limits l = prefix_limits();
  l.max_num_batched_tokens = 6;
  harness h(l);
  h.worker.sample_from_context = true;
  const std::vector<int32_t> prompt = seq(500, 13);
  ASSERT_EQ(h.add_prompt(1, prompt, tokens(3)), "");
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{1, 6}}));  // 1.5 blocks
  h.sched.abort_request(1);
  h.collect();
  EXPECT_EQ(h.results[1].finish, finish_reason::abort);
  ASSERT_EQ(h.add_prompt(2, prompt, tokens(3)), "");
  EXPECT_EQ(h.step(), (std::map<request_id, int64_t>{{2, 6}}));
  ASSERT_EQ(h.last_plan.new_requests.size(), 1u);
  EXPECT_EQ(h.last_plan.new_requests[0].num_computed_tokens, 4);
  h.run_to_completion();
  expect_reference_outputs(h, {{2, 3}});
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_prefix_test, prompt_logprobs_requests_compute_every_prompt_token) {
  harness h(prefix_limits());
  h.worker.sample_from_context = true;
  const std::vector<int32_t> prompt = seq(500, 13);
  ASSERT_EQ(h.add_prompt(1, prompt, tokens(2)), "");
  h.run_to_completion();
  sampling_params p = tokens(2);
  p.prompt_logprobs = 0;
  ASSERT_EQ(h.add_prompt(2, prompt, p), "");
  h.step();
  ASSERT_EQ(h.last_plan.new_requests.size(), 1u);
  EXPECT_EQ(h.last_plan.new_requests[0].num_computed_tokens, 0);
  ASSERT_EQ(h.add_prompt(3, prompt, tokens(2)), "");  // an ordinary one still hits
  h.run_to_completion();
  expect_reference_outputs(h, {{1, 2}, {2, 2}, {3, 2}});
  EXPECT_EQ(h.sched.stats().prefix_cache_hits, 12);
  EXPECT_EQ(h.worker.num_tokens_found_computed, 12);
  h.drain_and_expect_all_blocks_free();
}

// Requests over two shared prefixes in a cache that holds about two of them:
// preemption and prefix hits interleave; every output is still exact.
void run_shared_prefixes_under_pressure(bool caching, std::map<request_id, result>& out,
                                        engine_stats& stats) {
  scheduler_limits l = prefix_limits();
  l.enable_prefix_caching = caching;
  l.max_num_batched_tokens = 8;
  l.num_blocks_usable = 12;
  harness h(l);
  h.worker.sample_from_context = true;
  const std::vector<int32_t> p1 = seq(500, 12), p2 = seq(600, 9);
  std::map<request_id, int32_t> max_tokens;
  for (request_id id = 1; id <= 8; ++id) {
    const std::vector<int32_t>& prefix = id % 2 ? p1 : p2;
    const int32_t n = 6 + int32_t(id % 4) * 3;
    ASSERT_EQ(h.add_prompt(id, concat(prefix, seq(1000 + int32_t(id) * 10, id % 3)), tokens(n)),
              "");
    max_tokens[id] = n;
  }
  for (int i = 0; i < 2000 && h.sched.has_unfinished(); ++i) h.step();
  ASSERT_FALSE(h.sched.has_unfinished());
  expect_reference_outputs(h, max_tokens);
  stats = h.sched.stats();
  out = h.results;
  h.drain_and_expect_all_blocks_free();
}

TEST(scheduler_prefix_test, preemption_with_prefix_caching_keeps_every_output_exact) {
  std::map<request_id, result> on, off;
  engine_stats on_stats, off_stats;
  run_shared_prefixes_under_pressure(true, on, on_stats);
  run_shared_prefixes_under_pressure(false, off, off_stats);
  EXPECT_GT(on_stats.num_preemptions, 0);
  EXPECT_GT(on_stats.prefix_cache_hits, 0);
  EXPECT_LT(on_stats.num_computed_tokens, off_stats.num_computed_tokens);
  EXPECT_EQ(off_stats.prefix_cache_hits, 0);
  for (const auto& [id, r] : off) EXPECT_EQ(on.at(id).tokens, r.tokens) << "request " << id;
}

// Random arrivals, prompts over a few shared prefixes, random aborts, a
// cache too small for everyone: the fake worker checks every KV read and
// write, outputs are checked against the reference.
TEST(scheduler_prefix_test, random_traffic_over_shared_prefixes) {
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u, 6u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto pick = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    scheduler_limits l = prefix_limits();
    l.max_num_batched_tokens = pick(4, 24);
    l.max_num_seqs = pick(2, 6);
    l.max_model_len = 48;
    l.num_blocks_usable = pick(12, 24);
    harness h(l);
    h.worker.sample_from_context = true;
    std::vector<std::vector<int32_t>> prefixes;
    for (int i = 0; i < 3; ++i) prefixes.push_back(seq(2000 + 100 * i, pick(1, 20)));
    std::map<request_id, int32_t> max_tokens;
    std::vector<request_id> aborted;
    request_id next_id = 1;
    for (int i = 0; i < 400 && (next_id <= 40 || h.sched.has_unfinished()); ++i) {
      while (next_id <= 40 && pick(0, 2) == 0) {
        std::vector<int32_t> prompt = prefixes[static_cast<size_t>(pick(0, 2))];
        for (int64_t k = pick(0, 6); k > 0; --k) prompt.push_back(int32_t(pick(3000, 3003)));
        const int32_t n = int32_t(pick(1, 12));
        ASSERT_EQ(h.add_prompt(next_id, prompt, tokens(n)), "");
        max_tokens[next_id++] = n;
      }
      if (pick(0, 30) == 0 && next_id > 1) {
        const request_id victim = request_id(pick(1, int64_t(next_id) - 1));
        if (h.results[victim].num_finishes == 0) aborted.push_back(victim);
        h.sched.abort_request(victim);
        h.collect();
      }
      h.step();
    }
    ASSERT_FALSE(h.sched.has_unfinished());
    EXPECT_GT(h.sched.stats().prefix_cache_hits, 0);
    for (request_id id : aborted) {
      const std::vector<int32_t> want = reference_generation(h.prompts.at(id), max_tokens.at(id));
      const std::vector<int32_t>& got = h.results[id].tokens;
      EXPECT_TRUE(got.size() <= want.size() && std::equal(got.begin(), got.end(), want.begin()))
          << "aborted request " << id;
      EXPECT_EQ(h.results[id].finish, finish_reason::abort);
      max_tokens.erase(id);
    }
    expect_reference_outputs(h, max_tokens);
    h.drain_and_expect_all_blocks_free();
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace troupe
