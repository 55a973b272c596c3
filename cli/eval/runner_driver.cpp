#include "cli/eval/runner_driver.h"

#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/check.h"

namespace troupe::eval {

runner_driver::runner_driver(std::vector<model_runner*> ranks, int stages, const engine_limits& limits)
    : ranks_(std::move(ranks)), limits_(limits) {
  TROUPE_CHECK(!ranks_.empty() && stages >= 1 && ranks_.size() % static_cast<size_t>(stages) == 0);
  answering_ = ranks_.size() - ranks_.size() / static_cast<size_t>(stages);
}

step_output runner_driver::execute(const step_plan& plan) {
  if (ranks_.size() == 1) return ranks_[0]->execute(plan);
  std::vector<step_output> outputs(ranks_.size());
  std::vector<std::exception_ptr> errors(ranks_.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        outputs[r] = ranks_[r]->execute(plan);
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        // The others may wait for this rank in a collective: end them too
        // (as the worker group does when a rank is lost).
        for (model_runner* rank : ranks_) rank->abort_groups(std::string("rank ") + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {  // the first rank's error (the others' follow from it)
    if (e) std::rethrow_exception(e);
  }
  for (size_t r = 0; r < answering_; ++r) ranks_[r]->apply_stage_results(outputs[answering_]);
  return std::move(outputs[answering_]);
}

result<std::vector<std::vector<int32_t>>> runner_driver::greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                                int64_t max_tokens) {
  for (size_t i = 0; i < prompts.size(); ++i) {  // the scheduler's rule: prompt + max_tokens
    const auto len = static_cast<int64_t>(prompts[i].size()) + max_tokens;
    if (len > limits_.max_model_len) {
      return make_error("sequence " + std::to_string(i) + " needs " + std::to_string(len) +
                        " tokens, more than max_model_len " + std::to_string(limits_.max_model_len));
    }
  }
  sampling_params params;
  params.temperature = 0.0f;
  params.max_tokens = static_cast<int32_t>(max_tokens);
  params.ignore_eos = true;
  std::vector<std::vector<int32_t>> sampled(prompts.size());
  const std::vector<int64_t> no_logprobs(prompts.size(), 1);
  if (status s = run(prompts, no_logprobs, max_tokens - 1, params, &sampled); !s) return std::move(s).take_error();
  return sampled;
}

status runner_driver::score(const std::vector<std::vector<int32_t>>& sequences, const std::vector<int64_t>& first,
                            const logits_sink& on_logits) {
  // The runner names requests; this run's ids map back to sequences.
  std::unordered_map<request_id, size_t> index;
  const request_id base = next_id_;
  for (size_t i = 0; i < sequences.size(); ++i) index[base + i] = i;
  // The tap refers to this frame: unset on every way out (an exception too).
  struct tap_scope {
    model_runner& runner;
    ~tap_scope() { runner.set_prompt_logits_tap({}); }
  } tap{*ranks_[answering_]};
  tap.runner.set_prompt_logits_tap([&](request_id id, int64_t target, const float* logits) {
    on_logits(index.at(id), target, logits);
  });
  sampling_params params;
  params.temperature = 0.0f;
  params.max_tokens = 1;
  params.ignore_eos = true;
  params.prompt_logprobs = 0;
  return run(sequences, first, 0, params, nullptr);
}

status runner_driver::run(const std::vector<std::vector<int32_t>>& sequences,
                          const std::vector<int64_t>& logprobs_start, int64_t decodes,
                          const sampling_params& params, std::vector<std::vector<int32_t>>* sampled) {
  const int64_t bs = limits_.block_size, usable = limits_.num_blocks - 1;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const auto len = static_cast<int64_t>(sequences[i].size()) + decodes;
    if (sequences[i].empty()) return make_error("sequence " + std::to_string(i) + " is empty");
    if (len > limits_.max_model_len) {
      return make_error("sequence " + std::to_string(i) + " needs " + std::to_string(len) +
                        " tokens, more than max_model_len " + std::to_string(limits_.max_model_len));
    }
    if ((len + bs - 1) / bs > usable) {
      return make_error("sequence " + std::to_string(i) + " needs " + std::to_string(len) +
                        " tokens, more than the KV cache holds (" + std::to_string(usable * bs) + ")");
    }
  }
  std::vector<request_id> finished;
  for (size_t next = 0; next < sequences.size();) {
    // A group: as many sequences as fit, with every block they will need.
    std::vector<size_t> group;
    std::vector<std::vector<int32_t>> blocks;
    int64_t used = 0;
    while (next < sequences.size() && static_cast<int64_t>(group.size()) < limits_.max_num_seqs) {
      const int64_t need = (static_cast<int64_t>(sequences[next].size()) + decodes + bs - 1) / bs;
      if (used + need > usable) break;
      std::vector<int32_t> ids(static_cast<size_t>(need));
      for (int64_t b = 0; b < need; ++b) ids[static_cast<size_t>(b)] = static_cast<int32_t>(1 + used + b);
      used += need;
      blocks.push_back(std::move(ids));
      group.push_back(next++);
    }
    std::unordered_map<request_id, size_t> member;  // id -> sequence
    std::vector<request_id> ids;
    for (size_t i : group) {
      ids.push_back(next_id_);
      member[next_id_++] = i;
    }
    auto run_step = [&](step_plan& plan) {
      plan.step_id = next_step_++;
      plan.finished_ids = std::move(finished);
      finished.clear();
      const step_output out = execute(plan);
      if (sampled == nullptr) return;
      for (const sampled_output& o : out.outputs) {
        auto& tokens = (*sampled)[member.at(o.id)];
        tokens.insert(tokens.end(), o.token_ids.begin(), o.token_ids.end());
      }
    };
    // The prefill, in chunks of the token budget.
    std::vector<int64_t> left;
    for (size_t i : group) left.push_back(static_cast<int64_t>(sequences[i].size()));
    std::vector<bool> admitted(group.size(), false);
    while (std::any_of(left.begin(), left.end(), [](int64_t l) { return l > 0; })) {
      step_plan plan;
      int64_t budget = limits_.max_num_batched_tokens;
      for (size_t k = 0; k < group.size() && budget > 0; ++k) {
        if (left[k] == 0) continue;
        const int64_t take = std::min(left[k], budget);
        budget -= take;
        left[k] -= take;
        plan.total_num_scheduled_tokens += take;
        if (!admitted[k]) {
          admitted[k] = true;
          new_request_data d;
          d.id = ids[k];
          d.token_ids = sequences[group[k]];
          d.num_prompt_tokens = static_cast<int64_t>(d.token_ids.size());
          d.params = params;
          d.block_ids = blocks[k];
          d.num_scheduled_tokens = take;
          d.prompt_logprobs_start = logprobs_start[group[k]];
          plan.new_requests.push_back(std::move(d));
        } else {
          cached_request_data c;
          c.id = ids[k];
          c.num_scheduled_tokens = take;
          plan.cached_requests.push_back(std::move(c));
        }
      }
      run_step(plan);
    }
    for (int64_t d = 0; d < decodes; ++d) {
      step_plan plan;
      for (request_id id : ids) {
        cached_request_data c;
        c.id = id;
        c.num_scheduled_tokens = 1;
        plan.cached_requests.push_back(std::move(c));
        ++plan.total_num_scheduled_tokens;
      }
      run_step(plan);
    }
    finished = ids;
  }
  if (!finished.empty()) {
    step_plan plan;  // nothing to run: the last group's requests dropped
    plan.step_id = next_step_++;
    plan.finished_ids = std::move(finished);
    execute(plan);
  }
  return {};
}

}  // namespace troupe::eval
