// block_manager_actor: owns the paged KV blocks (a kv_ledger) and applies
// the scheduler's one transaction per step. It answers only the scheduler.
#pragma once

#include <caf/all.hpp>

#include "actors/block_manager/kv_ledger.h"

namespace troupe {

struct block_manager_state {
  std::unique_ptr<kv_ledger> ledger;
  static inline const char* name = "block_manager";
};

caf::behavior block_manager_actor(caf::stateful_actor<block_manager_state>* self,
                                  int64_t num_blocks, int64_t block_size,
                                  bool enable_prefix_caching, int64_t num_cpu_blocks);

}  // namespace troupe
