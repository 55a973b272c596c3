// The engine through its public API: the actors end to end on the CPU
// backend with the tiny Llama fixture. Aborts at every stage, errors as
// outputs, no KV block leaked once everything has finished, and shutdown
// with requests still running.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "actors/engine.h"
#include "tests/actors/waiting_sink.h"

#ifndef TROUPE_TEST_DATA
#define TROUPE_TEST_DATA "tests/data"
#endif

namespace troupe {
namespace {

engine_config tiny_config() {
  engine_config c;
  c.model = std::string(TROUPE_TEST_DATA) + "/models/tiny-llama";
  c.max_model_len = 256;
  c.num_gpu_blocks_override = 64;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 64;
  c.log_level = "warn";
  return c;
}

sampling_params greedy(int max_tokens) {
  sampling_params p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// All blocks back in the pool once the engine is idle (the last frees travel
// in one more transaction after the final outputs, so wait for it).
void expect_no_leak(engine& e) {
  engine_stats s;
  for (int i = 0; i < 200; ++i) {
    s = e.stats();
    if (s.num_blocks_free == s.num_blocks_total && s.num_running + s.num_waiting == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s.num_blocks_free, s.num_blocks_total);
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.num_waiting, 0);
}

TEST(engine, runs_requests_and_returns_every_block) {
  auto e = engine::create(tiny_config());
  ASSERT_TRUE(e.ok()) << e.error_message();
  std::vector<std::shared_ptr<testing::waiting_sink>> sinks;
  for (int i = 0; i < 10; ++i) {
    auto sink = std::make_shared<testing::waiting_sink>();
    sinks.push_back(sink);
    std::vector<int32_t> prompt(static_cast<size_t>(5 + 9 * i), 3 + i);
    (*e)->submit(prompt, greedy(8 + i), sink);
  }
  for (size_t i = 0; i < sinks.size(); ++i) {
    ASSERT_TRUE(sinks[i]->finished());
    EXPECT_EQ(sinks[i]->finish(), finish_reason::length);
    EXPECT_EQ(sinks[i]->tokens().size(), 8 + i);
  }
  expect_no_leak(**e);
  EXPECT_EQ((*e)->stats().num_requests_finished, 10);
}

TEST(engine, abort_while_decoding_and_while_waiting) {
  auto e = engine::create(tiny_config());
  ASSERT_TRUE(e.ok()) << e.error_message();
  engine& eng = **e;
  // Four long runners fill max_num_seqs; the fifth waits.
  std::vector<std::shared_ptr<testing::waiting_sink>> runners;
  std::vector<request_id> ids;
  for (int i = 0; i < 4; ++i) {
    auto sink = std::make_shared<testing::waiting_sink>();
    runners.push_back(sink);
    ids.push_back(eng.submit({1, 2, 3, int32_t(10 + i)}, greedy(200), sink));
  }
  auto waiting = std::make_shared<testing::waiting_sink>();
  const request_id waiting_id = eng.submit({4, 5, 6}, greedy(5), waiting);
  eng.abort(waiting_id);
  ASSERT_TRUE(waiting->finished());
  EXPECT_EQ(waiting->finish(), finish_reason::abort);
  // Abort one runner from inside its own sink once it has 3 tokens.
  runners[0]->on_tokens(3, [&eng, id = ids[0]] { eng.abort(id); });
  for (size_t i = 1; i < runners.size(); ++i) eng.abort(ids[i]);
  for (auto& r : runners) {
    ASSERT_TRUE(r->finished());
    EXPECT_EQ(r->finish(), finish_reason::abort);
    EXPECT_LT(r->tokens().size(), 200u);
  }
  EXPECT_GE(runners[0]->tokens().size(), 3u);
  expect_no_leak(eng);
}

TEST(engine, invalid_request_is_an_error_output) {
  auto e = engine::create(tiny_config());
  ASSERT_TRUE(e.ok()) << e.error_message();
  auto sink = std::make_shared<testing::waiting_sink>();
  (*e)->submit(std::vector<int32_t>(300, 1), greedy(4), sink);
  ASSERT_TRUE(sink->finished());
  EXPECT_EQ(sink->finish(), finish_reason::error);
  EXPECT_EQ(sink->error(), "the prompt has 300 tokens, more than max_model_len 256");
  auto empty = std::make_shared<testing::waiting_sink>();
  (*e)->submit({}, greedy(4), empty);
  ASSERT_TRUE(empty->finished());
  EXPECT_EQ(empty->error(), "the prompt is empty");
  expect_no_leak(**e);
}

TEST(engine, shutdown_with_requests_running_does_not_hang) {
  auto e = engine::create(tiny_config());
  ASSERT_TRUE(e.ok()) << e.error_message();
  for (int i = 0; i < 6; ++i) {
    (*e)->submit({1, 2, int32_t(i)}, greedy(250), std::make_shared<testing::waiting_sink>());
  }
  e->reset();  // must return
  SUCCEED();
}

TEST(engine, derive_limits_names_the_numbers) {
  engine_config c = tiny_config();
  model_config m;
  m.num_hidden_layers = 2;
  m.num_key_value_heads = 2;
  m.head_dim = 16;
  m.max_position_embeddings = 4096;
  c.num_gpu_blocks_override = 7;
  c.max_model_len = 200;
  auto l = derive_engine_limits(c, m);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error_message(),
            "the KV cache holds 112 tokens (7 blocks of 16), fewer than max_model_len 200; "
            "lower max_model_len or raise cpu_kvcache_space / num_gpu_blocks_override");
  c.num_gpu_blocks_override.reset();
  c.cpu_kvcache_space = 1.0 / 1024;  // 1 MiB; a block is 2*2*16*2*16*4 = 8 KiB
  c.max_num_seqs = 256;
  l = derive_engine_limits(c, m);
  ASSERT_TRUE(l.ok()) << l.error_message();
  EXPECT_EQ(l->kv_bytes_per_block, 8192);
  EXPECT_EQ(l->num_blocks, 128 + 1);
}


TEST(engine, gpu_memory_plan_gives_what_is_left_to_kv_blocks) {
  constexpr int64_t gib = 1LL << 30;
  gpu_memory_state m;
  m.total = 80 * gib;
  m.free = 63 * gib;     // 17 GiB in use: 16 of weights, 1 of context
  m.weights = 16 * gib;
  m.reserved = gib / 2;
  // 80 * 0.9 = 72 GiB allowed, 17 in use, 0.5 reserved: 54.5 GiB of 2 MiB blocks.
  auto blocks = plan_gpu_kv_blocks(m, 0.9, 2LL << 20, 16, 8192);
  ASSERT_TRUE(blocks.ok()) << blocks.error_message();
  EXPECT_EQ(*blocks, 54 * 512 + 256);
  // Memory another process holds counts as in use: 72 - 60 - 0.5 GiB.
  m.free = 20 * gib;
  blocks = plan_gpu_kv_blocks(m, 0.9, 2LL << 20, 16, 8192);
  ASSERT_TRUE(blocks.ok());
  EXPECT_EQ(*blocks, 11 * 512 + 256);
  // One sequence of max_model_len must fit, else an error with the numbers.
  m.free = 63 * gib;
  blocks = plan_gpu_kv_blocks(m, 0.2, 2LL << 20, 16, 8192);
  ASSERT_FALSE(blocks.ok());
  EXPECT_NE(blocks.error_message().find("max_model_len 8192 needs 1.00 GiB of KV cache for one "
                                        "sequence (512 blocks of 16 tokens), but the memory plan "
                                        "leaves 0.00 GiB: 80.00 GiB x gpu_memory_utilization 0.20"),
            std::string::npos)
      << blocks.error_message();
}

TEST(engine, cuda_limits_wait_for_the_memory_plan) {
  engine_config c = tiny_config();
  c.dtype = "bfloat16";
  c.num_gpu_blocks_override.reset();
  model_config m;
  m.num_hidden_layers = 2;
  m.num_key_value_heads = 2;
  m.head_dim = 16;
  m.max_position_embeddings = 4096;
  auto l = derive_engine_limits(c, m, /*cuda=*/true);
  ASSERT_TRUE(l.ok()) << l.error_message();
  EXPECT_EQ(l->backend, "cuda");
  EXPECT_EQ(l->num_blocks, 0);               // sized after loading
  EXPECT_EQ(l->kv_bytes_per_block, 4096);    // bf16: half of float32's
}

}  // namespace
}  // namespace troupe
