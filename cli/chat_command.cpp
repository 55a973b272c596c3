// `troupe chat` and `troupe complete`: interactive clients of a running
// OpenAI-compatible server (vLLM's `vllm chat` / `vllm complete`).
//
//   troupe chat [--url http://localhost:8000/v1] [--model NAME] [--system-prompt S]
//               [--quick MESSAGE] [--max-tokens N] [--api-key KEY]
//   troupe complete [--url ...] [--model NAME] [--quick PROMPT] [--max-tokens N] [--api-key KEY]
//
// Each line read from stdin is one message (chat: the history so far goes
// with it) or one prompt (complete); the reply is streamed to stdout as it
// arrives. --quick sends one and exits. The model defaults to the first
// the server lists; the API key to $OPENAI_API_KEY. A request the server
// refuses prints its error and, interactively, the session goes on.
#include <simdjson.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "cli/bench/bench_flags.h"
#include "cli/bench/serve_client.h"
#include "cli/bench/sse.h"
#include "cli/commands.h"
#include "cli/help.h"
#include "common/json_writer.h"

namespace troupe {

namespace {

struct client_setup {
  bench::http_endpoint ep;
  bench::header_list headers;
  std::string model;
  std::string system_prompt;
  std::string quick;
  bool has_quick = false;
  int64_t max_tokens = -1;  // -1: the server's default
};

std::vector<bench::flag_spec> client_specs(bool chat) {
  using bench::flag_kind;
  std::vector<bench::flag_spec> specs = {
      {"url", flag_kind::value, "http://localhost:8000/v1"},
      {"model", flag_kind::value, ""},
      {"quick", flag_kind::value, ""},
      {"max-tokens", flag_kind::value, ""},
      {"api-key", flag_kind::value, ""}};
  if (chat) specs.push_back({"system-prompt", flag_kind::value, ""});
  return specs;
}

result<client_setup> read_setup(const std::vector<std::string>& args, bool chat) {
  auto flags = bench::parse_flags(args, client_specs(chat));
  if (!flags) return std::move(flags).take_error();
  client_setup s;
  s.model = flags->get("model");
  s.system_prompt = flags->get("system-prompt");
  s.has_quick = flags->has("quick");
  s.quick = flags->get("quick");
  if (flags->has("max-tokens")) {
    auto n = flags->get_int("max-tokens");
    if (!n || *n < 1) return make_error("--max-tokens: expected a positive integer");
    s.max_tokens = *n;
  }
  const char* key = std::getenv("OPENAI_API_KEY");
  const std::string api_key = flags->has("api-key") ? flags->get("api-key") : key != nullptr ? key : "";
  const std::string url = flags->get("url");
  auto ep = bench::parse_base_url(url);
  if (!ep) return make_error("--url: " + ep.error_message());
  s.ep = std::move(ep.value());
  if (!api_key.empty()) s.headers.emplace_back("Authorization", "Bearer " + api_key);
  if (s.model.empty()) {
    const bench::simple_response r =
        bench::http_fetch(s.ep, "GET", "/models", s.headers, "", std::chrono::seconds(30));
    simdjson::dom::parser parser;
    std::string_view id;
    if (r.status != 200 || parser.parse(r.body)["data"].at(0)["id"].get_string().get(id)) {
      return make_error("cannot list the models at " + s.ep.url() + "/models (" +
                        (r.status == 0 ? r.error : "HTTP " + std::to_string(r.status)) +
                        "); is the server running? (--url)");
    }
    s.model = std::string(id);
  }
  return s;
}

// Streams one request, writing its text to stdout as it arrives; returns
// the whole text, or the error (the server's message, or the transport's).
result<std::string> stream_reply(const client_setup& s, bool chat, const std::string& body) {
  std::string text, error;
  bench::sse_splitter splitter;
  simdjson::dom::parser parser;
  int status = 0;
  std::string raw;  // a non-streamed (error) body
  const bench::simple_response r = bench::http_stream(
      s.ep, "POST", chat ? "/chat/completions" : "/completions", s.headers, body,
      std::chrono::seconds(600), [&](std::string_view bytes) {
        raw.append(bytes);
        splitter.feed(bytes, [&](const std::string& data) {
          if (data == "[DONE]") return;
          simdjson::dom::element doc;
          if (parser.parse(data).get(doc) != simdjson::SUCCESS) return;
          std::string_view message;
          if (doc["error"]["message"].get(message) == simdjson::SUCCESS) {
            error = std::string(message);
            return;
          }
          simdjson::dom::array choices;
          if (doc["choices"].get(choices) != simdjson::SUCCESS || choices.size() == 0) return;
          std::string_view piece;
          const auto got = chat ? choices.at(0)["delta"]["content"].get(piece)
                                : choices.at(0)["text"].get(piece);
          if (got != simdjson::SUCCESS) return;
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
          text += piece;
        });
      });
  status = r.status;
  if (status == 0) return make_error("cannot reach " + s.ep.url() + ": " + r.error);
  if (status != 200) {
    std::string_view message;
    if (parser.parse(raw)["error"]["message"].get(message) == simdjson::SUCCESS) {
      return make_error("HTTP " + std::to_string(status) + ": " + std::string(message));
    }
    return make_error("HTTP " + std::to_string(status));
  }
  if (!error.empty()) return make_error(error);
  return text;
}

std::string request_body(const client_setup& s, bool chat,
                         const std::vector<std::pair<std::string, std::string>>& messages,
                         const std::string& prompt) {
  json_writer w;
  w.begin_object().key("model").value(s.model).key("stream").value(true);
  if (s.max_tokens > 0) w.key("max_tokens").value(s.max_tokens);
  if (chat) {
    w.key("messages").begin_array();
    for (const auto& [role, content] : messages) {
      w.begin_object().key("role").value(role).key("content").value(content).end_object();
    }
    w.end_array();
  } else {
    w.key("prompt").value(prompt);
  }
  return w.end_object().take();
}

int run_client(const std::vector<std::string>& args, bool chat) {
  const char* name = chat ? "chat" : "complete";
  if (show_help(args, std::string("usage: troupe ") + name +
                            " [--url URL] [--model NAME] [--quick TEXT] [options]\n" +
                            (chat ? "Chats with a running server: each line of stdin is a "
                                    "message, the history goes with it; the reply streams "
                                    "to stdout."
                                  : "Completes prompts on a running server: each line of "
                                    "stdin is a prompt; the completion streams to stdout.") +
                            "\n--quick TEXT sends one and exits (vLLM's `vllm " + name + "`); "
                            "--model defaults to the first\nthe server lists, --api-key to "
                            "$OPENAI_API_KEY, --max-tokens to the server's default.",
                        bench::as_command_flags(client_specs(chat)), false)) return 0;
  auto setup = read_setup(args, chat);
  if (!setup) return print_error(setup.error_message()), setup.error_message().find("cannot") == 0 ? 1 : 2;
  const client_setup& s = *setup;
  std::vector<std::pair<std::string, std::string>> history;
  if (chat && !s.system_prompt.empty()) history.emplace_back("system", s.system_prompt);
  auto send = [&](const std::string& input) -> bool {
    if (chat) history.emplace_back("user", input);
    auto reply = stream_reply(s, chat, request_body(s, chat, history, input));
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!reply) {
      print_error(reply.error_message());
      if (chat) history.pop_back();  // not part of the conversation
      return false;
    }
    if (chat) history.emplace_back("assistant", *reply);
    return true;
  };
  if (s.has_quick) return send(s.quick) ? 0 : 1;
  std::fprintf(stderr, "troupe %s: model %s at %s; one %s a line, end with Ctrl-D\n", name,
               s.model.c_str(), s.ep.url().c_str(), chat ? "message" : "prompt");
  for (std::string line; std::fputs("> ", stderr), std::getline(std::cin, line);) {
    if (line.empty()) continue;
    send(line);
  }
  std::fputc('\n', stderr);
  return 0;
}

}  // namespace

int run_chat(const std::vector<std::string>& args) { return run_client(args, true); }
int run_complete(const std::vector<std::string>& args) { return run_client(args, false); }

}  // namespace troupe
