#include "actors/request/request_actor.h"

#include <optional>

#include "actors/request/incremental_detokenizer.h"
#include "actors/request/stop_checker.h"

namespace troupe {

namespace {

// The text side of a request: detokenizer and stop strings.
class text_state {
 public:
  explicit text_state(const request_text_setup& setup)
      : tok_(setup.tok),
        detok_(*tok_, setup.prompt_ids, setup.params.skip_special_tokens),
        stops_(setup.params.stop, setup.params.include_stop_str_in_output),
        min_tokens_(setup.params.min_tokens),
        stop_token_text_(setup.params.include_stop_str_in_output) {}

  // Adds the output's text; true when a stop string ended the request.
  // Tokens are taken one at a time (a step may emit several: accepted
  // drafts), so a stop string ends the output at the token that completes
  // it; the tokens after it (and their logprobs) are dropped. The text of
  // the first min_tokens tokens is not searched (vLLM's min_tokens).
  // A request the scheduler stopped ended on EOS or one of stop_token_ids:
  // that token's text is left out unless include_stop_str_in_output (as
  // vLLM's detokenizer does; it shows with skip_special_tokens false).
  bool process(request_output& out) {
    const bool final = out.finish != finish_reason::none;
    const bool stop_token = out.finish == finish_reason::stop && !stop_token_text_;
    out.text.clear();
    for (size_t i = 0; i < out.new_token_ids.size(); ++i) {
      if (stop_token && i + 1 == out.new_token_ids.size()) break;
      std::string delta = detok_.append({out.new_token_ids[i]});
      if (++num_tokens_ <= min_tokens_) {
        out.text += delta;
        continue;
      }
      out.text += stops_.feed(delta);
      if (stops_.stopped()) {
        out.new_token_ids.resize(i + 1);
        if (out.logprobs.size() > i + 1) out.logprobs.resize(i + 1);
        out.finish = finish_reason::stop;
        out.stop_reason = stops_.matched();
        return true;
      }
    }
    if (!final) return false;
    out.text += stops_.feed(detok_.flush());
    if (stops_.stopped()) {
      out.finish = finish_reason::stop;
      out.stop_reason = stops_.matched();
      return true;
    }
    out.text += stops_.flush();
    return false;
  }

 private:
  std::shared_ptr<const tokenizer> tok_;
  incremental_detokenizer detok_;
  stop_checker stops_;
  int64_t min_tokens_ = 0;
  int64_t num_tokens_ = 0;  // output tokens seen
  bool stop_token_text_ = false;  // include_stop_str_in_output
};

// Times one request into the engine's request_metrics.
class request_timing {
 public:
  explicit request_timing(request_accounting a) : a_(std::move(a)) {}

  void record(const request_output& out) {
    if (a_.metrics == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    if (!out.new_token_ids.empty()) {
      if (num_tokens_ == 0) a_.metrics->observe_first_token(seconds(now - a_.arrival));
      else a_.metrics->observe_inter_token(seconds(now - last_token_));
      last_token_ = now;
      num_tokens_ += static_cast<int64_t>(out.new_token_ids.size());
    }
    if (out.finish != finish_reason::none) {
      a_.metrics->observe_finished(out.finish, seconds(now - a_.arrival), a_.num_prompt_tokens,
                                   num_tokens_);
    }
  }

 private:
  static double seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
  }
  request_accounting a_;
  std::chrono::steady_clock::time_point last_token_;
  int64_t num_tokens_ = 0;
};

}  // namespace

caf::behavior request_actor(caf::event_based_actor* self, request_id id,
                            caf::actor scheduler, std::shared_ptr<request_sink> sink,
                            request_text_setup text, request_accounting accounting) {
  auto state = std::make_shared<std::optional<text_state>>();
  if (text.tok) state->emplace(text);
  auto timing = std::make_shared<request_timing>(std::move(accounting));
  return {
      [self, sink, state, timing, scheduler, id](request_output& output) {
        if (state->has_value() && output.finish != finish_reason::error) {
          if ((*state)->process(output)) self->send(scheduler, abort_request_msg{{id}});
        }
        const bool final = output.finish != finish_reason::none;
        timing->record(output);
        sink->on_output(output);
        if (final) self->quit();
      },
  };
}

}  // namespace troupe
