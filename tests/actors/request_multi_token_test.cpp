// The request actor with outputs of several tokens (speculative decoding
// emits accepted drafts and the target's token in one step): a stop string
// completed inside a run ends the output at the token that completes it,
// the tokens after it (and their logprobs) are dropped, the request is
// aborted at the scheduler, and the text is exactly what one token at a time
// would give.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "actors/request/request_actor.h"
#include "model/tokenizer/tokenizer.h"

#ifndef TROUPE_TEST_DATA
#define TROUPE_TEST_DATA "tests/data"
#endif

namespace troupe {
namespace {

struct config : caf::actor_system_config {
  config() {
    add_message_types<caf::id_block::troupe>();
    set("logger.verbosity", caf::atom("quiet"));
  }
};

class collecting_sink : public request_sink {
 public:
  void on_output(const request_output& o) override {
    std::lock_guard<std::mutex> lock(mu_);
    outputs_.push_back(o);
    if (o.finish != finish_reason::none) cv_.notify_all();
  }
  std::vector<request_output> wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(30), [&] {
      return !outputs_.empty() && outputs_.back().finish != finish_reason::none;
    });
    return outputs_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<request_output> outputs_;
};

// What a request gets from `chunks` (each one request_output's tokens), with
// `stop` as its stop string; and whether the scheduler saw an abort.
struct result {
  std::vector<int32_t> tokens;
  std::vector<int32_t> logprob_ids;
  std::string text;
  finish_reason finish = finish_reason::none;
  bool aborted = false;
};

result run(const std::shared_ptr<const tokenizer>& tok, const std::vector<std::vector<int32_t>>& chunks,
           const std::string& stop) {
  config cfg;
  caf::actor_system sys{cfg};
  auto aborted = std::make_shared<std::atomic<bool>>(false);
  caf::actor scheduler = sys.spawn([aborted](caf::event_based_actor*) -> caf::behavior {
    return {[aborted](const abort_request_msg&) { *aborted = true; }};
  });
  request_text_setup setup;
  setup.tok = tok;
  setup.prompt_ids = {1};
  setup.params.stop = {stop};
  setup.params.logprobs = 0;
  auto sink = std::make_shared<collecting_sink>();
  caf::actor actor = sys.spawn(request_actor, request_id{7}, scheduler, sink, setup, request_accounting{});
  for (size_t i = 0; i < chunks.size(); ++i) {
    request_output out;
    out.id = 7;
    out.new_token_ids = chunks[i];
    for (int32_t t : chunks[i]) out.logprobs.push_back(token_logprobs{t, -1.0f, 1, {}, {}});
    if (i + 1 == chunks.size()) out.finish = finish_reason::length;
    caf::anon_send(actor, std::move(out));
  }
  result r;
  for (const request_output& o : sink->wait()) {
    r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    for (const token_logprobs& lp : o.logprobs) r.logprob_ids.push_back(lp.token_id);
    r.text += o.text;
    r.finish = o.finish;
  }
  caf::anon_send_exit(scheduler, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);  // if it has not quit
  sys.await_all_actors_done();
  r.aborted = *aborted;
  return r;
}

TEST(request_actor, a_stop_string_inside_a_multi_token_output_ends_it_there) {
  auto loaded = tokenizer::load(std::string(TROUPE_TEST_DATA) + "/tokenizers/llama2");
  ASSERT_TRUE(static_cast<bool>(loaded)) << loaded.error_message();
  std::shared_ptr<const tokenizer> tok = std::move(loaded.value());
  const std::vector<int32_t> ids = tok->encode("one two three four five six seven eight", false);
  ASSERT_GE(ids.size(), 8u);
  // One token at a time: the reference.
  std::vector<std::vector<int32_t>> singles;
  for (int32_t t : ids) singles.push_back({t});
  const result ref = run(tok, singles, "four");
  EXPECT_EQ(ref.finish, finish_reason::stop);
  EXPECT_TRUE(ref.aborted);
  EXPECT_EQ(ref.text, "one two three ");
  // The same tokens in runs of three and in one run: the same output.
  std::vector<std::vector<int32_t>> threes;
  for (size_t i = 0; i < ids.size(); i += 3) {
    threes.emplace_back(ids.begin() + static_cast<long>(i),
                        ids.begin() + static_cast<long>(std::min(ids.size(), i + 3)));
  }
  for (const auto& chunks : {threes, std::vector<std::vector<int32_t>>{ids}}) {
    const result got = run(tok, chunks, "four");
    EXPECT_EQ(got.text, ref.text);
    EXPECT_EQ(got.tokens, ref.tokens) << "tokens after the stop string are dropped";
    EXPECT_EQ(got.logprob_ids, ref.tokens) << "and their logprobs";
    EXPECT_EQ(got.finish, finish_reason::stop);
    EXPECT_TRUE(got.aborted);
  }
  // No stop string inside: every token and the whole text.
  const result all = run(tok, {ids}, "nine");
  EXPECT_EQ(all.tokens, ids);
  EXPECT_EQ(all.text, "one two three four five six seven eight");
  EXPECT_EQ(all.finish, finish_reason::length);
  EXPECT_FALSE(all.aborted);
}

}  // namespace
}  // namespace troupe
