// A chat request's tools, tool_choice and parallel_tool_calls read and
// checked (net/tool_request.h), and the constraint of a forced choice: for
// every parser (and none), the output it admits is the parser's syntax as
// the fixture templates render calls, naming only the allowed functions
// with arguments of their schemas, and the parser reads it back.
#include <gtest/gtest.h>

#include "grammar/json_schema.h"
#include "grammar/structural.h"
#include "net/openai_request.h"
#include "tests/grammar/accepts.h"

namespace troupe {
namespace {

const std::string weather_tools = R"("tools": [
  {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                  "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                  "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time"}}])";

parse_result<chat_request> chat(const std::string& fields) {
  return parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], )" + fields + "}");
}

tool_request tools_of(const std::string& fields) {
  auto r = chat(fields);
  if (const auto* e = std::get_if<api_error>(&r)) {
    ADD_FAILURE() << e->message;
    return {};
  }
  return std::get<chat_request>(r).tools;
}

std::string error_of(const std::string& fields) {
  auto r = chat(fields);
  const auto* e = std::get_if<api_error>(&r);
  return e == nullptr ? "(parsed)" : e->message;
}

TEST(tool_request, fields_and_defaults) {
  tool_request t = tools_of(weather_tools);
  ASSERT_EQ(t.tools.size(), 2u);
  EXPECT_EQ(t.tools[0].name, "get_weather");
  EXPECT_NE(t.tools[0].parameters.find("\"enum\":[\"Paris\",\"Oslo\"]"), std::string::npos);
  EXPECT_EQ(t.tools[1].parameters, "");
  EXPECT_EQ(t.mode, tool_request::choice::automatic);  // tools given: auto
  EXPECT_TRUE(t.parallel);
  EXPECT_EQ(tools_of(R"("temperature": 1)").mode, tool_request::choice::none);
  EXPECT_EQ(tools_of(weather_tools + R"(, "tool_choice": "none")").mode, tool_request::choice::none);
  EXPECT_EQ(tools_of(weather_tools + R"(, "tool_choice": "required")").mode, tool_request::choice::required);
  t = tools_of(weather_tools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}},
                                   "parallel_tool_calls": false)");
  EXPECT_EQ(t.mode, tool_request::choice::named);
  EXPECT_EQ(t.named, "get_time");
  EXPECT_FALSE(t.parallel);
  EXPECT_EQ(tools_of(R"("tools": [], "tool_choice": "none")").tools.size(), 0u);
  EXPECT_EQ(tools_of(R"("tools": [{"type": "function", "function": {"name": "f", "strict": true,
                        "parameters": {"type": "object"}}}])").tools[0].strict, true);
}

TEST(tool_request, errors_name_the_field) {
  EXPECT_EQ(error_of(R"("tool_choice": "required")"), "tool_choice: needs tools (a non-empty list of functions)");
  EXPECT_EQ(error_of(weather_tools + R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})"),
            "tool_choice: function 'nope' is not among the tools");
  EXPECT_NE(error_of(weather_tools + R"(, "tool_choice": "any")").find("tool_choice: expected 'none', 'auto'"),
            std::string::npos);
  EXPECT_EQ(error_of(R"("tools": {"type": "function"})"), "tools: expected a list of function tools");
  EXPECT_EQ(error_of(R"("tools": [{"type": "function", "function": {"description": "x"}}])"),
            "tools[0].function.name: required (a non-empty string)");
  EXPECT_EQ(error_of(R"("tools": [{"type": "function", "function": {"name": 3}}])"),
            "tools[0].function.name: expected a string");
  EXPECT_EQ(error_of(R"("tools": [{"type": "code_interpreter"}])"),
            "tools[0].type: only 'function' tools are served, got 'code_interpreter'");
  EXPECT_EQ(error_of(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}])"),
            "tools[0].function.parameters: expected a JSON Schema object");
  EXPECT_EQ(error_of(R"("tools": [{"function": {"name": "f"}}, {"function": {"name": "f"}}])"),
            "tools[1].function.name: 'f' is given twice");
  EXPECT_EQ(error_of(weather_tools + R"(, "parallel_tool_calls": "yes")"), "parallel_tool_calls: expected a boolean");
  EXPECT_EQ(error_of(R"("functions": [{"name": "f"}])"),
            "functions: deprecated by OpenAI and not served; send tools and tool_choice");
}

