// The tool-call parsers (net/tool_parser.h) on model texts written as the
// fixture templates and vLLM's parsers write and read them: content and
// calls, malformed and cut-off calls, and the stream read in every split:
// its content and argument fragments add up to the response's, each call's
// id and name come first, and text that may open a call is held back.
#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "net/tool_parser.h"

namespace troupe {
namespace {

struct parsed {
  std::optional<std::string> content;
  std::vector<tool_call> calls;
};

parsed parse_whole(tool_call_stream s, const std::string& text) {
  s.feed(text);
  s.finish();
  return {s.content(), s.calls()};
}

// What a stream sent, fed `text` in pieces of `piece` bytes.
struct streamed {
  std::string content;
  std::map<size_t, std::string> arguments, names, ids;
  std::vector<std::string> problems;
  parsed final;
};

streamed parse_streamed(tool_call_stream s, const std::string& text, size_t piece) {
  streamed out;
  const auto take = [&](const tool_stream_delta& d) {
    out.content += d.content;
    for (const tool_call_delta& c : d.calls) {
      if (!c.id.empty()) {
        if (out.ids.count(c.index) != 0) out.problems.push_back("second header for " + std::to_string(c.index));
        if (out.ids.size() != c.index) out.problems.push_back("header out of order");
        out.ids[c.index] = c.id;
        out.names[c.index] = c.name;
      } else if (out.ids.count(c.index) == 0) {
        out.problems.push_back("arguments before the header of " + std::to_string(c.index));
      }
      out.arguments[c.index] += c.arguments;
    }
  };
  for (size_t at = 0; at < text.size(); at += piece) take(s.feed(text.substr(at, piece)));
  take(s.finish());
  out.final = {s.content(), s.calls()};
  return out;
}

// Every split gives the same calls as the whole text, with the stream's
// fragments adding up to them.
void expect_stream_agrees(const std::function<tool_call_stream()>& make, const std::string& text) {
  const parsed whole = parse_whole(make(), text);
  for (size_t piece = 1; piece <= text.size(); ++piece) {
    SCOPED_TRACE("piece " + std::to_string(piece));
    streamed s = parse_streamed(make(), text, piece);
    EXPECT_TRUE(s.problems.empty()) << s.problems.front();
    ASSERT_EQ(s.final.calls.size(), whole.calls.size());
    EXPECT_EQ(s.final.content, whole.content);
    for (size_t i = 0; i < whole.calls.size(); ++i) {
      EXPECT_EQ(s.names[i], whole.calls[i].name);
      EXPECT_EQ(s.ids[i], s.final.calls[i].id);
      EXPECT_EQ(s.arguments[i], whole.calls[i].arguments);
    }
    if (!whole.calls.empty()) EXPECT_EQ(s.content, whole.content.value_or(""));
    else EXPECT_EQ(s.content, text);  // no calls: all of it went out as content
  }
}

const std::string hermes_two =
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
    "\"days\": [1, 2], \"note\": \"a } in \\\"text\\\"\"}}\n</tool_call>\n<tool_call>\n"
    "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";

TEST(tool_parser, hermes_content_then_calls) {
  const parsed p = parse_whole(tool_call_stream::parsing(tool_parser_kind::hermes, true), hermes_two);
  EXPECT_EQ(p.content, "Let me check.\n");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city": "Paris", "days": [1, 2], "note": "a } in \"text\""})");
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  EXPECT_EQ(p.calls[0].id.substr(0, 5), "call_");
  EXPECT_EQ(p.calls[0].id.size(), 29u);
  EXPECT_NE(p.calls[0].id, p.calls[1].id);
  expect_stream_agrees([] { return tool_call_stream::parsing(tool_parser_kind::hermes, true); }, hermes_two);
}

TEST(tool_parser, hermes_only_the_first_call_without_parallel_calls) {
  const parsed p = parse_whole(tool_call_stream::parsing(tool_parser_kind::hermes, false), hermes_two);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  expect_stream_agrees([] { return tool_call_stream::parsing(tool_parser_kind::hermes, false); }, hermes_two);
}

TEST(tool_parser, no_call_is_content) {
  for (const std::string text : {"Plain answer, with <tool and { braces }.", "", "<tool_call", "{\"name\": 1}"}) {
    const parsed p = parse_whole(tool_call_stream::parsing(tool_parser_kind::hermes, true), text);
    EXPECT_TRUE(p.calls.empty());
    EXPECT_EQ(p.content, text);
    expect_stream_agrees([] { return tool_call_stream::parsing(tool_parser_kind::hermes, true); }, text);
  }
}

