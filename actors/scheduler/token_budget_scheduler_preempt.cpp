// Preemption: how a running request gives way when another cannot grow
// (swap to host memory, else recompute). The victim is vLLM's: the newest
// running request (under priority scheduling, the lowest priority's
// newest). Victims chosen by cost were tried and recomputed more on every
// trace of tests/actors/kv_admission_test.cpp (docs/scheduling.md,
// "Choosing the victim").
#include "actors/scheduler/token_budget_scheduler.h"

namespace troupe {

void token_budget_scheduler::preempt(const request_ptr& victim, kv_transaction& txn) {
  victim->may_copy_on_write = false;
  const auto held = static_cast<int64_t>(victim->block_ids.size());
  // Not by swap when a fork of this transaction involves it: swap-outs are
  // applied before forks.
  if (held > 0 && held <= num_cpu_blocks_free_ && victim->num_computed_tokens > 0 &&
      forked_now_.count(victim->id) == 0) {
    // Swap out: the KV goes to host memory; the device blocks are free for
    // this very step (the copy runs before the forward pass).
    txn.swap_out_ids.push_back(victim->id);
    num_cpu_blocks_free_ -= held;
    num_blocks_free_ += release(victim->block_ids);
    victim->num_cpu_blocks = held;
    ++stats_.num_swap_outs;
  } else {
    release_blocks(*victim, txn);
    stats_.num_recomputed_tokens += victim->num_computed_tokens;
    victim->num_computed_tokens = 0;
    victim->num_tokens_sent_to_kv = 0;
  }
  if (victim->known_to_worker) {
    pending_drop_.push_back(victim->id);
    victim->known_to_worker = false;
  }
  push_waiting(victim, true);
  victim->preempted_at = std::chrono::steady_clock::now();
  ++stats_.num_preemptions;
}

}  // namespace troupe
