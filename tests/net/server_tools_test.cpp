// Tool calling through `troupe serve` with random-weight models and the
// real tokenizers and chat templates: tool_choice "required" and a named
// function always give well-formed calls (the structured-output engine
// shapes them), streamed or not, in the syntax of each parser (hermes with
// Qwen3's own template; llama3_json and mistral through the chat_template
// key with the Llama 3.1 and Mistral v0.3 templates); the tools and a
// call's history reach the template; "auto" and "none" answer with
// content; bad tools are 400s naming the field.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <map>

#include "tests/net/server_harness.h"

namespace troupe::testing {
namespace {

const std::string weather_tools = R"("tools": [
  {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                  "unit": {"type": "string", "enum": ["c", "f"]}},
                  "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time", "description": "The time now"}}])";

const std::string ask = R"("messages": [{"role": "user", "content": "What is the weather in Paris?"}])";

struct call {
  std::string id, name, arguments;
};

struct reply {
  int status = 0;
  std::string body;
  std::string finish;
  std::optional<std::string> content;
  bool has_tool_calls = false;  // the message carries tool_calls (even [])
  std::vector<call> calls;
};

reply chat(int port, const std::string& fields) {
  reply r;
  const http_result h = http_call(port, "POST", "/v1/chat/completions", "{" + ask + ", " + fields + "}");
  r.status = h.status;
  r.body = h.body;
  if (h.status != 200) return r;
  simdjson::dom::parser parser;
  simdjson::dom::element choice = parser.parse(h.body)["choices"].at(0);
  r.finish = std::string(std::string_view(choice["finish_reason"]));
  simdjson::dom::element message = choice["message"];
  std::string_view content;
  if (message["content"].get(content) == simdjson::SUCCESS) r.content = std::string(content);
  simdjson::dom::array calls;
  if (message["tool_calls"].get(calls) == simdjson::SUCCESS) {
    r.has_tool_calls = true;
    for (simdjson::dom::element c : calls) {
      EXPECT_EQ(std::string_view(c["type"]), "function");
      r.calls.push_back({std::string(std::string_view(c["id"])), std::string(std::string_view(c["function"]["name"])),
                         std::string(std::string_view(c["function"]["arguments"]))});
    }
  }
  return r;
}

// The same request streamed, its deltas put together as a client does.
reply chat_streamed(int port, const std::string& fields) {
  reply r;
  const http_result h =
      http_call(port, "POST", "/v1/chat/completions", "{" + ask + ", \"stream\": true, " + fields + "}");
  r.status = h.status;
  r.body = h.body;
  auto events = sse_events(h.body);
  if (h.status != 200 || !events) return r;
  simdjson::dom::parser parser;
  std::map<int64_t, call> calls;
  for (const std::string& e : *events) {
    if (e == "[DONE]") continue;
    simdjson::dom::element doc = parser.parse(e);
    simdjson::dom::array choices = doc["choices"];
    if (choices.size() == 0) continue;
    simdjson::dom::element choice = choices.at(0);
    std::string_view finish, content;
    if (choice["finish_reason"].get(finish) == simdjson::SUCCESS) r.finish = std::string(finish);
    simdjson::dom::element delta = choice["delta"];
    if (delta["content"].get(content) == simdjson::SUCCESS) r.content = r.content.value_or("") + std::string(content);
    simdjson::dom::array deltas;
    if (delta["tool_calls"].get(deltas) != simdjson::SUCCESS) continue;
    for (simdjson::dom::element d : deltas) {
      const int64_t index = d["index"];
      std::string_view id, name;
      const bool first = d["id"].get(id) == simdjson::SUCCESS;
      EXPECT_EQ(first, calls.count(index) == 0) << "the id comes with a call's first delta only";
      if (first) {
        EXPECT_EQ(std::string_view(d["function"]["name"]).size() > 0, true);
        EXPECT_EQ(index, static_cast<int64_t>(calls.size()));
        calls[index] = {std::string(id), std::string(std::string_view(d["function"]["name"])), ""};
      }
      calls[index].arguments += std::string(std::string_view(d["function"]["arguments"]));
    }
  }
  for (auto& [index, c] : calls) r.calls.push_back(c);
  return r;
}

