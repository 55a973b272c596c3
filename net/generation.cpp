#include "net/generation.h"

#include <map>

#include "common/json_writer.h"

namespace troupe {

const char* openai_finish_reason(finish_reason r) {
  switch (r) {
    case finish_reason::stop: return "stop";
    case finish_reason::length: return "length";
    case finish_reason::abort: return "abort";
    case finish_reason::error: return "error";
    default: return nullptr;
  }
}

namespace {

void write_finish(json_writer& w, const char* name) {
  w.key("finish_reason");
  if (name != nullptr) w.value(name); else w.null();
}

// OpenAI's tool_calls entries: a call's first delta has its id, type and
// name, the others only their arguments' next fragment.
void write_tool_call_deltas(json_writer& w, const std::vector<tool_call_delta>& calls) {
  w.key("tool_calls").begin_array();
  for (const tool_call_delta& d : calls) {
    w.begin_object().key("index").value(static_cast<int64_t>(d.index));
    if (!d.id.empty()) w.key("id").value(d.id).key("type").value("function");
    w.key("function").begin_object();
    if (!d.id.empty()) w.key("name").value(d.name);
    w.key("arguments").value(d.arguments).end_object().end_object();
  }
  w.end_array();
}

void merge(tool_stream_delta& into, tool_stream_delta more) {
  into.content += more.content;
  for (tool_call_delta& d : more.calls) {
    if (!into.calls.empty() && into.calls.back().index == d.index) {
      into.calls.back().arguments += d.arguments;
    } else {
      into.calls.push_back(std::move(d));
    }
  }
}

std::string sse(const std::string& json) { return "data: " + json + "\n\n"; }

// Characters (code points) of UTF-8 text, as Python's len(): text_offset
// counts characters, as vLLM's does.
int64_t num_chars(const std::string& text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

generation::generation(generation_context ctx)
    : ctx_(std::move(ctx)), choices_(ctx_.choice_prompt_ids.size()) {
  for (choice_state& c : choices_) c.tools = ctx_.tool_calls;
}

const char* generation::finish_name(const choice_state& c, finish_reason r) const {
  // The final chunk is written after the reader's finish(): streamed or
  // not, the response's calls decide.
  const bool called = c.tools && !c.tools->calls().empty();
  return r == finish_reason::stop && called ? "tool_calls" : openai_finish_reason(r);
}

std::string generation::token_text(int32_t id) const {
  if (ctx_.tok == nullptr) return "token_id:" + std::to_string(id);
  return ctx_.tok->decode({id}, false);
}

void generation::write_logprobs(json_writer& w, const std::vector<token_logprobs>& lps,
                                int64_t& text_offset, int32_t first_prompt_token,
                                const std::vector<token_logprobs>* prompt_lps) const {
  if (!ctx_.want_logprobs) { w.null(); return; }
  if (ctx_.kind == generation_kind::chat) {
    w.begin_object().key("content").begin_array();
    for (const token_logprobs& lp : lps) {
      const auto entry = [&](int32_t id, float logprob) {
        const std::string text = token_text(id);
        w.key("token").value(text).key("logprob").value(logprob).key("bytes").begin_array();
        for (unsigned char c : text) w.value(static_cast<int64_t>(c));
        w.end_array();
      };
      w.begin_object();
      entry(lp.token_id, lp.logprob);
      w.key("top_logprobs").begin_array();
      for (size_t k = 0; k < lp.top_ids.size(); ++k) {
        w.begin_object();
        entry(lp.top_ids[k], lp.top_logprobs[k]);
        w.end_object();
      }
      w.end_array().end_object();
    }
    w.end_array().end_object();
    return;
  }
  // Completions: vLLM's {tokens, token_logprobs, top_logprobs, text_offset};
  // with echo the prompt comes first, its first token without logprobs.
  std::vector<const token_logprobs*> all;
  if (prompt_lps != nullptr) {
    for (const token_logprobs& lp : *prompt_lps) all.push_back(&lp);
  }
  for (const token_logprobs& lp : lps) all.push_back(&lp);
  const bool lead = first_prompt_token >= 0;
  w.begin_object();
  w.key("tokens").begin_array();
  if (lead) w.value(token_text(first_prompt_token));
  for (const token_logprobs* lp : all) w.value(token_text(lp->token_id));
  w.end_array().key("token_logprobs").begin_array();
  if (lead) w.null();
  for (const token_logprobs* lp : all) w.value(lp->logprob);
  w.end_array().key("top_logprobs").begin_array();
  if (lead) w.null();
  for (const token_logprobs* lp : all) {
    w.begin_object();
    // The chosen token first (as vLLM, which adds it to the top k).
    w.key(token_text(lp->token_id)).value(lp->logprob);
    for (size_t k = 0; k < lp->top_ids.size(); ++k) {
      if (lp->top_ids[k] != lp->token_id) w.key(token_text(lp->top_ids[k])).value(lp->top_logprobs[k]);
    }
    w.end_object();
  }
  w.end_array().key("text_offset").begin_array();
  if (lead) {
    w.value(text_offset);
    text_offset += num_chars(token_text(first_prompt_token));
  }
  for (const token_logprobs* lp : all) {
    w.value(text_offset);
    text_offset += num_chars(token_text(lp->token_id));
  }
  w.end_array().end_object();
}

void generation::write_prompt_logprobs(json_writer& w, size_t i) const {
  w.key("prompt_logprobs");
  const std::vector<int32_t>& prompt = ctx_.choice_prompt_ids[i];
  if (!ctx_.return_prompt_logprobs || prompt.empty()) { w.null(); return; }
  w.begin_array().null();
  const auto entry = [&](int32_t id, float logprob, int64_t rank) {
    w.key(std::to_string(id)).begin_object().key("logprob").value(logprob).key("rank").value(rank);
    w.key("decoded_token").value(token_text(id)).end_object();
  };
  for (const token_logprobs& lp : choices_[i].prompt_logprobs) {
    w.begin_object();
    entry(lp.token_id, lp.logprob, lp.rank);
    for (size_t k = 0; k < lp.top_ids.size(); ++k) {
      if (lp.top_ids[k] != lp.token_id) entry(lp.top_ids[k], lp.top_logprobs[k], static_cast<int64_t>(k) + 1);
    }
    w.end_object();
  }
  w.end_array();
}

void generation::write_usage(json_writer& w) const {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (ctx_.choice_counts_prompt[i]) prompt_tokens += static_cast<int64_t>(ctx_.choice_prompt_ids[i].size());
    completion_tokens += static_cast<int64_t>(choices_[i].token_ids.size());
  }
  w.key("usage").begin_object();
  w.key("prompt_tokens").value(prompt_tokens);
  w.key("total_tokens").value(prompt_tokens + completion_tokens);
  w.key("completion_tokens").value(completion_tokens);
  w.end_object();
}

std::string generation::stream_start() {
  if (ctx_.kind != generation_kind::chat) return "";
  std::string out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    json_writer w;
    w.begin_object().key("id").value(ctx_.id).key("object").value("chat.completion.chunk");
    w.key("created").value(ctx_.created).key("model").value(ctx_.model);
    w.key("choices").begin_array().begin_object().key("index").value(static_cast<int64_t>(i));
    w.key("delta").begin_object().key("role").value("assistant").key("content").value("").end_object();
    w.key("logprobs").null().key("finish_reason").null();
    w.end_object().end_array().end_object();
    out += sse(w.str());
  }
  return out;
}

std::string generation::chunk(size_t i, const request_output& out, const tool_stream_delta* tools) {
  const bool chat = ctx_.kind == generation_kind::chat;
  json_writer w;
  w.begin_object().key("id").value(ctx_.id);
  w.key("object").value(chat ? "chat.completion.chunk" : "text_completion");
  w.key("created").value(ctx_.created).key("model").value(ctx_.model);
  w.key("choices").begin_array().begin_object().key("index").value(static_cast<int64_t>(i));
  choice_state& c = choices_[i];
  const bool echo_now = ctx_.echo && !c.echoed;  // the first chunk carries the prompt
  c.echoed = c.echoed || ctx_.echo;
  if (chat && tools != nullptr) {
    w.key("delta").begin_object();
    if (!tools->content.empty() || tools->calls.empty()) w.key("content").value(tools->content);
    if (!tools->calls.empty()) write_tool_call_deltas(w, tools->calls);
    w.end_object();
  } else if (chat) {
    w.key("delta").begin_object().key("content").value(out.text).end_object();
  } else {
    w.key("text").value(echo_now ? ctx_.choice_prompt_text[i] + out.text : out.text);
  }
  w.key("logprobs");
  if (echo_now) {
    write_logprobs(w, out.logprobs, c.text_offset, ctx_.choice_prompt_ids[i].front(), &c.prompt_logprobs);
  } else {
    write_logprobs(w, out.logprobs, c.text_offset);
  }
  write_finish(w, finish_name(c, out.finish));
  if (ctx_.return_token_ids || ctx_.tok == nullptr) w.key("token_ids").array(out.new_token_ids);
  w.end_object().end_array().end_object();
  return sse(w.str());
}

std::string generation::on_output(size_t i, const request_output& given) {
  request_output prompt_only;
  if (ctx_.echo_only) {  // the one sampled token is not shown
    prompt_only.id = given.id;
    prompt_only.prompt_logprobs = given.prompt_logprobs;
    prompt_only.finish = given.finish == finish_reason::stop ? finish_reason::length : given.finish;
    prompt_only.error = given.error;
    prompt_only.unavailable = given.unavailable;
    prompt_only.num_prompt_tokens = given.num_prompt_tokens;
  }
  const request_output& out = ctx_.echo_only ? prompt_only : given;
  choice_state& c = choices_[i];
  if (c.finish != finish_reason::none) return "";
  c.token_ids.insert(c.token_ids.end(), out.new_token_ids.begin(), out.new_token_ids.end());
  c.text += out.text;
  c.logprobs.insert(c.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
  c.prompt_logprobs.insert(c.prompt_logprobs.end(), out.prompt_logprobs.begin(), out.prompt_logprobs.end());
  if (out.finish != finish_reason::none) {
    c.finish = out.finish;
    c.stop_reason = out.stop_reason;
    ++num_finished_;
    if (out.finish == finish_reason::error && first_error_.empty()) {
      first_error_ = out.error;
      first_error_unavailable_ = out.unavailable;
    }
  }
  tool_stream_delta tools;
  if (c.tools) {
    tools = c.tools->feed(out.text);
    if (out.finish != finish_reason::none) merge(tools, c.tools->finish());
  }
  if (!ctx_.stream) return "";
  std::string bytes;
  if (c.tools) {
    // Text held back (it may open a call) waits; token ids and logprobs do not.
    const bool more = !tools.empty() || !out.logprobs.empty() ||
                      ((ctx_.return_token_ids || ctx_.tok == nullptr) && !out.new_token_ids.empty());
    if (more || out.finish != finish_reason::none) bytes = chunk(i, out, &tools);
  } else if (!out.new_token_ids.empty() || !out.text.empty() || out.finish != finish_reason::none) {
    bytes = chunk(i, out, nullptr);
  }
  if (out.unavailable && !unavailable_sent_) {
    // The headers (200) are out: the stream says it in OpenAI's error
    // envelope, as vLLM does for an error mid-stream (once, whatever n).
    bytes += sse(api_error_body({503, out.error, ""}));
    unavailable_sent_ = true;
  }
  if (done()) {
    if (ctx_.include_usage) {
      json_writer w;
      w.begin_object().key("id").value(ctx_.id);
      w.key("object").value(ctx_.kind == generation_kind::chat ? "chat.completion.chunk" : "text_completion");
      w.key("created").value(ctx_.created).key("model").value(ctx_.model);
      w.key("choices").begin_array().end_array();
      write_usage(w);
      w.end_object();
      bytes += sse(w.str());
    }
    bytes += "data: [DONE]\n\n";
  }
  return bytes;
}

std::string generation::summary() const {
  int64_t prompt = 0, completion = 0;
  // Finish reasons as counts, in a fixed order: bounded whatever n is.
  std::map<std::string, int64_t> counts;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (ctx_.choice_counts_prompt[i]) prompt += static_cast<int64_t>(ctx_.choice_prompt_ids[i].size());
    completion += static_cast<int64_t>(choices_[i].token_ids.size());
    const char* f = openai_finish_reason(choices_[i].finish);
    ++counts[f != nullptr ? f : "none"];
  }
  std::string finishes;
  for (const auto& [reason, count] : counts) {
    finishes += (finishes.empty() ? "" : ",") + reason + (count > 1 ? ":" + std::to_string(count) : "");
  }
  return "req=" + ctx_.id + (ctx_.kind == generation_kind::chat ? " chat" : " completion") +
         (ctx_.stream ? " stream" : "") + " n=" + std::to_string(choices_.size()) +
         " prompt=" + std::to_string(prompt) + " completion=" + std::to_string(completion) +
         " finish=" + finishes;
}

std::string generation::response_body() const {
  const bool chat = ctx_.kind == generation_kind::chat;
  json_writer w;
  w.begin_object().key("id").value(ctx_.id);
  w.key("object").value(chat ? "chat.completion" : "text_completion");
  w.key("created").value(ctx_.created).key("model").value(ctx_.model);
  w.key("choices").begin_array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const choice_state& c = choices_[i];
    w.begin_object().key("index").value(static_cast<int64_t>(i));
    if (chat) {
      w.key("message").begin_object().key("role").value("assistant");
      if (!c.tools) {
        w.key("content").value(c.text);
      } else {
        const std::optional<std::string>& content = c.tools->content();
        w.key("content");
        if (content) w.value(*content); else w.null();
        w.key("tool_calls").begin_array();
        for (const tool_call& call : c.tools->calls()) {
          w.begin_object().key("id").value(call.id).key("type").value("function");
          w.key("function").begin_object().key("name").value(call.name);
          w.key("arguments").value(call.arguments).end_object().end_object();
        }
        w.end_array();
      }
      w.end_object();
    } else {
      w.key("text").value(ctx_.echo ? ctx_.choice_prompt_text[i] + c.text : c.text);
    }
    int64_t offset = 0;
    w.key("logprobs");
    if (ctx_.echo) {
      write_logprobs(w, c.logprobs, offset, ctx_.choice_prompt_ids[i].front(), &c.prompt_logprobs);
    } else {
      write_logprobs(w, c.logprobs, offset);
    }
    write_finish(w, finish_name(c, c.finish));
    w.key("stop_reason");
    if (c.stop_reason.empty()) w.null(); else w.value(c.stop_reason);
    if (ctx_.return_token_ids || ctx_.tok == nullptr) {
      w.key("token_ids").array(c.token_ids);
      if (ctx_.return_token_ids) w.key("prompt_token_ids").array(ctx_.choice_prompt_ids[i]);
    }
    if (!chat) write_prompt_logprobs(w, i);
    w.end_object();
  }
  w.end_array();
  if (chat) write_prompt_logprobs(w, 0);
  write_usage(w);
  w.end_object();
  return w.take();
}

}  // namespace troupe
