#include "actors/engine.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <chrono>
#include <mutex>
#include <unordered_map>

#include "actors/block_manager/block_manager_actor.h"
#include "actors/drafter/drafter_actor.h"
#include "actors/request/request_actor.h"
#include "actors/scheduler/scheduler_actor.h"
#include "actors/system_config.h"
#include "actors/worker/load_runners.h"
#include "actors/worker/remote_stages.h"
#include "actors/worker/worker_actor.h"
#include "config/config_loader.h"
#include "config/logging.h"
#include "config/speculative_config.h"
#include "model/tp_layout.h"

namespace troupe {

namespace {

constexpr double gib = 1024.0 * 1024.0 * 1024.0;


}  // namespace

result<std::shared_ptr<const tokenizer>> engine::load_tokenizer(const engine_config& config) {
  if (config.skip_tokenizer_init) return std::shared_ptr<const tokenizer>();
  const std::filesystem::path dir = config.tokenizer.empty() ? config.model : config.tokenizer;
  if (config.tokenizer.empty() && !std::filesystem::exists(dir / "tokenizer.json")) {
    return std::shared_ptr<const tokenizer>();
  }
  auto tok = tokenizer::load(dir);
  if (!tok) return std::move(tok).take_error();
  return std::shared_ptr<const tokenizer>(std::move(tok.value()));
}

result<engine_limits> derive_engine_limits(const engine_config& config,
                                           const model_config& model, bool cuda,
                                           int64_t device_bytes, const std::string& device_name) {
  engine_limits l;
  l.backend = cuda ? "cuda" : "cpu";
  l.num_speculative_tokens = speculative_settings_of(config).num_speculative_tokens;
  l.max_loras = config.enable_lora ? config.max_loras : 0;
  l.batch_invariant = config.batch_invariant;
  l.log_expert_counts = config.log_expert_counts && model.moe.num_experts > 0;
  l.fp8_kv_cache = config.fp8_kv_cache();
  if (l.fp8_kv_cache && cuda && model.head_dim % 16 != 0) {
    return make_error("kv_cache_dtype: '" + config.kv_cache_dtype + "' on the cuda backend needs head_dim a "
                      "multiple of 16 (this model's is " + std::to_string(model.head_dim) +
                      "; its attention kernels read the codes 16 at a time): use kv_cache_dtype auto");
  }
  l.max_model_len = config.max_model_len.value_or(model.max_position_embeddings);
  l.block_size = config.block_size;
  engine_config resolved = config;
  resolved.max_model_len = l.max_model_len;
  const batch_defaults batch = engine_batch_defaults(resolved, cuda, device_bytes, device_name);
  l.max_num_seqs = batch.max_num_seqs;
  l.max_num_batched_tokens = batch.max_num_batched_tokens;
  l.max_num_seqs_per_request = std::min(
      config.max_num_seqs_per_request.value_or(std::max<int64_t>(1, l.max_num_seqs / 2)),
      l.max_num_seqs);
  l.max_n = config.max_n;
  l.max_waiting_seqs = config.max_waiting_seqs.value_or(std::max(4 * l.max_num_seqs, l.max_n));
  l.kv_element_bytes =
      l.fp8_kv_cache ? 1 : cuda ? static_cast<int64_t>(dtype_size(cuda_compute_type(config, model))) : 4;
  // A rank's KV heads (tensor parallelism: its share, or one replicated).
  int64_t kv_heads = model.num_key_value_heads;
  if (config.tensor_parallel_size > 1) {
    auto layout = make_tp_layout(model, static_cast<int>(config.tensor_parallel_size), 0);
    if (!layout) return std::move(layout).take_error();
    kv_heads = layout->kv_heads;
  }
  // Pipeline stages hold their layers' KV: the most a stage holds.
  int64_t layers = 0;
  const auto stages = static_cast<int>(config.pipeline_parallel_size);
  for (int s = 0; s < stages; ++s) {
    const stage_layers held = pipeline_stage_layers(model.num_hidden_layers, stages, s);
    layers = std::max(layers, held.end - held.begin);
  }
  l.kv_bytes_per_block = 2 * layers * config.block_size * kv_heads * model.head_dim * l.kv_element_bytes;
  const int64_t blocks_per_seq = (l.max_model_len + l.block_size - 1) / l.block_size;
  l.num_cpu_blocks = static_cast<int64_t>(config.swap_space * gib) / l.kv_bytes_per_block;
  if (config.num_gpu_blocks_override) {
    l.num_blocks = *config.num_gpu_blocks_override + 1;
  } else if (cuda) {
    l.num_blocks = 0;  // the memory plan decides, once the weights are loaded
    return l;
  } else {
    const auto budget = static_cast<int64_t>(config.cpu_kvcache_space * gib);
    // No more than every sequence at full length could use.
    l.num_blocks = std::min(budget / l.kv_bytes_per_block, l.max_num_seqs * blocks_per_seq) + 1;
  }
  if (l.num_blocks - 1 < blocks_per_seq) {
    return make_error("the KV cache holds " + std::to_string((l.num_blocks - 1) * l.block_size) +
                      " tokens (" + std::to_string(l.num_blocks - 1) + " blocks of " +
                      std::to_string(l.block_size) + "), fewer than max_model_len " +
                      std::to_string(l.max_model_len) +
                      "; lower max_model_len or raise cpu_kvcache_space / "
                      "num_gpu_blocks_override");
  }
  return l;
}

result<int64_t> plan_gpu_kv_blocks(const gpu_memory_state& m, double gpu_memory_utilization,
                                   int64_t kv_bytes_per_block, int64_t block_size,
                                   int64_t max_model_len) {
  const double allowed = double(m.total) * gpu_memory_utilization;
  const int64_t in_use = m.total - m.free;
  // Everything in use counts, other processes' memory too (so the budget
  // never exceeds what is free).
  const int64_t budget = static_cast<int64_t>(allowed) - in_use - m.reserved;
  const int64_t blocks = std::max<int64_t>(budget, 0) / kv_bytes_per_block;
  const int64_t blocks_per_seq = (max_model_len + block_size - 1) / block_size;
  if (blocks < blocks_per_seq) {
    char buf[640];
    std::snprintf(buf, sizeof buf,
                  "max_model_len %lld needs %.2f GiB of KV cache for one sequence (%lld blocks "
                  "of %lld tokens), but the memory plan leaves %.2f GiB: %.2f GiB x "
                  "gpu_memory_utilization %.2f = %.2f GiB, of which %.2f GiB are in use "
                  "(weights and workspaces %.2f GiB) and %.2f GiB reserved; raise "
                  "gpu_memory_utilization or lower max_model_len",
                  static_cast<long long>(max_model_len),
                  double(blocks_per_seq * kv_bytes_per_block) / gib,
                  static_cast<long long>(blocks_per_seq), static_cast<long long>(block_size),
                  double(std::max<int64_t>(budget, 0)) / gib, double(m.total) / gib,
                  gpu_memory_utilization, allowed / gib, double(in_use) / gib,
                  double(m.weights) / gib, double(m.reserved) / gib);
    return make_error(buf);
  }
  return blocks;
}

struct engine::impl {
  model_config model;
  engine_limits limits;
  std::shared_ptr<const tokenizer> tok;
  std::unique_ptr<troupe_system_config> cfg;
  std::unique_ptr<caf::actor_system> system;
  // Pipeline stages in several processes: the rendezvous the workers
  // watch, and stage 0's pipe inboxes.
  std::unique_ptr<stage_rendezvous> rendezvous;
  std::vector<caf::actor> inboxes;
  caf::actor scheduler, block_manager, worker;
  std::vector<caf::actor> ranks;  // each rank's worker (`worker`: their group when several)
  size_t num_local_ranks = 0;     // ranks[0 .. num_local_ranks): this process's
  std::vector<std::shared_ptr<model_runner>> local_runners;  // their runners
  std::shared_ptr<worker_health> health;
  std::atomic<request_id> next_id{1};
  std::mutex mutex;
  std::unordered_map<request_id, caf::actor> live;  // request actors, cut off at shutdown
  std::shared_ptr<request_metrics> metrics;
  std::shared_ptr<lora_registry> loras;  // null without enable_lora
};

engine::engine(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

result<std::unique_ptr<engine>> engine::create(const engine_config& config) {
  auto tok = load_tokenizer(config);
  if (!tok) return std::move(tok).take_error();
  return create(config, std::move(tok.value()));
}

result<std::unique_ptr<engine>> engine::create(const engine_config& config,
                                               std::shared_ptr<const tokenizer> tok) {
  auto model = load_engine_model(config);
  if (!model) return std::move(model).take_error();
  auto limits = derive_local_limits(config, *model);
  if (!limits) return std::move(limits).take_error();
  // The configured LoRA adapters, read and checked before the weights load:
  // every adapter's problems in one error.
  std::shared_ptr<lora_registry> loras;
  if (config.enable_lora) {
    loras = std::make_shared<lora_registry>(*model, config.max_lora_rank,
                                            effective_max_cpu_loras(config));
    std::vector<std::string> problems;
    for (const lora_module& m : config.lora_modules) {
      if (auto added = loras->add(m.name, m.path); !added) problems.push_back(added.error_message());
    }
    if (!problems.empty()) {
      std::string message = "LoRA adapters (" + std::to_string(problems.size()) +
                             (problems.size() == 1 ? " problem):" : " problems):");
      for (const std::string& p : problems) message += "\n  - " + p;
      return make_error(message);
    }
    get_logger("lora")->info("LoRA: {} adapter(s) loaded, max_loras {}, max_lora_rank {}, "
                             "max_cpu_loras {}",
                             loras->size(), config.max_loras, config.max_lora_rank,
                             effective_max_cpu_loras(config));
  }
  get_logger("sched")->info("max_num_seqs {}{}, max_num_batched_tokens {}{}", limits->max_num_seqs,
                            config.max_num_seqs ? "" : " (default)", limits->max_num_batched_tokens,
                            config.max_num_batched_tokens
                                ? ""
                                : (config.offline ? " (default, offline)" : " (default)"));
  auto p = std::make_unique<impl>();
  // With distributed_port the workers of the other stages meet this
  // process through CAF's network layer (actors/worker/remote_stages.h).
  const bool distributed = config.distributed_port > 0;
  p->cfg = std::make_unique<troupe_system_config>(distributed);
  p->system = std::make_unique<caf::actor_system>(*p->cfg);
  auto runners = [&]() -> result<std::vector<std::unique_ptr<model_runner>>> {
    if (!distributed) return load_runners(config, *model, *limits);
    auto head = start_head_stage(*p->system, config, *model, *limits);
    if (!head) return std::move(head).take_error();
    p->rendezvous = std::move(head->rendezvous);
    p->inboxes = std::move(head->inboxes);
    return std::move(head->runners);
  }();
  if (!runners) return std::move(runners).take_error();
  std::vector<caf::actor> remote_ranks;  // the worker processes' stages' ranks
  if (distributed) {
    auto remote = p->rendezvous->wait_ready(std::chrono::seconds(config.distributed_timeout));
    if (!remote) {
      for (const caf::actor& a : p->inboxes) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      p->rendezvous.reset();
      return std::move(remote).take_error();
    }
    remote_ranks = std::move(remote.value());
    // cuda: each process planned its own GPUs' KV cache; every stage runs
    // with the smallest (a larger cache just keeps blocks unused).
    if (const int64_t theirs = p->rendezvous->num_blocks(); theirs > 0 && theirs < limits->num_blocks) {
      get_logger("kv")->info("a worker process's memory plan allows {} KV blocks (this one's {}): "
                             "every stage uses {}", theirs - 1, limits->num_blocks - 1, theirs - 1);
      limits->num_blocks = theirs;
    }
  }
  // The KV cache is sized now (on cuda by the memory plan).
  limits->max_waiting_tokens = config.max_waiting_tokens.value_or(
      std::max(limits->max_model_len, 4 * (limits->num_blocks - 1) * limits->block_size));
  get_logger("kv")->info(
      "KV cache: {} blocks of {} tokens ({} tokens, {:.2f} GiB{}); max concurrency at "
      "max_model_len {}: {:.2f}x",
      limits->num_blocks - 1, limits->block_size, (limits->num_blocks - 1) * limits->block_size,
      double(limits->num_blocks * limits->kv_bytes_per_block) / gib,
      limits->fp8_kv_cache ? ", float8 e4m3" : "", limits->max_model_len,
      double((limits->num_blocks - 1) * limits->block_size) / double(limits->max_model_len));
  // Structured outputs' token masks are made of the tokens' bytes.
  std::shared_ptr<const grammar::token_vocabulary> vocab;
  if (tok != nullptr) vocab = grammar::token_vocabulary::of(*tok, model->vocab_size);
  for (auto& runner : runners.value()) {
    runner->set_lora_registry(loras);
    runner->set_token_vocabulary(vocab);
  }
  p->loras = loras;
  p->model = *model;
  p->limits = *limits;
  p->tok = std::move(tok);
  p->metrics = std::make_shared<request_metrics>(limits->max_model_len);
  if (!p->tok) {
    get_logger("model")->info("no tokenizer (no tokenizer.json in '{}'): prompts are token ids "
                              "and outputs carry no text", config.model);
  }
  // Async scheduling needs the backend to sample where the logits are (so
  // that a step's tokens can feed the next step before the host sees them)
  // and to launch asynchronously (cuda).
  const bool overlap = config.async_scheduling && runners.value()[0]->can_overlap();
  get_logger("engine")->info("async scheduling: {}", overlap ? "on (steps overlap)"
                                                           : "off (lockstep steps)");
  p->health = std::make_shared<worker_health>();
  std::vector<std::shared_ptr<model_runner>> local;
  for (auto& runner : runners.value()) {
    local.emplace_back(std::move(runner));
    p->ranks.push_back(p->system->spawn<caf::detached>(worker_actor, local.back(), overlap,
                                                       static_cast<int>(p->ranks.size())));
  }
  p->num_local_ranks = p->ranks.size();
  p->local_runners = local;
  if (distributed) {
    p->ranks.insert(p->ranks.end(), remote_ranks.begin(), remote_ranks.end());
    get_logger("engine")->info("pipeline stages ready: {} rank(s) here, {} in worker processes",
                               local.size(), remote_ranks.size());
  }
  if (p->ranks.size() == 1) {
    p->worker = p->ranks[0];
  } else {
    worker_group_hooks hooks;
    hooks.health = p->health;
    hooks.abort_ranks = [local](const std::string& reason) {
      for (const auto& runner : local) runner->abort_groups(reason);
    };
    hooks.num_local_ranks = p->num_local_ranks;
    p->worker = p->system->spawn(worker_group_actor, p->ranks,
                                 static_cast<int>(config.pipeline_parallel_size), std::move(hooks));
  }
  p->block_manager = p->system->spawn(block_manager_actor, limits->num_blocks,
                                     limits->block_size, config.enable_prefix_caching,
                                     limits->num_cpu_blocks);
  scheduler_limits sl;
  sl.max_num_batched_tokens = limits->max_num_batched_tokens;
  sl.max_num_seqs = limits->max_num_seqs;
  sl.max_num_seqs_per_request = limits->max_num_seqs_per_request;
  sl.max_model_len = limits->max_model_len;
  sl.block_size = limits->block_size;
  sl.num_blocks_usable = limits->num_blocks - 1;
  sl.enable_chunked_prefill = config.enable_chunked_prefill;
  sl.enable_prefix_caching = config.enable_prefix_caching;
  sl.num_cpu_blocks = limits->num_cpu_blocks;
  sl.kv_bytes_per_block = limits->kv_bytes_per_block;
  sl.fp8_kv_cache = limits->fp8_kv_cache;
  sl.priority_policy = config.scheduling_policy == "priority";
  sl.reserve_kv = config.kv_admission == "reserve";
  for (int64_t id : model->eos_token_ids) sl.eos_token_ids.push_back(static_cast<int32_t>(id));
  sl.seed = static_cast<uint64_t>(config.seed);
  sl.async_scheduling = overlap;
  sl.log_expert_counts = limits->log_expert_counts;
  if (config.log_expert_counts && !limits->log_expert_counts) {
    get_logger("engine")->warn("log_expert_counts: {} has no experts; nothing to count",
                               model->architecture);
  }
  // Pipeline stages: P micro-batches in flight so that every stage has one
  // to run (TROUPE_PIPELINE_MICROBATCHES=0: one step at a time, to compare).
  if (const char* mb = std::getenv("TROUPE_PIPELINE_MICROBATCHES");
      !overlap && (mb == nullptr || std::string(mb) != "0")) {
    sl.pipeline_depth = config.pipeline_parallel_size;
  }
  if (sl.pipeline_depth > 1) {
    get_logger("engine")->info("pipeline micro-batches: up to {} steps in flight",
                               sl.pipeline_depth);
  }
  sl.max_loras = limits->max_loras;
  caf::actor drafter;
  if (const speculative_settings spec = speculative_settings_of(config); spec.enabled()) {
    ngram_config nc;
    nc.num_speculative_tokens = spec.num_speculative_tokens;
    nc.prompt_lookup_min = spec.prompt_lookup_min;
    nc.prompt_lookup_max = spec.prompt_lookup_max;
    // Detached (its own thread): a step that waits for proposals waits for
    // one thread's wake-up, not for a pool worker to be scheduled.
    drafter = p->system->spawn<caf::detached>(drafter_actor, nc);
    sl.num_speculative_tokens = spec.num_speculative_tokens;
    // TROUPE_SPEC_CONTROL=0: verify every proposed draft (for measuring a
    // fixed K); else the goodput control chooses (docs/speculative_decoding.md).
    const char* control = std::getenv("TROUPE_SPEC_CONTROL");
    sl.spec_adaptive = control == nullptr || std::string(control) != "0";
    get_logger("engine")->info(
        "speculative decoding: ngram, num_speculative_tokens {}, prompt_lookup_min {}, "
        "prompt_lookup_max {}, control {}",
        nc.num_speculative_tokens, nc.prompt_lookup_min, nc.prompt_lookup_max,
        sl.spec_adaptive ? "goodput" : "off (every draft verified)");
  }
  lora_host_cache host_cache;
  if (loras) {
    host_cache.prefetch = [loras](int64_t id, std::string& error, bool start_read) {
      switch (loras->prefetch(id, error, start_read)) {
        case lora_registry::residency::ready:
          return lora_host_cache::state::ready;
        case lora_registry::residency::loading:
          return lora_host_cache::state::loading;
        case lora_registry::residency::absent:
          return lora_host_cache::state::absent;
        case lora_registry::residency::failed:
          break;
      }
      return lora_host_cache::state::failed;
    };
    host_cache.protect = [loras](std::vector<int64_t> ids) { loras->protect(std::move(ids)); };
  }
  p->scheduler = p->system->spawn(scheduler_actor, sl, p->block_manager, p->worker, drafter,
                                  std::move(host_cache), p->health);
  if (loras) {
    loras->set_on_loaded([scheduler = p->scheduler] {
      caf::anon_send(scheduler, atoms::lora_read_v);
    });
  }
  return std::unique_ptr<engine>(new engine(std::move(p)));
}

engine::~engine() {
  // The registry may outlive the engine (the server's routes hold it): its
  // loader stops waking the scheduler first.
  if (impl_->loras) impl_->loras->set_on_loaded(nullptr);
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    // Requests still live are cut off: nobody is left to read their output.
    for (auto& [id, actor] : impl_->live) {
      caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    }
  }
  caf::anon_send_exit(impl_->scheduler, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(impl_->block_manager, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(impl_->worker, caf::exit_reason::user_shutdown);
  // A rank may wait in a collective for one that has stopped: no longer.
  for (const auto& runner : impl_->local_runners) runner->abort_groups("the engine stops");
  for (size_t r = 0; r < impl_->num_local_ranks; ++r) {
    caf::anon_send_exit(impl_->ranks[r], caf::exit_reason::user_shutdown);
  }
  for (const caf::actor& box : impl_->inboxes) caf::anon_send_exit(box, caf::exit_reason::user_shutdown);
  if (impl_->rendezvous) {
    // The worker processes stop their own ranks; the rendezvous goes after
    // they answered (they watch it).
    impl_->rendezvous->stop_workers(*impl_->system, std::chrono::seconds(5));
    impl_->rendezvous.reset();
  }
  impl_->system->await_all_actors_done();
}

namespace {

// Forgets a request actor once its final output has passed.
class tracking_sink : public request_sink {
 public:
  tracking_sink(std::shared_ptr<request_sink> inner, std::function<void()> on_final)
      : inner_(std::move(inner)), on_final_(std::move(on_final)) {}
  void on_output(const request_output& output) override {
    inner_->on_output(output);
    if (output.finish != finish_reason::none) on_final_();
  }

 private:
  std::shared_ptr<request_sink> inner_;
  std::function<void()> on_final_;
};

}  // namespace

request_id engine::submit(std::vector<int32_t> prompt_ids, const sampling_params& params,
                          std::shared_ptr<request_sink> sink) {
  std::vector<submission> one;
  one.push_back({std::move(prompt_ids), params, std::move(sink)});
  return submit_batch(std::move(one)).front();
}

std::vector<request_id> engine::submit_batch(std::vector<submission> batch) {
  impl* p = impl_.get();
  add_request_batch msg;
  std::vector<request_id> ids;
  const auto arrival = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (submission& s : batch) {
    // The request holds its LoRA adapter until it ends (an adapter unloaded
    // meanwhile frees its weights then); one unloaded since its name was
    // looked up fails the request (the scheduler's error).
    const int64_t lora = s.params.lora_id;
    if (lora > 0 && (!impl_->loras || !impl_->loras->acquire(lora))) s.params.lora_id = -1;
    const int64_t held = s.params.lora_id > 0 ? lora : 0;
    const request_id id = impl_->next_id++;
    auto tracked = std::make_shared<tracking_sink>(std::move(s.sink), [p, id, held] {
      if (held > 0) p->loras->release(held);
      std::lock_guard<std::mutex> inner(p->mutex);
      p->live.erase(id);
    });
    request_text_setup text{impl_->tok, impl_->tok ? s.prompt_ids : std::vector<int32_t>{},
                            s.params};
    request_accounting accounting{impl_->metrics, arrival,
                                  static_cast<int64_t>(s.prompt_ids.size())};
    caf::actor actor = impl_->system->spawn(request_actor, id, impl_->scheduler,
                                            std::static_pointer_cast<request_sink>(tracked),
                                            std::move(text), std::move(accounting));
    impl_->live.emplace(id, actor);
    add_request_msg add;
    add.id = id;
    add.prompt_ids = std::move(s.prompt_ids);
    add.params = s.params;
    add.client = actor;
    if (s.fork_of_index >= 0 && static_cast<size_t>(s.fork_of_index) < ids.size()) {
      add.fork_of = ids[static_cast<size_t>(s.fork_of_index)];
    }
    if (s.group_of_index >= 0 && static_cast<size_t>(s.group_of_index) < ids.size()) {
      add.group = msg.requests[static_cast<size_t>(s.group_of_index)].group;
      if (add.group == 0) add.group = ids[static_cast<size_t>(s.group_of_index)];
    }
    msg.requests.push_back(std::move(add));
    ids.push_back(id);
  }
  caf::anon_send(impl_->scheduler, std::move(msg));
  return ids;
}

void engine::abort(std::vector<request_id> ids) {
  if (ids.empty()) return;
  caf::anon_send(impl_->scheduler, abort_request_msg{std::move(ids)});
}

request_metrics_snapshot engine::metrics() const { return impl_->metrics->snapshot(); }

engine_stats engine::stats() {
  caf::scoped_actor self{*impl_->system};
  engine_stats out;
  self->request(impl_->scheduler, caf::infinite, atoms::get_stats_v)
      .receive([&](const engine_stats& s) { out = s; }, [](const caf::error&) {});
  return out;
}

const worker_health& engine::health() const { return *impl_->health; }

const model_config& engine::model() const { return impl_->model; }
const engine_limits& engine::limits() const { return impl_->limits; }
std::shared_ptr<const tokenizer> engine::get_tokenizer() const { return impl_->tok; }
std::shared_ptr<lora_registry> engine::loras() const { return impl_->loras; }

}  // namespace troupe
