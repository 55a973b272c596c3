#include "actors/block_manager/block_manager_actor.h"

namespace troupe {

caf::behavior block_manager_actor(caf::stateful_actor<block_manager_state>* self,
                                  int64_t num_blocks) {
  self->state.ledger = std::make_unique<kv_ledger>(num_blocks);
  return {
      [self](const kv_transaction& txn) -> kv_grant { return self->state.ledger->apply(txn); },
  };
}

}  // namespace troupe
