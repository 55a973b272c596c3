// token_budget_scheduler's LoRA admission: device slots (max_loras) and the
// host cache (lora_host_cache).
#include "actors/scheduler/token_budget_scheduler.h"

namespace troupe {

std::unordered_set<int64_t> token_budget_scheduler::running_adapters() const {
  std::unordered_set<int64_t> out;
  if (limits_.max_loras == 0) return out;  // (no LoRA: no scan a step)
  for (const request_ptr& r : running_) {
    if (r->params.lora_id != 0) out.insert(r->params.lora_id);
  }
  return out;
}

token_budget_scheduler::adapter_gate token_budget_scheduler::gate_adapter(
    const request_state& r, const std::unordered_set<int64_t>& adapters,
    std::unordered_set<int64_t>& reading, std::string& error) const {
  const int64_t id = r.params.lora_id;
  if (id == 0 || adapters.count(id) != 0) return adapter_gate::admit;
  const auto room = static_cast<size_t>(limits_.max_loras);
  if (adapters.size() >= room) return adapter_gate::wait;
  if (!lora_cache_.prefetch) return adapter_gate::admit;
  if (reading.count(id) != 0) return adapter_gate::wait;
  const bool start_read = adapters.size() + reading.size() < room;
  switch (lora_cache_.prefetch(id, error, start_read)) {
    case lora_host_cache::state::ready:
      return adapter_gate::admit;
    case lora_host_cache::state::loading:
      reading.insert(id);
      return adapter_gate::wait;
    case lora_host_cache::state::absent:
      return adapter_gate::wait;
    case lora_host_cache::state::failed:
      break;
  }
  return adapter_gate::failed;
}

}  // namespace troupe
