// `troupe generate`: offline generation through the same engine (and actors)
// as the server, with a sink that collects every request's outputs. All
// prompts are submitted at once so they batch. stdout holds only the
// results (one JSON line per prompt with --json); logs and the final stats
// line go to stderr.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>

#include "actors/engine.h"
#include "cli/command_setup.h"
#include "cli/commands.h"
#include "cli/help.h"
#include "cli/generate_inputs.h"
#include "common/json_writer.h"
#include "config/logging.h"

namespace troupe {

namespace {

struct sequence_result {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<token_logprobs> logprobs;
  std::vector<token_logprobs> prompt_logprobs;
  finish_reason finish = finish_reason::none;
  std::string error;
};

// Collects outputs of all sequences; wait() returns when all have finished.
class collecting_sink : public request_sink,
                        public std::enable_shared_from_this<collecting_sink> {
 public:
  collecting_sink(std::mutex& mu, std::condition_variable& cv, size_t& remaining)
      : mu_(mu), cv_(cv), remaining_(remaining) {}
  void on_output(const request_output& o) override {
    std::lock_guard<std::mutex> lock(mu_);
    result_.token_ids.insert(result_.token_ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    result_.text += o.text;
    result_.logprobs.insert(result_.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    result_.prompt_logprobs.insert(result_.prompt_logprobs.end(), o.prompt_logprobs.begin(),
                                   o.prompt_logprobs.end());
    if (o.finish != finish_reason::none) {
      result_.finish = o.finish;
      result_.error = o.error;
      if (--remaining_ == 0) cv_.notify_all();
    }
  }
  const sequence_result& result() const { return result_; }

 private:
  std::mutex& mu_;
  std::condition_variable& cv_;
  size_t& remaining_;
  sequence_result result_;
};

void write_logprobs(json_writer& w, const token_logprobs& lp) {
  w.begin_object();
  w.key("token_id").value(lp.token_id);
  w.key("logprob").value(lp.logprob);
  w.key("top_ids").array(lp.top_ids);
  w.key("top_logprobs").array(lp.top_logprobs);
  w.end_object();
}

std::string prompt_json(const generate_prompt& prompt,
                        const std::vector<std::shared_ptr<collecting_sink>>& sinks, bool has_text) {
  json_writer w;
  w.begin_object();
  w.key("prompt_ids").array(prompt.prompt_ids);
  if (prompt.params.prompt_logprobs >= 0) {
    w.key("prompt_logprobs").begin_array().null();
    for (const token_logprobs& lp : sinks.front()->result().prompt_logprobs) write_logprobs(w, lp);
    w.end_array();
  }
  w.key("outputs").begin_array();
  for (const auto& sink : sinks) {
    const sequence_result& r = sink->result();
    w.begin_object();
    w.key("token_ids").array(r.token_ids);
    if (has_text) w.key("text").value(r.text);
    w.key("finish_reason").value(finish_reason_name(r.finish));
    if (prompt.params.logprobs >= 0) {
      w.key("logprobs").begin_array();
      for (const token_logprobs& lp : r.logprobs) write_logprobs(w, lp);
      w.end_array();
    }
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return w.take();
}

std::string prompt_text(size_t index, const std::vector<std::shared_ptr<collecting_sink>>& sinks,
                        bool has_text) {
  std::string out;
  for (size_t j = 0; j < sinks.size(); ++j) {
    const sequence_result& r = sinks[j]->result();
    out += "prompt " + std::to_string(index) + " output " + std::to_string(j) + " (" +
           finish_reason_name(r.finish) + "):";
    if (has_text) {
      out += " " + r.text;
    } else {
      for (int32_t t : r.token_ids) out += " " + std::to_string(t);
    }
    out += "\n";
  }
  return out;
}

}  // namespace

int run_generate(const std::vector<std::string>& args) {
  if (show_help(args, "usage: troupe generate --model DIR [--config FILE] [options]\n"
                        "Offline generation through the engine: (--prompt-ids 1,2,3 | --prompt "
                        "TEXT | --prompts-file FILE.jsonl).\nA prompts file has one JSON object "
                        "a line: {\"prompt_ids\": [...]} or {\"prompt\": \"...\"}, with any "
                        "of the sampling flags' keys (docs/configuration.md).",
                        generate_flags(), true)) return 0;
  auto parsed = parse_args(args, generate_flags());
  if (!parsed) {
    print_error(parsed.error_message());
    return 2;
  }
  engine_config& config = parsed->config;
  config.offline = true;  // vLLM's offline (LLM class) batch defaults
  command_setup setup;
  if (!prepare_command(config, setup)) return 2;
  auto inputs = build_generate_inputs(parsed->rest, config.seed, setup.model.vocab_size,
                                      setup.tok.get());
  if (!inputs) {
    print_error(inputs.error_message());
    return 2;
  }
  const bool has_text = setup.tok != nullptr;
  auto eng = engine::create(config, setup.tok);
  if (!eng) {
    print_error(eng.error_message());
    return 1;
  }
  // LoRA adapters by name (--lora, a prompts file's "lora").
  for (size_t i = 0; i < inputs->prompts.size(); ++i) {
    generate_prompt& p = inputs->prompts[i];
    if (p.lora.empty()) continue;
    const std::shared_ptr<lora_registry> loras = (*eng)->loras();
    p.params.lora_id = loras ? loras->id_of(p.lora) : 0;
    if (p.params.lora_id == 0) {
      std::string served;
      for (const lora_registry::entry& e : loras ? loras->list() : std::vector<lora_registry::entry>{}) {
        served += (served.empty() ? "" : ", ") + e.name;
      }
      print_error("prompt " + std::to_string(i) + ": lora: no adapter named '" + p.lora + "' (" +
                  (loras ? "served: " + (served.empty() ? std::string("none") : served)
                         : std::string("LoRA needs enable_lora and lora_modules")) + ")");
      return 2;
    }
  }
  std::mutex mu;
  std::condition_variable cv;
  size_t remaining = 0;
  for (const generate_prompt& p : inputs->prompts) remaining += static_cast<size_t>(p.params.n);
  std::vector<std::vector<std::shared_ptr<collecting_sink>>> sinks(inputs->prompts.size());
  const auto submit_start = std::chrono::steady_clock::now();
  std::vector<engine::submission> batch;
  for (size_t i = 0; i < inputs->prompts.size(); ++i) {
    const generate_prompt& p = inputs->prompts[i];
    for (int32_t j = 0; j < p.params.n; ++j) {
      sampling_params child = p.params;
      child.n = 1;
      child.seed = p.params.seed + j;  // each of n samples its own stream
      auto sink = std::make_shared<collecting_sink>(mu, cv, remaining);
      sinks[i].push_back(sink);
      // Samples after the first share its prompt's prefill and KV blocks.
      const int leader = static_cast<int>(batch.size()) - j;
      batch.push_back({p.prompt_ids, child, sink, j == 0 ? -1 : leader});
    }
  }
  (*eng)->submit_batch(std::move(batch));
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return remaining == 0; });
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - submit_start).count();
  int status = 0;
  for (size_t i = 0; i < sinks.size(); ++i) {
    for (const auto& sink : sinks[i]) {
      if (sink->result().finish == finish_reason::error) {
        print_error("prompt " + std::to_string(i) + ": " + sink->result().error);
        status = 1;
      }
    }
    std::cout << (inputs->json ? prompt_json(inputs->prompts[i], sinks[i], has_text) + "\n"
                               : prompt_text(i, sinks[i], has_text));
  }
  std::cout.flush();
  const engine_stats stats = (*eng)->stats();
  const double hit_rate = stats.prefix_cache_queries > 0
                              ? double(stats.prefix_cache_hits) / double(stats.prefix_cache_queries)
                              : 0.0;
  const bool spec = (*eng)->limits().num_speculative_tokens > 0;
  std::string lora_fields;
  if (const std::shared_ptr<lora_registry> loras = (*eng)->loras()) {
    const lora_registry::cache_counts c = loras->counts();
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  " lora_host_resident_max=%lld lora_reads=%lld lora_reads_on_step=%lld "
                  "lora_evictions=%lld",
                  static_cast<long long>(c.max_resident), static_cast<long long>(c.reads),
                  static_cast<long long>(c.reads_on_step), static_cast<long long>(c.evictions));
    lora_fields = buf;
  }
  eng->reset();
  std::string spec_fields;
  if (spec) {
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  " spec_draft_tokens=%lld spec_accepted_tokens=%lld spec_acceptance_rate=%.4f",
                  static_cast<long long>(stats.spec_num_draft_tokens),
                  static_cast<long long>(stats.spec_num_accepted_tokens),
                  stats.spec_num_draft_tokens > 0 ? double(stats.spec_num_accepted_tokens) /
                                                        double(stats.spec_num_draft_tokens)
                                                  : 0.0);
    spec_fields = buf;
  }
  std::fprintf(stderr,
               "stats: requests=%lld prompt_tokens=%lld generated_tokens=%lld preemptions=%lld "
               "recomputed_tokens=%lld swapped_blocks=%lld preempted_s=%.3f prefix_cache_hit_rate=%.4f "
               "steps=%lld steps_ahead=%lld%s%s elapsed_s=%.3f\n",
               static_cast<long long>(stats.num_requests_finished),
               static_cast<long long>(stats.num_prompt_tokens),
               static_cast<long long>(stats.num_generated_tokens),
               static_cast<long long>(stats.num_preemptions),
               static_cast<long long>(stats.num_recomputed_tokens),
               static_cast<long long>(stats.num_blocks_swapped_out + stats.num_blocks_swapped_in),
               stats.preempted_seconds, hit_rate,
               static_cast<long long>(stats.num_steps), static_cast<long long>(stats.num_steps_ahead),
               spec_fields.c_str(), lora_fields.c_str(), elapsed);
  return status;
}

}  // namespace troupe
