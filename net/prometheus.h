// prometheus: the /metrics page in Prometheus' text exposition format
// (version 0.0.4), with vLLM's metric names under the `troupe:` prefix and a
// `model_name` label, so that vLLM dashboards and alerts apply unchanged.
// Pure function of its inputs; unit-tested.
#pragma once

#include <map>
#include <string>

#include "actors/messages.h"
#include "actors/request/request_metrics.h"

namespace troupe {

// `lora_names`: adapter id -> name, for troupe:lora_requests_info (vLLM's
// lora_requests_info gauge: the running and waiting adapters by name and
// max_lora as labels, the time as its value), written when LoRA is on.
std::string render_prometheus(const std::string& model_name, const engine_stats& stats,
                              const request_metrics_snapshot& requests,
                              const std::map<int64_t, std::string>& lora_names = {});

}  // namespace troupe