// A call of one of weather_tools with arguments of its schema.
void expect_valid(const call& c) {
  simdjson::dom::parser parser;
  simdjson::dom::element args;
  ASSERT_EQ(parser.parse(c.arguments).get(args), simdjson::SUCCESS) << c.arguments;
  ASSERT_TRUE(args.is_object()) << c.arguments;
  if (c.name == "get_time") {
    EXPECT_EQ(simdjson::dom::object(args).size(), 0u) << c.arguments;
    return;
  }
  ASSERT_EQ(c.name, "get_weather");
  EXPECT_EQ(simdjson::dom::object(args).size(), 2u) << c.arguments;
  const std::string_view city = args["city"], unit = args["unit"];
  EXPECT_TRUE(city == "Paris" || city == "Oslo") << c.arguments;
  EXPECT_TRUE(unit == "c" || unit == "f") << c.arguments;
}

std::vector<std::string> qwen3_args() { return default_cpu_args(); }
using server_tools = shared_server_suite<qwen3_args>;

TEST_F(server_tools, required_gives_one_well_formed_call_for_every_seed) {
  ASSERT_NE(port(), 0) << server_->log();
  for (int seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const reply r = chat(port(), weather_tools + R"(, "tool_choice": "required", "parallel_tool_calls": false,
                                                    "max_tokens": 300, "temperature": 1, "seed": )" +
                                     std::to_string(seed));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.finish, "tool_calls") << r.body;
    ASSERT_EQ(r.calls.size(), 1u) << r.body;
    EXPECT_EQ(r.content, std::nullopt) << r.body;
    EXPECT_EQ(r.calls[0].id.rfind("call_", 0), 0u);
    expect_valid(r.calls[0]);
  }
  // Parallel calls: any number, each well formed, when the model stops.
  int stopped = 0;
  for (int seed = 1; seed <= 6; ++seed) {
    const reply r = chat(port(), weather_tools + R"(, "tool_choice": "required", "max_tokens": 300, "seed": )" +
                                     std::to_string(seed));
    ASSERT_EQ(r.status, 200) << r.body;
    if (r.finish != "tool_calls") continue;
    ++stopped;
    ASSERT_GE(r.calls.size(), 1u);
    for (const call& c : r.calls) expect_valid(c);
  }
  EXPECT_GE(stopped, 1);
}

TEST_F(server_tools, a_named_function_is_called) {
  ASSERT_NE(port(), 0) << server_->log();
  for (int seed = 1; seed <= 3; ++seed) {
    const reply r = chat(port(), weather_tools + R"(, "tool_choice": {"type": "function", "function":
                                 {"name": "get_weather"}}, "max_tokens": 300, "seed": )" + std::to_string(seed));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.finish, "tool_calls");
    ASSERT_EQ(r.calls.size(), 1u) << r.body;
    EXPECT_EQ(r.calls[0].name, "get_weather");
    expect_valid(r.calls[0]);
  }
}

