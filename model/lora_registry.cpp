#include "model/lora_registry.h"

#include <algorithm>
#include <utility>

namespace troupe {

lora_registry::lora_registry(model_config base, int64_t max_lora_rank, int64_t max_cpu_loras)
    : base_(std::move(base)), max_lora_rank_(max_lora_rank), capacity_(max_cpu_loras) {
  counts_.capacity = capacity_;
}

lora_registry::~lora_registry() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (loader_.joinable()) loader_.join();
  for (add_job& job : adds_) job.done(make_error("the server is stopping"));
}

void lora_registry::start_loader_locked() {
  if (!loader_.joinable()) loader_ = std::thread([this] { loader_loop(); });
  wake_.notify_one();
}

void lora_registry::add_async(std::string name, std::filesystem::path path,
                              std::function<void(result<int64_t>)> done) {
  std::lock_guard<std::mutex> lock(mu_);
  adds_.push_back({std::move(name), std::move(path), std::move(done)});
  start_loader_locked();
}

result<int64_t> lora_registry::add(const std::string& name, const std::filesystem::path& path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (by_name_.count(name) != 0) {
      return make_error("LoRA adapter '" + name + "' is already loaded");
    }
  }
  // Read outside the lock: a slow disk must not stall lookups.
  auto adapter = load_lora_adapter(name, path, base_, max_lora_rank_);
  if (!adapter) return std::move(adapter).take_error();
  std::lock_guard<std::mutex> lock(mu_);
  if (by_name_.count(name) != 0) return make_error("LoRA adapter '" + name + "' is already loaded");
  const int64_t id = next_id_++;
  entry& e = by_id_[id];
  e.id = id;
  e.name = name;
  e.path = path;
  keep_locked(e, std::move(adapter).value());
  by_name_[name] = id;
  return id;
}

status lora_registry::remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return make_error("The lora adapter '" + name + "' cannot be found.");
  entry& e = by_id_.at(it->second);
  by_name_.erase(it);
  if (e.users == 0) {
    by_id_.erase(e.id);  // (a read in flight for it finds no entry and drops its result)
  } else {
    e.removed = true;
  }
  return {};
}

int64_t lora_registry::id_of(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? 0 : it->second;
}

void lora_registry::keep_locked(entry& e, std::shared_ptr<const lora_adapter> adapter) {
  e.adapter = std::move(adapter);
  e.last_used = ++clock_;
  e.load_error.clear();
  trim_locked(e.id);
}

void lora_registry::trim_locked(int64_t keep_id) {
  int64_t resident = 0;
  for (const auto& [id, other] : by_id_) resident += other.adapter != nullptr ? 1 : 0;
  while (capacity_ > 0 && resident > capacity_) {
    entry* oldest = nullptr;
    for (auto& [id, other] : by_id_) {
      if (other.adapter == nullptr || id == keep_id ||
          std::find(protected_.begin(), protected_.end(), id) != protected_.end()) {
        continue;
      }
      if (oldest == nullptr || other.last_used < oldest->last_used) oldest = &other;
    }
    if (oldest == nullptr) break;  // every other one protected (max_cpu_loras < max_loras)
    oldest->adapter.reset();
    ++counts_.evictions;
    --resident;
  }
  counts_.max_resident = std::max(counts_.max_resident, resident);
}

lora_registry::residency lora_registry::prefetch(int64_t id, std::string& error, bool start_read) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    error = "LoRA adapter id " + std::to_string(id) + " is not served";
    return residency::failed;
  }
  entry& e = it->second;
  if (e.adapter != nullptr) {
    // Kept until the next protect(): the caller is about to admit a request
    // with it, and a read ending meanwhile must not drop it.
    e.last_used = ++clock_;
    if (std::find(protected_.begin(), protected_.end(), id) == protected_.end()) {
      protected_.push_back(id);
    }
    return residency::ready;
  }
  if (!e.load_error.empty()) {
    error = e.load_error;
    return residency::failed;
  }
  if (!e.loading) {
    if (!start_read) return residency::absent;
    e.loading = true;
    queue_.push_back(id);
    start_loader_locked();
  }
  return residency::loading;
}

void lora_registry::loader_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty() || !adds_.empty(); });
    if (stop_) return;
    if (!adds_.empty()) {  // runtime loads first: a client waits for each
      add_job job = std::move(adds_.front());
      adds_.pop_front();
      lock.unlock();
      job.done(add(job.name, job.path));
      lock.lock();
      continue;
    }
    const int64_t id = queue_.front();
    queue_.pop_front();
    auto it = by_id_.find(id);
    if (it == by_id_.end()) continue;  // unloaded while queued
    const std::string name = it->second.name;
    const std::filesystem::path path = it->second.path;
    lock.unlock();
    auto adapter = load_lora_adapter(name, path, base_, max_lora_rank_);
    lock.lock();
    ++counts_.reads;
    it = by_id_.find(id);
    if (it != by_id_.end()) {
      it->second.loading = false;
      if (adapter) {
        keep_locked(it->second, std::move(adapter).value());
      } else {
        it->second.load_error = "LoRA adapter '" + name + "' could not be read again from " +
                                path.string() + ": " + adapter.error_message();
      }
    }
    lock.unlock();
    {
      std::lock_guard<std::mutex> cb(callback_mu_);
      if (on_loaded_) on_loaded_();
    }
    lock.lock();
  }
}

void lora_registry::set_on_loaded(std::function<void()> fn) {
  std::lock_guard<std::mutex> cb(callback_mu_);
  on_loaded_ = std::move(fn);
}

void lora_registry::protect(std::vector<int64_t> ids) {
  std::lock_guard<std::mutex> lock(mu_);
  protected_ = std::move(ids);
  trim_locked(0);  // what protection kept beyond the capacity goes now
}

std::shared_ptr<const lora_adapter> lora_registry::weights(int64_t id, std::string* read_now) {
  std::string name;
  std::filesystem::path path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return nullptr;
    if (it->second.adapter != nullptr) {
      it->second.last_used = ++clock_;
      return it->second.adapter;
    }
    name = it->second.name;
    path = it->second.path;
  }
  auto adapter = load_lora_adapter(name, path, base_, max_lora_rank_);
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_.reads_on_step;
  if (read_now != nullptr) {
    *read_now = "LoRA adapter '" + name + "' was not in host memory when a step needed it: " +
                (adapter ? "read from " + path.string() + " on the step's path" : adapter.error_message());
  }
  if (!adapter) return nullptr;
  std::shared_ptr<const lora_adapter> out = std::move(adapter).value();
  auto it = by_id_.find(id);
  if (it != by_id_.end()) keep_locked(it->second, out);
  return out;
}

bool lora_registry::acquire(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second.removed) return false;
  ++it->second.users;
  return true;
}

void lora_registry::release(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  if (--it->second.users == 0 && it->second.removed) by_id_.erase(it);
}

std::vector<lora_registry::entry> lora_registry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<entry> out;
  for (const auto& [id, e] : by_id_) {
    if (!e.removed) out.push_back(e);
  }
  return out;
}

size_t lora_registry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_name_.size();
}

std::vector<lora_registry::entry> lora_registry::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<entry> out;
  for (const auto& [id, e] : by_id_) out.push_back(e);
  return out;
}

lora_registry::cache_counts lora_registry::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  cache_counts c = counts_;  // (resident counted now: remove() drops entries too)
  for (const auto& [id, e] : by_id_) c.resident += e.adapter != nullptr ? 1 : 0;
  return c;
}

}  // namespace troupe
