#include "model/lora_registry.h"

#include <utility>

namespace troupe {

lora_registry::lora_registry(model_config base, int64_t max_lora_rank)
    : base_(std::move(base)), max_lora_rank_(max_lora_rank) {}

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
  by_id_[id] = entry{id, name, path, std::move(adapter).value()};
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
    by_id_.erase(e.id);
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

std::shared_ptr<const lora_adapter> lora_registry::get(int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second.adapter;
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

}  // namespace troupe
