// The scheduler test harness: token_budget_scheduler driven step by step
// against a real kv_ledger and a fake worker that checks every token's KV
// placement (a content-addressed fake cache) and compares outputs with a
// reference computed without any scheduler. Shared by scheduler_test.cpp and
// scheduler_prefix_test.cpp.
#pragma once

#include <gtest/gtest.h>
#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>
#include "actors/block_manager/kv_ledger.h"
#include "actors/scheduler/token_budget_scheduler.h"

namespace troupe::sched_testing {


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
    std::vector<fork_child> fork_children;  // this step's, sampled with its token
    std::vector<int32_t> drafts;            // this step's draft tokens (speculative decoding)
    // Its tokens and then its drafts: what the step's positions hold.
    context extended() const {
      context e = token_ids;
      e.insert(e.end(), drafts.begin(), drafts.end());
      return e;
    }
  };
  int64_t block_size = 0;
  token_fn next_token = [](request_id, int64_t) { return 7; };
  // Sample next_of_context(the context read back from the KV cache) instead.
  bool sample_from_context = false;
  bool pipelined = false;  // plans are committed one step ahead (async scheduling)
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
             d.num_scheduled_tokens, {}, {}};
      EXPECT_TRUE(requests.emplace(d.id, r).second) << "new request " << d.id << " already held";
      EXPECT_TRUE(first_seed.emplace(d.id, d.seed).first->second == d.seed)
          << "request " << d.id << " came back with another seed";
      num_tokens_found_computed += d.num_computed_tokens;
      requests.at(d.id).fork_children = d.fork_children;
      order.push_back(d.id);
    }
    for (const cached_request_data& d : plan.cached_requests) {
      auto it = requests.find(d.id);
      if (it == requests.end()) {
        ADD_FAILURE() << "plan names request " << d.id << " the worker does not hold";
        continue;
      }
      it->second.fork_children = d.fork_children;
      for (size_t k = 0; k < d.replaced_index.size(); ++k) {  // copy-on-write
        it->second.block_ids.at(static_cast<size_t>(d.replaced_index[k])) = d.replaced_block[k];
      }
      it->second.block_ids.insert(it->second.block_ids.end(), d.new_block_ids.begin(),
                                  d.new_block_ids.end());
      it->second.num_scheduled_tokens = d.num_scheduled_tokens;
      it->second.drafts = d.spec_token_ids;
      order.push_back(d.id);
    }
    // As each layer of the model does: every KV write of the batch, then
    // every read.
    int64_t total = 0;
    for (request_id id : order) {
      held& r = requests.at(id);
      const std::vector<int32_t>* owned = ledger.blocks_of(id);
      if (pipelined) {
        // The next step's transaction may already be applied: the ledger
        // may hold more blocks, or (a request this step's predecessor
        // finished) none.
        EXPECT_TRUE(owned == nullptr ||
                    (owned->size() >= r.block_ids.size() &&
                     std::equal(r.block_ids.begin(), r.block_ids.end(), owned->begin())))
            << "block table of " << id;
      } else {
        EXPECT_TRUE(owned != nullptr && *owned == r.block_ids) << "block table of " << id;
      }
      const int64_t end = r.num_computed_tokens + r.num_scheduled_tokens;
      const context ext = r.extended();
      EXPECT_GT(r.num_scheduled_tokens, 0);
      EXPECT_LE(end, static_cast<int64_t>(ext.size()));
      EXPECT_LE(end, static_cast<int64_t>(r.block_ids.size()) * block_size);
      if (end > static_cast<int64_t>(ext.size()) ||
          end > static_cast<int64_t>(r.block_ids.size()) * block_size) {
        return {};
      }
      for (int64_t p = r.num_computed_tokens; p < end; ++p) {
        context content(ext.begin(), ext.begin() + p + 1);
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
      const context ext = r.extended();
      const auto k = static_cast<int64_t>(r.drafts.size());
      std::vector<const context*> read(static_cast<size_t>(end), nullptr);
      for (int64_t p = 0; p < end; ++p) {  // the whole context attention would read
        auto it = kv.find(slot(r, p));
        const bool ok = it != kv.end() && static_cast<int64_t>(it->second.size()) == p + 1 &&
                        std::equal(it->second.begin(), it->second.end(), ext.begin());
        EXPECT_TRUE(ok) << "request " << id << " position " << p << " lost its KV";
        if (it != kv.end()) read[static_cast<size_t>(p)] = &it->second;
      }
      const context* last = end > 0 ? read[static_cast<size_t>(end - 1)] : nullptr;
      sampled_output s;
      s.id = id;
      int64_t accepted = 0;
      if (end == static_cast<int64_t>(ext.size())) {
        // One sample after the last token and after each draft; the drafts
        // are kept while they equal the samples (the worker's rule).
        for (int64_t j = 0; j <= k; ++j) {
          const int64_t p = end - 1 - k + j;
          const context* c = p >= 0 ? read[static_cast<size_t>(p)] : nullptr;
          s.token_ids.push_back(sample_from_context ? (c ? next_of_context(*c) : 0)
                                                    : next_token(id, p + 1 - r.num_prompt_tokens));
          if (j < k && s.token_ids.back() != r.drafts[static_cast<size_t>(j)]) break;
          if (j < k) ++accepted;
        }
        s.num_draft_tokens = static_cast<int32_t>(k);
      }
      // Parallel samples: their first token from the same logits (the same
      // context), as the worker's fork_samples.
      for (const fork_child& c : r.fork_children) {
        EXPECT_EQ(end, static_cast<int64_t>(r.token_ids.size())) << "forks on a partial prefill";
        fork_sample f;
        f.id = c.id;
        f.token_id = sample_from_context ? (last ? next_of_context(*last) : 0) : next_token(c.id, 0);
        s.fork_samples.push_back(f);
      }
      r.fork_children.clear();
      out.outputs.push_back(s);
      r.num_computed_tokens = end - (k - accepted);
      r.num_scheduled_tokens = 0;
      r.token_ids.insert(r.token_ids.end(), s.token_ids.begin(), s.token_ids.end());
      r.drafts.clear();
      // Rejected drafts: the blocks past the verified tokens are given back.
      const int64_t keep = (r.num_computed_tokens + block_size - 1) / block_size;
      if (static_cast<int64_t>(r.block_ids.size()) > keep) r.block_ids.resize(static_cast<size_t>(keep));
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
      : limits(l), sched(l),
        ledger(l.num_blocks_usable + 1, l.block_size, l.enable_prefix_caching, l.num_cpu_blocks) {
    worker.block_size = l.block_size;
  }

  // The scheduler's free count after its frees against the pool's, counted
  // here from the ledger's block tables (a block shared by several requests
  // is freed only with its last holder): what the scheduler planned (grows
  // exactly, admissions as if nothing were cached) plus what it has left.
  // Exact, shared blocks included: the scheduler counts the holders of every
  // block, so a release adds only the blocks nobody else holds.
  void check_free_count(const kv_transaction& txn) {
    std::unordered_map<int32_t, int64_t> holders;
    for (request_id id : ids) {
      if (const std::vector<int32_t>* b = ledger.blocks_of(id)) {
        for (int32_t block : *b) ++holders[block];
      }
    }
    int64_t free_after_frees = ledger.pool().num_blocks_free();
    // Rollbacks (rejected drafts) come first: the blocks past each one's
    // verified tokens go.
    std::unordered_map<request_id, size_t> kept;
    for (const kv_rollback& rb : txn.rollbacks) {
      const std::vector<int32_t>* b = ledger.blocks_of(rb.id);
      if (b == nullptr) continue;
      const auto keep = static_cast<size_t>((rb.num_tokens + limits.block_size - 1) / limits.block_size);
      for (size_t i = keep; i < b->size(); ++i) free_after_frees += --holders[(*b)[i]] == 0;
      kept[rb.id] = std::min(keep, b->size());
    }
    auto size_of = [&](request_id id, const std::vector<int32_t>& b) {
      auto it = kept.find(id);
      return it == kept.end() ? b.size() : it->second;
    };
    auto release = [&](request_id id) {
      if (const std::vector<int32_t>* b = ledger.blocks_of(id)) {
        for (size_t i = 0; i < size_of(id, *b); ++i) free_after_frees += --holders[(*b)[i]] == 0;
      }
    };
    for (request_id id : txn.swap_out_ids) release(id);
    for (request_id id : txn.free_ids) release(id);
    std::unordered_map<request_id, request_id> forked_from;  // a fork's table is its parent's
    for (const kv_fork& f : txn.forks) forked_from[f.child] = f.parent;
    int64_t planned = 0;
    for (const kv_grow& g : txn.grows) {
      auto parent = forked_from.find(g.id);
      const request_id owner = parent == forked_from.end() ? g.id : parent->second;
      const std::vector<int32_t>* b = ledger.blocks_of(owner);
      const int64_t needed = (g.num_tokens_after + limits.block_size - 1) / limits.block_size;
      planned += std::max<int64_t>(0, needed - (b ? static_cast<int64_t>(size_of(owner, *b)) : 0));
    }
    const int64_t grows = planned;
    for (const kv_admit& a : txn.admits) {
      planned += (a.num_computed_tokens + a.num_new_tokens + limits.block_size - 1) / limits.block_size;
    }
    // With forks the scheduler reserves a copy-on-write block for every
    // sharer of a partly filled block, one more than the ledger copies when
    // the last sharer writes in place: it may count fewer free blocks, never more.
    if (!forks_in_use) {
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
  std::string add_prompt(request_id id, std::vector<int32_t> prompt, sampling_params p,
                         request_id fork_of = 0, request_id group = 0) {
    ids.push_back(id);
    prompts[id] = prompt;
    forks_in_use = forks_in_use || fork_of != 0;
    return sched.add_request(id, std::move(prompt), p, fork_of, group);
  }

  // One schedule -> commit -> execute -> update round; what each request ran.
  std::map<request_id, int64_t> step(const hooks& h = {}) {
    std::map<request_id, int64_t> scheduled;
    const step_plan plan = commit_step(h);
    if (plan.step_id == 0) return scheduled;  // nothing to run
    execute_step(plan, scheduled, h);
    return scheduled;
  }

  // Async scheduling as the scheduler actor and an overlapping worker run
  // it: after step N is committed, N + 1 is planned and committed before N's
  // output is applied whenever the scheduler allows (can_schedule_ahead);
  // outputs are applied in step order. The fake worker runs plans in commit
  // order, as the device stream does, so a placeholder token is known to it
  // by the time the next plan reads it. With pipeline micro-batches, up to
  // pipeline_depth steps are in flight the same way (each stage runs them in
  // commit order). Returns the steps planned ahead; `per_step`, if given,
  // gets each step's running (already admitted) requests.
  int64_t run_pipelined(std::vector<size_t>* per_step = nullptr) {
    worker.pipelined = true;
    std::deque<step_plan> in_flight;  // committed, not yet run and updated
    int64_t ahead = 0;
    for (int i = 0; i < 20000; ++i) {
      if (in_flight.empty()) {
        if (!sched.has_unfinished()) break;
        const step_plan plan = commit_step({});
        if (plan.step_id != 0) in_flight.push_back(plan);
        continue;
      }
      EXPECT_EQ(sched.steps_in_flight(), static_cast<int>(in_flight.size()));
      while (static_cast<int>(in_flight.size()) < sched.max_steps_in_flight() &&
             sched.can_schedule_ahead()) {
        const step_plan plan = commit_step({});
        if (plan.step_id == 0) break;
        in_flight.push_back(plan);
        ++ahead;
      }
      EXPECT_EQ(sched.check_invariants(), "");
      if (per_step != nullptr) per_step->push_back(in_flight.front().cached_requests.size());
      std::map<request_id, int64_t> scheduled;
      execute_step(in_flight.front(), scheduled, {});
      in_flight.pop_front();
    }
    EXPECT_TRUE(in_flight.empty());
    EXPECT_FALSE(sched.has_unfinished());
    return ahead;
  }

  // Speculative decoding: what the drafter would be told, answered with
  // draft_fn's proposals (none without it).
  std::function<std::vector<int32_t>(request_id, int32_t limit)> draft_fn;
  void offer_drafts() {
    if (limits.num_speculative_tokens <= 0 || !draft_fn) return;
    bool blocking = false;
    const draft_sync s = sched.take_draft_sync(blocking);
    if (s.propose_ids.empty() && s.removed.empty()) return;
    draft_proposals p;
    for (size_t i = 0; i < s.propose_ids.size(); ++i) {
      std::vector<int32_t> d = draft_fn(s.propose_ids[i], s.propose_limits[i]);
      EXPECT_LE(static_cast<int64_t>(d.size()), s.propose_limits[i]);
      if (d.empty()) continue;
      p.ids.push_back(s.propose_ids[i]);
      p.tokens.push_back(std::move(d));
    }
    sched.set_drafts(p);
  }

  step_plan commit_step(const hooks& h) {
    offer_drafts();
    const kv_transaction txn = sched.schedule();
    if (h.after_schedule) h.after_schedule();
    collect();
    check_free_count(txn);
    const kv_grant grant = ledger.apply(txn);
    num_steps_refusing_grows +=
        std::count(grant.grow_ok.begin(), grant.grow_ok.end(), uint8_t{0}) > 0;
    // Without prefix caching admissions are counted exactly too (forks:
    // conservatively, see check_free_count).
    if (!limits.enable_prefix_caching && !forks_in_use) {
      EXPECT_EQ(grant.num_blocks_free, sched.num_blocks_free());
    }
    if (!limits.enable_prefix_caching) {
      EXPECT_LE(sched.num_blocks_free(), grant.num_blocks_free);
    }
    const step_plan plan = sched.commit(grant);
    EXPECT_EQ(sched.num_blocks_free(), ledger.pool().num_blocks_free());
    last_plan = plan;
    return plan;
  }

  void execute_step(const step_plan& plan, std::map<request_id, int64_t>& scheduled,
                    const hooks& h) {
    EXPECT_LE(plan.total_num_scheduled_tokens, limits.max_num_batched_tokens);
    EXPECT_LE(int64_t(plan.new_requests.size() + plan.cached_requests.size()), limits.max_num_seqs);
    const step_output out = worker.execute(plan, ledger, scheduled);
    if (h.after_execute) h.after_execute();
    collect();
    sched.update(out);
    collect();
    ++num_steps;
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
  bool forks_in_use = false;  // some request was added as a fork (add_prompt)
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


}  // namespace troupe::sched_testing