TEST_F(server_tools, streamed_calls_add_up_to_the_unstreamed_ones) {
  ASSERT_NE(port(), 0) << server_->log();
  for (const std::string choice : {R"("required")", R"({"type": "function", "function": {"name": "get_time"}})"}) {
    const std::string fields = weather_tools + R"(, "max_tokens": 300, "seed": 5, "tool_choice": )" + choice;
    const reply whole = chat(port(), fields);
    const reply streamed = chat_streamed(port(), fields);
    ASSERT_EQ(whole.status, 200) << whole.body;
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    EXPECT_EQ(streamed.finish, whole.finish);
    ASSERT_EQ(streamed.calls.size(), whole.calls.size()) << streamed.body;
    for (size_t i = 0; i < whole.calls.size(); ++i) {
      EXPECT_EQ(streamed.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(streamed.calls[i].arguments, whole.calls[i].arguments);
      EXPECT_EQ(streamed.calls[i].id.rfind("call_", 0), 0u);
    }
  }
}

TEST_F(server_tools, auto_and_none_answer_with_content) {
  ASSERT_NE(port(), 0) << server_->log();
  // A random-weight model does not write <tool_call>: content, no calls.
  const reply automatic = chat(port(), weather_tools + R"(, "max_tokens": 8, "seed": 1)");
  ASSERT_EQ(automatic.status, 200) << automatic.body;
  EXPECT_TRUE(automatic.has_tool_calls);
  EXPECT_TRUE(automatic.calls.empty());
  ASSERT_TRUE(automatic.content.has_value());
  EXPECT_EQ(automatic.finish, "length");
  const reply none = chat(port(), weather_tools + R"(, "tool_choice": "none", "max_tokens": 8, "seed": 1)");
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_FALSE(none.has_tool_calls);
  // The same prompt (the template sees the tools either way), the same text.
  EXPECT_EQ(none.content, automatic.content);
}

// The prompt a chat request renders, as text.
std::string rendered(int port, const std::string& fields) {
  const http_result t = http_call(port, "POST", "/tokenize", "{" + fields + "}");
  EXPECT_EQ(t.status, 200) << t.body;
  simdjson::dom::parser parser;
  simdjson::dom::element tokens;
  if (parser.parse(t.body)["tokens"].get(tokens) != simdjson::SUCCESS) return "";
  const http_result d = http_call(port, "POST", "/detokenize", "{\"tokens\": " + simdjson::minify(tokens) + "}");
  EXPECT_EQ(d.status, 200) << d.body;
  return std::string(std::string_view(parser.parse(d.body)["prompt"]));
}

const std::string history = R"("messages": [
  {"role": "user", "content": "What is the weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
   "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
  {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21}"}])";

TEST_F(server_tools, tools_and_a_call_history_reach_the_template) {
  ASSERT_NE(port(), 0) << server_->log();
  const std::string text = rendered(port(), history + ", " + weather_tools);
  EXPECT_NE(text.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), std::string::npos)
      << text;
  EXPECT_NE(text.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n"
                      "</tool_call>"), std::string::npos) << text;
  EXPECT_NE(text.find("<tool_response>\n{\"temperature\": 21}\n</tool_response>"), std::string::npos) << text;
  const http_result h = http_call(port(), "POST", "/v1/chat/completions",
                                  "{" + history + ", " + weather_tools + R"(, "max_tokens": 4})");
  EXPECT_EQ(h.status, 200) << h.body;
}

TEST_F(server_tools, bad_tools_are_400s_naming_the_field) {
  ASSERT_NE(port(), 0) << server_->log();
  const auto error = [&](const std::string& body) {
    const http_result h = http_call(port(), "POST", "/v1/chat/completions", body);
    EXPECT_EQ(h.status, 400) << h.body;
    simdjson::dom::parser parser;
    return std::string(std::string_view(parser.parse(h.body)["error"]["message"]));
  };
  EXPECT_EQ(error("{" + ask + R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters":
                  {"type": "object", "not": {}}}}], "tool_choice": "required"})"),
            "tools[0].function.parameters: JSON Schema: unsupported keyword 'not' at the root");
  EXPECT_EQ(error("{" + ask + ", " + weather_tools +
                  R"(, "tool_choice": "required", "response_format": {"type": "json_object"}})"),
            "tool_choice: a forced tool call cannot be combined with response_format or structured_outputs");
  const std::string bad_history = R"("messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
      "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{oops"}}]}])";
  EXPECT_EQ(error("{" + bad_history + "}").rfind("messages: messages[1].tool_calls[0].function.arguments: "
                                                 "not valid JSON", 0), 0u);
  EXPECT_EQ(error("{" + ask + R"(, "tool_choice": "auto"})"),
            "tool_choice: needs tools (a non-empty list of functions)");
}