bool admits(const output_constraint& c, const std::string& text) {
  grammar::json_options options;
  options.any_whitespace = c.any_whitespace;
  options.strict = c.strict;
  auto g = c.kind == output_constraint::structural ? grammar::structural_grammar(c.text, options)
                                                   : grammar::json_schema_grammar(c.text, options);
  if (!g) {
    ADD_FAILURE() << g.error_message();
    return false;
  }
  return grammar::grammar_accepts(*g, text);
}

// Reads `text` as the response would.
std::vector<tool_call> calls_in(const tool_request& r, std::optional<tool_parser_kind> parser,
                                const std::string& text) {
  std::optional<tool_call_stream> s = tool_stream_for(r, parser);
  EXPECT_TRUE(s.has_value());
  if (!s) return {};
  s->feed(text);
  s->finish();
  return s->calls();
}

struct forced_case {
  std::optional<tool_parser_kind> parser;
  std::string one, two;  // one call to get_weather; then get_weather and get_time
  std::string wrong;     // a call the constraint refuses
};

TEST(tool_request, forced_calls_are_the_parsers_syntax) {
  const std::vector<forced_case> cases = {
      {tool_parser_kind::hermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"},
      {tool_parser_kind::llama3_json, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; {\"name\": \"get_time\", \"parameters\": {}}",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 8}}"},
      {tool_parser_kind::mistral, "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}]",
       "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, {\"name\": \"get_time\", \"arguments\": {}}]",
       "[{\"name\": \"get_weather\", \"arguments\": {\"days\": 3}}]"},
      {std::nullopt, "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}]",
       "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}, {\"name\": \"get_time\", \"parameters\": {}}]",
       "[{\"name\": \"get_clock\", \"parameters\": {}}]"},
  };
  for (const forced_case& fc : cases) {
    SCOPED_TRACE(fc.parser ? tool_parser_name(*fc.parser) : "no parser");
    tool_request required = tools_of(weather_tools + R"(, "tool_choice": "required")");
    output_constraint c = forced_tool_constraint(required, fc.parser);
    EXPECT_EQ(c.kind, output_constraint::structural);
    EXPECT_FALSE(c.any_whitespace);
    EXPECT_TRUE(admits(c, fc.one));
    EXPECT_TRUE(admits(c, fc.two));
    EXPECT_FALSE(admits(c, fc.wrong));
    EXPECT_FALSE(admits(c, ""));
    ASSERT_EQ(calls_in(required, fc.parser, fc.two).size(), 2u);
    const std::vector<tool_call> one = calls_in(required, fc.parser, fc.one);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].name, "get_weather");
    EXPECT_EQ(one[0].arguments, "{\"city\": \"Paris\", \"days\": 3}");
    // Without parallel calls, and for a named function: one call.
    required.parallel = false;
    EXPECT_TRUE(admits(forced_tool_constraint(required, fc.parser), fc.one));
    EXPECT_FALSE(admits(forced_tool_constraint(required, fc.parser), fc.two));
    const tool_request named =
        tools_of(weather_tools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
    if (fc.parser) {
      EXPECT_TRUE(admits(forced_tool_constraint(named, fc.parser), fc.one));
      EXPECT_FALSE(admits(forced_tool_constraint(named, fc.parser), fc.two));
      EXPECT_EQ(calls_in(named, fc.parser, fc.one).size(), 1u);
    }
  }
  // A named function without a parser: its arguments alone (vLLM's).
  const tool_request named =
      tools_of(weather_tools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  const output_constraint c = forced_tool_constraint(named, std::nullopt);
  EXPECT_EQ(c.kind, output_constraint::json_schema);
  EXPECT_TRUE(admits(c, "{\"city\":\"Oslo\",\"days\":2}"));
  EXPECT_FALSE(admits(c, "{\"city\":\"Rome\"}"));
  const std::vector<tool_call> calls = calls_in(named, std::nullopt, "{\"city\":\"Oslo\"}");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, "{\"city\":\"Oslo\"}");
  // Not parsed: tool_choice none, and auto without a parser.
  EXPECT_FALSE(tool_stream_for(tools_of(weather_tools + R"(, "tool_choice": "none")"), tool_parser_kind::hermes));
  EXPECT_FALSE(tool_stream_for(tools_of(weather_tools), std::nullopt));
  EXPECT_TRUE(tool_stream_for(tools_of(weather_tools), tool_parser_kind::hermes));
}

}  // namespace
}  // namespace troupe
