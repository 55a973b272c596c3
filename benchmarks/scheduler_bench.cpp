// scheduler_bench: the CPU cost of one scheduling step with no model:
// token_budget_scheduler::schedule() + kv_ledger::apply() (the block
// manager's work) + commit(), then update() with the step's sampled tokens
// (and take_outputs(), as the scheduler actor drains them every step).
// A fake worker answers each plan with one token per request whose tokens
// are all computed.
//
// Each benchmark iteration is one step; its CPU time covers everything
// above plus the fake worker and freeing the step's messages (transaction,
// grant, plan, outputs). Counters give the phases' average wall time per
// step (µs): schedule_us, apply_us, commit_us, update_us (with
// take_outputs), worker_us (the fake worker), and step_us = schedule +
// apply + commit (the goal: < 100 µs).
//
//   build-sched/benchmarks/scheduler_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one command line)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/block_manager/kv_ledger.h"
#include "actors/scheduler/token_budget_scheduler.h"

namespace troupe {
namespace {

using bench_clock = std::chrono::steady_clock;

double micros(bench_clock::time_point a, bench_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct phase_times {
  double schedule = 0, apply = 0, commit = 0, worker = 0, update = 0;
};

// A scheduler, its block manager and a fake worker, stepped in lockstep.
class engine_loop {
 public:
  explicit engine_loop(const scheduler_limits& l)
      : sched_(l), ledger_(l.num_blocks_usable + 1, l.block_size, l.enable_prefix_caching) {}

  token_budget_scheduler& sched() { return sched_; }

  // One step; the plan's token count (0: nothing ran). Finished requests'
  // ids are appended to `finished`.
  int64_t step(phase_times& t, std::vector<request_id>* finished = nullptr) {
    const auto t0 = bench_clock::now();
    const kv_transaction txn = sched_.schedule();
    const auto t1 = bench_clock::now();
    const kv_grant grant = ledger_.apply(txn);
    const auto t2 = bench_clock::now();
    const step_plan plan = sched_.commit(grant);
    const auto t3 = bench_clock::now();
    if (plan.step_id == 0) return 0;
    respond(plan);
    const auto t4 = bench_clock::now();
    sched_.update(output_);
    const std::vector<request_output> outs = sched_.take_outputs();
    const auto t5 = bench_clock::now();
    if (finished) {
      for (const request_output& o : outs) {
        if (o.finish != finish_reason::none) finished->push_back(o.id);
      }
    }
    t.schedule += micros(t0, t1);
    t.apply += micros(t1, t2);
    t.commit += micros(t2, t3);
    t.worker += micros(t3, t4);
    t.update += micros(t4, t5);
    return plan.total_num_scheduled_tokens;
  }

 private:
  struct progress {
    int64_t num_tokens = 0;
    int64_t num_computed_tokens = 0;
  };

  void emit(request_id id, int64_t num_scheduled_tokens, progress& p) {
    p.num_computed_tokens += num_scheduled_tokens;
    sampled_output s;
    s.id = id;
    if (p.num_computed_tokens == p.num_tokens) {
      s.token_ids = {1000 + static_cast<int32_t>((id * 31 + static_cast<uint64_t>(p.num_tokens)) % 20000)};
      ++p.num_tokens;
    }
    output_.outputs.push_back(std::move(s));
  }

  void respond(const step_plan& plan) {
    for (request_id id : plan.finished_ids) progress_.erase(id);
    output_.step_id = plan.step_id;
    output_.outputs.clear();
    for (const new_request_data& d : plan.new_requests) {
      progress& p = progress_[d.id];
      p.num_tokens = static_cast<int64_t>(d.token_ids.size());
      p.num_computed_tokens = d.num_computed_tokens;
      emit(d.id, d.num_scheduled_tokens, p);
    }
    for (const cached_request_data& d : plan.cached_requests) {
      emit(d.id, d.num_scheduled_tokens, progress_[d.id]);
    }
  }

  token_budget_scheduler sched_;
  kv_ledger ledger_;
  std::unordered_map<request_id, progress> progress_;
  step_output output_;
};

sampling_params endless(int32_t max_tokens) {
  sampling_params p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// 128-token prompts: a 64-token prefix all share, then 64 of their own.
std::vector<int32_t> decode_prompt(request_id id) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < 64; ++i) p.push_back(500 + i);
  for (int32_t i = 0; i < 64; ++i) p.push_back(2000 + static_cast<int32_t>((id * 64 + i) % 30000));
  return p;
}

// Runs steps until one schedules nothing but `num_decodes` decode tokens.
void warm_up(engine_loop& loop, int64_t num_decodes) {
  phase_times ignored;
  for (int i = 0; i < 10000; ++i) {
    if (loop.step(ignored) == num_decodes) return;
  }
}

void set_counters(benchmark::State& state, const phase_times& t, int64_t tokens) {
  const auto avg = benchmark::Counter::kAvgIterations;
  state.counters["schedule_us"] = benchmark::Counter(t.schedule, avg);
  state.counters["apply_us"] = benchmark::Counter(t.apply, avg);
  state.counters["commit_us"] = benchmark::Counter(t.commit, avg);
  state.counters["update_us"] = benchmark::Counter(t.update, avg);
  state.counters["worker_us"] = benchmark::Counter(t.worker, avg);
  state.counters["step_us"] = benchmark::Counter(t.schedule + t.apply + t.commit, avg);
  state.counters["tokens_per_step"] = benchmark::Counter(static_cast<double>(tokens), avg);
}

// How many steps one set of requests runs before it is rebuilt (untimed),
// so contexts stay between 128 and 128 + kStepsPerSetup tokens.
constexpr int64_t kStepsPerSetup = 2048;

// (a) and (c): 256 running requests, each decoding one token a step.
void run_decode(benchmark::State& state, bool prefix_caching) {
  scheduler_limits l;
  l.max_num_batched_tokens = 2048;
  l.max_num_seqs = 256;
  l.max_model_len = 4096;
  l.block_size = 16;
  l.num_blocks_usable = 40000;  // 256 x 2176 tokens fit: no preemption
  l.enable_prefix_caching = prefix_caching;
  std::unique_ptr<engine_loop> loop;
  auto setup = [&] {
    loop = std::make_unique<engine_loop>(l);
    for (request_id id = 1; id <= 256; ++id) {
      loop->sched().add_request(id, decode_prompt(id), endless(3000));
    }
    warm_up(*loop, 256);
  };
  setup();
  phase_times t;
  int64_t tokens = 0, steps = 0;
  for (auto _ : state) {
    if (steps++ == kStepsPerSetup) {
      state.PauseTiming();
      setup();
      steps = 1;
      state.ResumeTiming();
    }
    tokens += loop->step(t);
  }
  set_counters(state, t, tokens);
}

void BM_decode_256(benchmark::State& state) { run_decode(state, false); }
void BM_decode_256_prefix_caching(benchmark::State& state) { run_decode(state, true); }

// (b): 64 decodes plus a chunked prefill of 4096-token prompts under a
// 2048-token budget. Each long prompt asks for one token, so it finishes as
// its prefill ends; two always wait, so every step fills its budget.
void BM_mixed_64_decodes_4096_prefill(benchmark::State& state) {
  scheduler_limits l;
  l.max_num_batched_tokens = 2048;
  l.max_num_seqs = 256;
  l.max_model_len = 8192;
  l.block_size = 16;
  l.num_blocks_usable = 20000;
  std::vector<int32_t> long_prompt(4096);
  std::unique_ptr<engine_loop> loop;
  request_id next_long = 1000000;
  int64_t num_long_live = 0;
  auto add_long = [&] {
    for (size_t i = 0; i < long_prompt.size(); ++i) {  // unique: no reuse across prompts
      long_prompt[i] = static_cast<int32_t>((next_long * 7919 + i * 31) % 30000);
    }
    loop->sched().add_request(next_long++, long_prompt, endless(1));
    ++num_long_live;
  };
  auto setup = [&] {
    loop = std::make_unique<engine_loop>(l);
    num_long_live = 0;
    for (request_id id = 1; id <= 64; ++id) {
      loop->sched().add_request(id, decode_prompt(id), endless(4000));
    }
    warm_up(*loop, 64);
    add_long();
    add_long();
  };
  setup();
  phase_times t;
  int64_t tokens = 0, steps = 0;
  std::vector<request_id> finished;
  for (auto _ : state) {
    if (steps++ == kStepsPerSetup) {
      state.PauseTiming();
      setup();
      steps = 1;
      state.ResumeTiming();
    }
    finished.clear();
    tokens += loop->step(t, &finished);
    for (request_id id : finished) num_long_live -= id >= 1000000;
    while (num_long_live < 2) add_long();
  }
  set_counters(state, t, tokens);
}

BENCHMARK(BM_decode_256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_mixed_64_decodes_4096_prefill)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_decode_256_prefix_caching)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace troupe

BENCHMARK_MAIN();