TEST(server_tools_config, auto_needs_a_parser) {
  server_process server(default_cpu_args({"--tool-call-parser", "none"}));
  ASSERT_NE(server.port(), 0) << server.log();
  const reply automatic = chat(server.port(), weather_tools);
  EXPECT_EQ(automatic.status, 400);
  EXPECT_NE(automatic.body.find("tool_choice: \\\"auto\\\" needs a tool call parser"), std::string::npos)
      << automatic.body;
  // Forced choices need none: vLLM's JSON forms.
  const reply required = chat(server.port(), weather_tools + R"(, "tool_choice": "required",
                                             "parallel_tool_calls": false, "max_tokens": 300, "seed": 2)");
  ASSERT_EQ(required.status, 200) << required.body;
  ASSERT_EQ(required.calls.size(), 1u) << required.body;
  expect_valid(required.calls[0]);
  const reply named = chat_streamed(server.port(), weather_tools + R"(, "max_tokens": 300, "seed": 2,
                                    "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  ASSERT_EQ(named.status, 200) << named.body;
  EXPECT_EQ(named.finish, "tool_calls");
  ASSERT_EQ(named.calls.size(), 1u) << named.body;
  expect_valid(named.calls[0]);
}

// A dummy model of the structured-output fixtures with a chat template of
// tests/data/chat/templates in place of its tokenizer's.
std::vector<std::string> templated_args(const std::string& model, const std::string& chat_template) {
  return {"--model", repo_path("tests/data/structured/models/" + model), "--tokenizer",
          repo_path("tests/data/tokenizers/" + model), "--load-format", "dummy", "--backend", "cpu",
          "--dtype", "float32", "--seed", "0", "--max-model-len", "2048", "--cpu-kvcache-space", "1",
          "--chat-template", repo_path("tests/data/chat/templates/" + chat_template)};
}

TEST(server_tools_parsers, llama3_json_through_the_llama_3_1_template) {
  server_process server(templated_args("llama3_1", "llama3_1_tools.jinja"));
  ASSERT_NE(server.port(), 0) << server.log();
  const reply r = chat(server.port(), weather_tools + R"(, "tool_choice": "required", "parallel_tool_calls": false,
                                      "max_tokens": 300, "seed": 1)");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.finish, "tool_calls");
  ASSERT_EQ(r.calls.size(), 1u) << r.body;
  expect_valid(r.calls[0]);
  // The template implies llama3_json: auto is served; the history renders.
  EXPECT_EQ(chat(server.port(), weather_tools + R"(, "max_tokens": 4)").status, 200);
  const std::string text = rendered(server.port(), history + ", " + weather_tools);
  EXPECT_NE(text.find("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}"),
            std::string::npos) << text;
}

TEST(server_tools_parsers, mistral_through_the_mistral_v0_3_template) {
  server_process server(templated_args("llama2", "mistral_v0_3.jinja"));
  ASSERT_NE(server.port(), 0) << server.log();
  const reply r = chat_streamed(server.port(), weather_tools + R"(, "tool_choice": "required",
                                "parallel_tool_calls": false, "max_tokens": 300, "seed": 1)");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.finish, "tool_calls");
  ASSERT_EQ(r.calls.size(), 1u) << r.body;
  expect_valid(r.calls[0]);
  EXPECT_EQ(r.calls[0].id.size(), 9u);  // the template refuses other ids
  // The call and its result back in the history: the template accepts the id.
  std::string args_json;
  for (char ch : r.calls[0].arguments) {
    if (ch == '"' || ch == '\\') args_json += '\\';
    args_json += ch;
  }
  const std::string followup = R"({"messages": [{"role": "user", "content": "Weather?"},
      {"role": "assistant", "tool_calls": [{"id": ")" + r.calls[0].id + R"(", "type": "function",
       "function": {"name": ")" + r.calls[0].name + R"(", "arguments": ")" + args_json + R"("}}]},
      {"role": "tool", "tool_call_id": ")" + r.calls[0].id + R"(", "content": "21"}],
      "max_tokens": 4, )" + weather_tools + "}";
  const http_result h = http_call(server.port(), "POST", "/v1/chat/completions", followup);
  EXPECT_EQ(h.status, 200) << h.body;
}

}  // namespace
}  // namespace troupe::testing
