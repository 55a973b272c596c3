#include "actors/block_manager/block_manager_actor.h"

namespace troupe {

caf::behavior block_manager_actor(caf::stateful_actor<block_manager_state>* self,
                                  int64_t num_blocks, int64_t block_size,
                                  bool enable_prefix_caching, int64_t num_cpu_blocks) {
  self->state.ledger = std::make_unique<kv_ledger>(num_blocks, block_size, enable_prefix_caching,
                                                   num_cpu_blocks);
  return {
      [self](const kv_transaction& txn) -> kv_grant { return self->state.ledger->apply(txn); },
  };
}

}  // namespace troupe