TEST(tool_parser, malformed_or_cut_calls_leave_the_whole_text_as_content) {
  for (const std::string text : {
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}",   // cut off
           "<tool_call>\n{\"arguments\": {\"a\": 1}}\n</tool_call>",     // no name
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}", // bad JSON inside
           "<tool_call>\n{\"name\": \"f\" \"arguments\": {}}",            // no comma
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {]}}"}) {
    SCOPED_TRACE(text);
    const parsed p = parse_whole(tool_call_stream::parsing(tool_parser_kind::hermes, true), text);
    EXPECT_TRUE(p.calls.empty());
    EXPECT_EQ(p.content, text);
    // The stream sends the whole text as content too (besides the header
    // it may have sent for the call that then failed).
    for (size_t piece : {size_t{1}, size_t{5}, text.size()}) {
      streamed s = parse_streamed(tool_call_stream::parsing(tool_parser_kind::hermes, true), text, piece);
      EXPECT_EQ(s.content, text);
      EXPECT_EQ(s.final.content, text);
    }
  }
  // A marker and then no call: content, streamed and not.
  for (const std::string text : {"Hi <tool_call> hello", "Hi <tool_call>{bad}", "<tool_call>", "Hi <tool_call>\n"}) {
    SCOPED_TRACE(text);
    expect_stream_agrees([] { return tool_call_stream::parsing(tool_parser_kind::hermes, true); }, text);
  }
  for (const std::string text : {"<|python_tag|>brave_search.call(query=\"x\")", "<|python_tag|>{bad}"}) {
    expect_stream_agrees([] { return tool_call_stream::parsing(tool_parser_kind::llama3_json, true); }, text);
  }
  expect_stream_agrees([] { return tool_call_stream::parsing(tool_parser_kind::mistral, true); },
                       "[TOOL_CALLS] nope");
}

TEST(tool_parser, calls_that_completed_are_kept_when_a_later_one_is_not) {
  for (const std::string text : {"{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"para",
                                 "{\"name\": \"f\"}{", "{\"name\": \"f\", \"parameters\": {}} and more"}) {
    SCOPED_TRACE(text);
    const parsed p = parse_whole(tool_call_stream::parsing(tool_parser_kind::llama3_json, true), text);
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].name, "f");
    EXPECT_EQ(p.calls[0].arguments, "{}");
    EXPECT_EQ(p.content, std::nullopt);
    for (size_t piece = 1; piece <= text.size(); ++piece) {
      streamed s = parse_streamed(tool_call_stream::parsing(tool_parser_kind::llama3_json, true), text, piece);
      EXPECT_EQ(s.content, "");
      EXPECT_EQ(s.names[0], "f");
      EXPECT_EQ(s.arguments[0], "{}");
      ASSERT_EQ(s.final.calls.size(), 1u);
    }
  }
}

TEST(tool_parser, a_possible_marker_is_held_back_until_it_is_not) {
  tool_call_stream s = tool_call_stream::parsing(tool_parser_kind::hermes, true);
  EXPECT_EQ(s.feed("Hi <tool_").content, "Hi ");
  EXPECT_EQ(s.feed("box>").content, "<tool_box>");
  EXPECT_EQ(s.feed(" <").content, " ");
  const tool_stream_delta d = s.feed("tool_call>{\"name\": \"f\"");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "f");
  EXPECT_EQ(s.feed(", \"arguments\": {\"x\": ").calls.at(0).arguments, "{\"x\": ");
  EXPECT_EQ(s.feed("12").calls.at(0).arguments, "12");
  EXPECT_EQ(s.feed("3}}").calls.at(0).arguments, "3}");
  s.finish();
  ASSERT_EQ(s.calls().size(), 1u);
  EXPECT_EQ(s.calls()[0].arguments, "{\"x\": 123}");
  EXPECT_EQ(s.content(), "Hi <tool_box> ");
  // Arguments that are a bare scalar go out once they end.
  tool_call_stream t = tool_call_stream::forced(tool_parser_kind::hermes, true);
  t.feed("<tool_call>{\"name\": \"f\", \"arguments\": ");
  EXPECT_TRUE(t.feed("12").calls.empty());
  EXPECT_EQ(t.feed("3}").calls.at(0).arguments, "123");
}

TEST(tool_parser, the_name_after_the_arguments) {
  const std::string text = "<tool_call>{\"arguments\": {\"q\": \"x\"}, \"name\": \"search\"}</tool_call>";
  const parsed p = parse_whole(tool_call_stream::parsing(tool_parser_kind::hermes, true), text);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "search");
  EXPECT_EQ(p.calls[0].arguments, "{\"q\": \"x\"}");
  expect_stream_agrees([] { return tool_call_stream::parsing(tool_parser_kind::hermes, true); }, text);
}

