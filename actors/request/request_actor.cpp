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
        stops_(setup.params.stop, setup.params.include_stop_str_in_output) {}

  // Adds the output's text; true when a stop string ended the request.
  bool process(request_output& out) {
    const bool final = out.finish != finish_reason::none;
    std::string delta = detok_.append(out.new_token_ids);
    if (final) delta += detok_.flush();
    out.text = stops_.feed(delta);
    if (stops_.stopped()) {
      out.finish = finish_reason::stop;
      out.stop_reason = stops_.matched();
      return true;
    }
    if (final) out.text += stops_.flush();
    return false;
  }

 private:
  std::shared_ptr<const tokenizer> tok_;
  incremental_detokenizer detok_;
  stop_checker stops_;
};

}  // namespace

caf::behavior request_actor(caf::event_based_actor* self, request_id id,
                            caf::actor scheduler, std::shared_ptr<request_sink> sink,
                            request_text_setup text) {
  auto state = std::make_shared<std::optional<text_state>>();
  if (text.tok) state->emplace(text);
  return {
      [self, sink, state, scheduler, id](request_output& output) {
        if (state->has_value() && output.finish != finish_reason::error) {
          if ((*state)->process(output)) self->send(scheduler, abort_request_msg{id});
        }
        const bool final = output.finish != finish_reason::none;
        sink->on_output(output);
        if (final) self->quit();
      },
      [self, scheduler, id](const abort_request_msg&) {
        self->send(scheduler, abort_request_msg{id});
      },
  };
}

}  // namespace troupe
