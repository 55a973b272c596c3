// The actor protocol under CAF's deterministic test coordinator: the
// request, scheduler and block-manager actors with a fake worker actor, run
// one message at a time, so the message order of PROTOCOL.md is observable:
// add_request_batch -> kv_transaction -> kv_grant -> step_plan ->
// step_output -> request_output. Covers admission, a step round trip,
// preemption, and cancellation while a step is in flight.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/block_manager/block_manager_actor.h"
#include "actors/request/request_actor.h"
#include "actors/scheduler/scheduler_actor.h"
#include "tests/actors/fake_worker.h"

namespace troupe {
namespace {

class recording_sink : public request_sink {
 public:
  void on_output(const request_output& o) override {
    tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    if (o.finish != finish_reason::none) finish = o.finish;
  }
  std::vector<int32_t> tokens;
  finish_reason finish = finish_reason::none;
};

caf::behavior fake_worker_actor(caf::event_based_actor*,
                                std::shared_ptr<testing::fake_worker> worker) {
  return {[worker](const step_plan& plan) -> step_output { return worker->execute(plan); }};
}

class protocol : public ::testing::Test {
 protected:
  struct config : caf::actor_system_config {
    config() {
      add_message_types<caf::id_block::troupe>();
      set("scheduler.policy", caf::atom("testing"));
      set("logger.verbosity", caf::atom("quiet"));
    }
  };

  void start(int64_t num_blocks_usable) {
    limits.block_size = 4;
    limits.num_blocks_usable = num_blocks_usable;
    limits.max_model_len = 64;
    limits.max_num_batched_tokens = 32;
    limits.max_num_seqs = 4;
    bm = sys.spawn(block_manager_actor, num_blocks_usable + 1, limits.block_size, false,
                   int64_t{0});
    worker = sys.spawn(fake_worker_actor, std::make_shared<testing::fake_worker>());
    scheduler = sys.spawn(scheduler_actor, limits, bm, worker, caf::actor{}, lora_host_cache{},
                          std::shared_ptr<worker_health>());
    run();
  }

  std::shared_ptr<recording_sink> submit(request_id id, int prompt_len, int max_tokens) {
    auto sink = std::make_shared<recording_sink>();
    caf::actor client = sys.spawn(request_actor, id, scheduler,
                                  std::static_pointer_cast<request_sink>(sink),
                                  request_text_setup{}, request_accounting{});
    clients[id] = client;
    add_request_msg add;
    add.id = id;
    add.prompt_ids.assign(static_cast<size_t>(prompt_len), static_cast<int32_t>(id));
    add.params.max_tokens = max_tokens;
    add.params.ignore_eos = true;
    add.client = client;
    add_request_batch batch;
    batch.requests.push_back(std::move(add));
    caf::anon_send(scheduler, std::move(batch));
    return sink;
  }

  // Runs jobs until none is left (the periodic stats timer is never fired).
  void run() {
    while (coordinator().try_run_once()) {
    }
  }
  // Runs the next job of `who`; false if it has none.
  bool run_next_of(const caf::actor& who) {
    if (!coordinator().prioritize(who)) return false;
    coordinator().run_once();
    return true;
  }
  template <class T>
  bool next_message_of(const caf::actor& who) {
    if (!coordinator().prioritize(who)) return false;
    auto* msg = coordinator().next_job<caf::scheduled_actor>().mailbox().peek();
    return msg != nullptr && msg->content().match_elements<T>();
  }

  engine_stats stats() {
    auto out = std::make_shared<engine_stats>();
    sys.spawn([out, s = scheduler](caf::event_based_actor* self) {
      self->request(s, caf::infinite, atoms::get_stats_v).then([out](const engine_stats& st) {
        *out = st;
      });
    });
    run();
    return *out;
  }

  // Every actor must be gone before the actor system's destructor waits.
  void TearDown() override {
    for (auto& [id, client] : clients) caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
    for (const caf::actor& a : {scheduler, bm, worker}) {
      if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    }
    run();
  }

  caf::scheduler::test_coordinator& coordinator() {
    return dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  }

  config cfg;
  caf::actor_system sys{cfg};
  scheduler_limits limits;
  caf::actor bm, worker, scheduler;
  std::map<request_id, caf::actor> clients;
};

TEST_F(protocol, one_step_round_trip_in_message_order) {
  start(32);
  auto sink = submit(1, 6, 3);
  ASSERT_TRUE(next_message_of<add_request_batch>(scheduler));
  run_next_of(scheduler);  // admits and schedules: one transaction to the block manager
  ASSERT_TRUE(next_message_of<kv_transaction>(bm));
  run_next_of(bm);  // answers with a grant
  EXPECT_FALSE(next_message_of<step_plan>(worker)) << "no plan before the grant is applied";
  run_next_of(scheduler);  // commit: the plan goes to the worker
  ASSERT_TRUE(next_message_of<step_plan>(worker));
  run_next_of(worker);
  run_next_of(scheduler);  // update: the first token goes to the request actor
  ASSERT_TRUE(next_message_of<request_output>(clients[1]));
  run_next_of(clients[1]);
  EXPECT_EQ(sink->tokens.size(), 1u);
  run();
  EXPECT_EQ(sink->tokens.size(), 3u);
  EXPECT_EQ(sink->finish, finish_reason::length);
  const engine_stats s = stats();
  EXPECT_EQ(s.num_blocks_free, s.num_blocks_total);
  EXPECT_EQ(s.num_steps, 3 + 1 - 1);  // prefill + 2 decodes (the first token comes with prefill)
}

TEST_F(protocol, cancellation_while_the_step_is_in_flight) {
  start(32);
  auto sink = submit(1, 6, 50);
  // Run until the first plan sits in the worker's mailbox.
  while (!next_message_of<step_plan>(worker)) ASSERT_TRUE(coordinator().try_run_once());
  caf::anon_send(scheduler, abort_request_msg{{1}});  // as engine::abort sends it
  ASSERT_TRUE(run_next_of(scheduler));     // the scheduler defers it: a step is in flight
  EXPECT_EQ(sink->finish, finish_reason::none);
  run();                                   // the step returns; the request finishes
  EXPECT_EQ(sink->finish, finish_reason::abort);
  EXPECT_LE(sink->tokens.size(), 1u);
  const engine_stats s = stats();
  EXPECT_EQ(s.num_blocks_free, s.num_blocks_total) << "blocks of the aborted request returned";
  EXPECT_EQ(s.num_requests_finished, 1);
}

TEST_F(protocol, cancellation_while_waiting) {
  start(32);
  auto a = submit(1, 6, 5);
  caf::anon_send(scheduler, abort_request_msg{{1}});
  run();
  EXPECT_TRUE(a->finish == finish_reason::abort || a->finish == finish_reason::length);
  const engine_stats s = stats();
  EXPECT_EQ(s.num_blocks_free, s.num_blocks_total);
}

TEST_F(protocol, preemption_under_a_small_cache_completes_everything) {
  start(8);  // 32 tokens of KV; each request grows to 20
  auto a = submit(1, 12, 8);
  auto b = submit(2, 12, 8);
  run();
  EXPECT_EQ(a->tokens.size(), 8u);
  EXPECT_EQ(b->tokens.size(), 8u);
  EXPECT_EQ(a->finish, finish_reason::length);
  EXPECT_EQ(b->finish, finish_reason::length);
  const engine_stats s = stats();
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_EQ(s.num_blocks_free, s.num_blocks_total);
}

}  // namespace
}  // namespace troupe