TEST(tool_parser, llama3_json) {
  const std::string text =
      "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; "
      "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}}";
  const parsed p = parse_whole(tool_call_stream::parsing(tool_parser_kind::llama3_json, true), text);
  EXPECT_EQ(p.content, std::nullopt);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1].arguments, "{\"tz\": \"CET\"}");
  expect_stream_agrees([] { return tool_call_stream::parsing(tool_parser_kind::llama3_json, true); }, text);
  const std::string bare = " {\"name\": \"f\", \"parameters\": {}}";
  EXPECT_EQ(parse_whole(tool_call_stream::parsing(tool_parser_kind::llama3_json, true), bare).calls.size(), 1u);
  // Text that does not start with a call is content, braces or not.
  const std::string prose = "Sure: {\"name\": \"f\", \"parameters\": {}}";
  const parsed q = parse_whole(tool_call_stream::parsing(tool_parser_kind::llama3_json, true), prose);
  EXPECT_TRUE(q.calls.empty());
  EXPECT_EQ(q.content, prose);
  expect_stream_agrees([] { return tool_call_stream::parsing(tool_parser_kind::llama3_json, true); }, prose);
}

TEST(tool_parser, mistral) {
  const std::string text =
      "Calling.[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"n\": 1}}, {\"name\": \"b\", \"arguments\": {}}]";
  const parsed p = parse_whole(tool_call_stream::parsing(tool_parser_kind::mistral, true), text);
  EXPECT_EQ(p.content, "Calling.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments, "{\"n\": 1}");
  EXPECT_EQ(p.calls[0].id.size(), 9u);  // Mistral's templates want 9 alphanumerics
  expect_stream_agrees([] { return tool_call_stream::parsing(tool_parser_kind::mistral, true); }, text);
}

TEST(tool_parser, forced_forms) {
  // vLLM's form without a parser: a JSON array of {"name", "parameters"}.
  const std::string array = "[{\"name\": \"a\", \"parameters\": {\"x\": [1, {\"y\": null}]}}, {\"name\": \"b\", "
                            "\"parameters\": {}}]";
  const parsed p = parse_whole(tool_call_stream::forced(std::nullopt, true), array);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments, "{\"x\": [1, {\"y\": null}]}");
  EXPECT_EQ(p.content, std::nullopt);
  expect_stream_agrees([] { return tool_call_stream::forced(std::nullopt, true); }, array);
  // A parser's syntax from the first byte.
  const std::string hermes = "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": \"v\"}}\n</tool_call>";
  EXPECT_EQ(parse_whole(tool_call_stream::forced(tool_parser_kind::hermes, true), hermes).calls.size(), 1u);
  // A named function without a parser: the arguments alone.
  const parsed named = parse_whole(tool_call_stream::arguments_of("lookup"), "{\"id\": 7}");
  ASSERT_EQ(named.calls.size(), 1u);
  EXPECT_EQ(named.calls[0].name, "lookup");
  EXPECT_EQ(named.calls[0].arguments, "{\"id\": 7}");
  expect_stream_agrees([] { return tool_call_stream::arguments_of("lookup"); }, "{\"id\": 7}");
  const parsed cut = parse_whole(tool_call_stream::arguments_of("lookup"), "{\"id\": ");
  EXPECT_TRUE(cut.calls.empty());
  EXPECT_EQ(cut.content, "{\"id\": ");
}

TEST(tool_parser, names_and_detection) {
  for (tool_parser_kind k : {tool_parser_kind::hermes, tool_parser_kind::llama3_json, tool_parser_kind::mistral}) {
    EXPECT_EQ(tool_parser_by_name(tool_parser_name(k)), k);
  }
  EXPECT_EQ(tool_parser_by_name("pythonic"), std::nullopt);
  EXPECT_EQ(detect_tool_parser("{{ '<tool_call>\\n' }}"), tool_parser_kind::hermes);
  EXPECT_EQ(detect_tool_parser("{{ '[TOOL_CALLS] [' }}"), tool_parser_kind::mistral);
  EXPECT_EQ(detect_tool_parser("{{ '\"parameters\": ' + '<|eot_id|>' }}"), tool_parser_kind::llama3_json);
  EXPECT_EQ(detect_tool_parser("{{ '\"parameters\": ' }}"), std::nullopt);
  EXPECT_EQ(detect_tool_parser("{{ messages[0].content }}"), std::nullopt);
}

}  // namespace
}  // namespace troupe
