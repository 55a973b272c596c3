// The request parser and the response builder on their own (no server):
// typed fields, every accepted prompt shape, type errors naming the field,
// and the generation's SSE framing and usage arithmetic.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <limits>

#include "net/generation.h"
#include "net/openai_request.h"
#include "net/routes.h"
#include "net/prometheus.h"

namespace troupe {
namespace {

template <class T>
const T& ok(const parse_result<T>& r) {
  if (const auto* e = std::get_if<api_error>(&r)) ADD_FAILURE() << e->message;
  return std::get<T>(r);
}

template <class T>
std::string err(const parse_result<T>& r) {
  const auto* e = std::get_if<api_error>(&r);
  return e == nullptr ? "(parsed)" : e->message;
}

TEST(openai_request, completion_fields) {
  auto parsed = parse_completion_request(
      R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":5,)"
      R"("min_p":0.1,"seed":3,"n":2,"stop":"x","stop_token_ids":[4],"ignore_eos":true,)"
      R"("presence_penalty":0.2,"frequency_penalty":0.3,"repetition_penalty":1.1,"logprobs":2,)"
      R"("stream":true,"stream_options":{"include_usage":true},"return_token_ids":true})");
  if (std::holds_alternative<api_error>(parsed)) FAIL() << err(parsed);
  const completion_request& r = std::get<completion_request>(parsed);
  EXPECT_EQ(r.common.model, "m");
  EXPECT_TRUE(r.prompt_is_text);
  EXPECT_EQ(r.text_prompts, std::vector<std::string>{"hi"});
  EXPECT_EQ(r.common.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.common.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.common.params.top_p, 0.9f);
  EXPECT_EQ(r.common.params.top_k, 5);
  EXPECT_FLOAT_EQ(r.common.params.min_p, 0.1f);
  EXPECT_TRUE(r.common.params.has_seed);
  EXPECT_EQ(r.common.params.seed, 3);
  EXPECT_EQ(r.common.params.n, 2);
  EXPECT_EQ(r.common.params.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.common.params.stop_token_ids, std::vector<int32_t>{4});
  EXPECT_TRUE(r.common.params.ignore_eos);
  EXPECT_FLOAT_EQ(r.common.params.repetition_penalty, 1.1f);
  EXPECT_EQ(r.common.params.logprobs, 2);
  EXPECT_TRUE(r.common.stream);
  EXPECT_TRUE(r.common.include_usage);
  EXPECT_TRUE(r.common.return_token_ids);
}

TEST(openai_request, prompt_shapes) {
  EXPECT_EQ(ok(parse_completion_request(R"({"prompt":["a","b"]})")).text_prompts.size(), 2u);
  const auto ids = ok(parse_completion_request(R"({"prompt":[1,2,3]})"));
  EXPECT_FALSE(ids.prompt_is_text);
  EXPECT_EQ(ids.id_prompts, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(ok(parse_completion_request(R"({"prompt":[[1],[2,3]]})")).id_prompts,
            (std::vector<std::vector<int32_t>>{{1}, {2, 3}}));
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1,"a"]})")).substr(0, 16), "prompt: expected");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[]})")), "prompt: must not be empty");
  EXPECT_EQ(err(parse_completion_request(R"({"max_tokens":3})")), "prompt: required");
}

TEST(openai_request, type_errors_name_the_field) {
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"max_tokens":1.5})")), "max_tokens: expected an integer");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"stop":[1]})")), "stop: expected a string or a list of strings");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"n":99999999999})")), "n: 99999999999 is out of range");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"stream_options":{"include_usage":true}})")),
            "stream_options: only allowed when stream is true");
  EXPECT_EQ(err(parse_chat_request(R"({"messages":[],"top_logprobs":2})")), "top_logprobs: requires logprobs to be true");
  EXPECT_EQ(err(parse_chat_request(R"({"model":"m"})")), "messages: required");
  EXPECT_EQ(err(parse_chat_request(R"({"messages":[],"tool_choice":"auto"})")),
            "tool_choice: needs tools (a non-empty list of functions)");
  // null means absent.
  EXPECT_FALSE(ok(parse_completion_request(R"({"prompt":[1],"max_tokens":null})")).common.max_tokens.has_value());
}

TEST(openai_request, structured_output_fields) {
  const auto constraint = [](const std::string& extra) {
    return ok(parse_completion_request(R"({"prompt":[1],)" + extra + "}")).common.params.structured;
  };
  output_constraint c = constraint(
      R"("response_format":{"type":"json_schema","json_schema":{"name":"w","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}}}}})");
  EXPECT_EQ(c.kind, output_constraint::json_schema);
  EXPECT_TRUE(c.strict);
  EXPECT_EQ(c.text, R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  EXPECT_EQ(constraint(R"("response_format":{"type":"json_object"})").kind, output_constraint::json_object);
  EXPECT_EQ(constraint(R"("response_format":{"type":"text"})").kind, output_constraint::none);
  EXPECT_EQ(constraint(R"("guided_json":"{\"type\":\"string\"}")").text, R"({"type":"string"})");
  c = constraint(R"("guided_choice":["yes","no"],"guided_decoding_backend":"xgrammar")");
  EXPECT_EQ(c.kind, output_constraint::choice);
  EXPECT_EQ(c.choices, (std::vector<std::string>{"yes", "no"}));
  c = constraint(R"("structured_outputs":{"regex":"[0-9]+","disable_any_whitespace":true})");
  EXPECT_EQ(c.kind, output_constraint::regex);
  EXPECT_EQ(c.text, "[0-9]+");
  EXPECT_FALSE(c.any_whitespace);
  EXPECT_EQ(constraint(R"("guided_grammar":"root ::= \"a\"")").kind, output_constraint::ebnf);
  EXPECT_EQ(ok(parse_chat_request(R"({"messages":[],"response_format":{"type":"json_object"}})")).common.params.structured.kind,
            output_constraint::json_object);

  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"guided_regex":"a","guided_choice":["a"]})")),
            "guided_regex, guided_choice: only one output constraint may be given");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"response_format":{"type":"xml"}})")),
            "response_format.type: must be 'text', 'json_object' or 'json_schema', got 'xml'");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"response_format":{"type":"json_schema"}})")),
            "response_format.json_schema: required (an object with name and schema)");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"guided_choice":[]})")), "guided_choice: must not be empty");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"guided_regex":5})")), "guided_regex: expected a string");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"structured_outputs":{"regex":"a","choice":["a"]}})")),
            "structured_outputs: give exactly one of json, regex, choice, grammar, json_object");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"structured_outputs":{"jsn":{}}})")),
            "structured_outputs.jsn: unknown field");
  EXPECT_NE(err(parse_completion_request(R"({"prompt":[1],"guided_whitespace_pattern":" "})")).find("not supported"),
            std::string::npos);
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"guided_regexp":"a"})")),
            "guided_regexp: unknown field (did you mean 'guided_regex'?)");
}

// Found by tests/fuzz: an integral double beyond int64_t (and a uint64) was
// cast to int64_t, which is undefined behaviour; token ids beyond int32_t
// wrapped onto other ids (2^32 + 1 became token 1).
TEST(openai_request, integers_beyond_their_type_are_out_of_range) {
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"max_tokens":18446744073709551615})")),
            "max_tokens: 18446744073709551615 is out of range");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"seed":1e300})")), "seed: 1e+300 is out of range");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"seed":9223372036854775808.0})")),
            "seed: 9.22337e+18 is out of range");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"top_k":-1e19})")), "top_k: -1e+19 is out of range");
  EXPECT_EQ(ok(parse_completion_request(R"({"prompt":[1],"seed":-9223372036854775808.0})")).common.params.seed,
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[4294967297]})")), "prompt: token id 4294967297 is out of range");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[[1],[-2147483649]]})")),
            "prompt: token id -2147483649 is out of range");
  EXPECT_EQ(err(parse_completion_request(R"({"prompt":[1],"stop_token_ids":[4294967296]})")),
            "stop_token_ids: token id 4294967296 is out of range");
  EXPECT_EQ(err(parse_detokenize_request(R"({"tokens":[4294967297]})")), "tokens: token id 4294967297 is out of range");
  EXPECT_EQ(ok(parse_detokenize_request(R"({"tokens":[2147483647,-2147483648]})")).tokens,
            (std::vector<int32_t>{2147483647, -2147483648}));
}

TEST(openai_request, chat_max_completion_tokens_and_logprobs) {
  const chat_request r = ok(parse_chat_request(
      R"({"messages":[],"max_tokens":5,"max_completion_tokens":9,"logprobs":true,"top_logprobs":3})"));
  EXPECT_EQ(r.common.max_tokens, 9);
  EXPECT_EQ(r.common.params.logprobs, 3);
}

generation_context two_choice_context(bool stream) {
  generation_context ctx;
  ctx.kind = generation_kind::chat;
  ctx.id = "chatcmpl-x";
  ctx.model = "m";
  ctx.stream = stream;
  ctx.include_usage = true;
  ctx.choice_prompt_ids = {{1, 2, 3}, {1, 2, 3}};
  ctx.choice_counts_prompt = {true, false};
  return ctx;
}

request_output output(std::vector<int32_t> ids, finish_reason f) {
  request_output o;
  o.new_token_ids = std::move(ids);
  o.finish = f;
  return o;
}

TEST(generation, usage_counts_prompt_once_per_prompt) {
  generation g(two_choice_context(false));
  g.on_output(0, output({5, 6}, finish_reason::none));
  g.on_output(1, output({7}, finish_reason::length));
  EXPECT_FALSE(g.done());
  g.on_output(0, output({8}, finish_reason::stop));
  ASSERT_TRUE(g.done());
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(g.response_body());
  EXPECT_EQ(int64_t(doc["usage"]["prompt_tokens"]), 3);
  EXPECT_EQ(int64_t(doc["usage"]["completion_tokens"]), 4);
  EXPECT_EQ(std::string_view(doc["choices"].at(0)["finish_reason"]), "stop");
  EXPECT_EQ(std::string_view(doc["choices"].at(1)["finish_reason"]), "length");
}

TEST(generation, stream_ends_with_usage_then_done) {
  generation g(two_choice_context(true));
  const std::string start = g.stream_start();
  EXPECT_EQ(std::count(start.begin(), start.end(), '\n'), 4);  // two role frames
  EXPECT_NE(start.find(R"("role":"assistant")"), std::string::npos);
  EXPECT_EQ(g.on_output(0, output({5}, finish_reason::length)).find("[DONE]"), std::string::npos);
  const std::string last = g.on_output(1, output({6}, finish_reason::length));
  const size_t usage = last.find(R"("choices":[],"usage")");
  ASSERT_NE(usage, std::string::npos) << last;
  EXPECT_EQ(last.substr(last.size() - 14), "data: [DONE]\n\n");
  EXPECT_LT(usage, last.find("[DONE]"));
}


token_logprobs lp(int32_t id, float logprob, std::vector<int32_t> top = {}, std::vector<float> top_lp = {}) {
  token_logprobs x;
  x.token_id = id;
  x.logprob = logprob;
  x.rank = 1;
  x.top_ids = std::move(top);
  x.top_logprobs = std::move(top_lp);
  return x;
}

generation_context echo_context(bool stream) {
  generation_context ctx;
  ctx.kind = generation_kind::completion;
  ctx.id = "cmpl-x";
  ctx.model = "m";
  ctx.stream = stream;
  ctx.want_logprobs = true;
  ctx.echo = true;
  ctx.return_prompt_logprobs = !stream;
  ctx.choice_prompt_ids = {{1, 2, 3}};
  ctx.choice_counts_prompt = {true};
  ctx.choice_prompt_text = {"abc"};
  return ctx;
}

// Prompt logprobs arrive first (positions 1 and 2), then the sampled token.
std::vector<request_output> echo_outputs() {
  request_output prefill;
  prefill.prompt_logprobs = {lp(2, -1.5f, {9}, {-0.5f}), lp(3, -2.5f, {3}, {-2.5f})};
  request_output last = output({4}, finish_reason::length);
  last.logprobs = {lp(4, -0.25f, {4}, {-0.25f})};
  last.text = "d";
  return {prefill, last};
}

TEST(generation, echo_puts_the_prompt_and_its_logprobs_first) {
  generation g(echo_context(false));
  for (const request_output& o : echo_outputs()) g.on_output(0, o);
  ASSERT_TRUE(g.done());
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(g.response_body());
  simdjson::dom::element choice = doc["choices"].at(0);
  EXPECT_EQ(std::string_view(choice["text"]), "abcd");
  simdjson::dom::element lps = choice["logprobs"];
  EXPECT_EQ(lps["tokens"].get_array().size(), 4u);  // 3 prompt tokens + 1 generated
  EXPECT_TRUE(lps["token_logprobs"].at(0).is_null());
  EXPECT_DOUBLE_EQ(double(lps["token_logprobs"].at(1)), -1.5);
  EXPECT_DOUBLE_EQ(double(lps["token_logprobs"].at(3)), -0.25);
  EXPECT_TRUE(lps["top_logprobs"].at(0).is_null());
  // The chosen token and the top 1: two entries when they differ, one when not.
  EXPECT_EQ(lps["top_logprobs"].at(1).get_object().size(), 2u);
  EXPECT_EQ(lps["top_logprobs"].at(2).get_object().size(), 1u);
  EXPECT_EQ(lps["text_offset"].get_array().size(), 4u);
  // vLLM's prompt_logprobs: null for the first token, then {id: {logprob, rank, decoded_token}}.
  simdjson::dom::element plp = choice["prompt_logprobs"];
  ASSERT_EQ(plp.get_array().size(), 3u);
  EXPECT_TRUE(plp.at(0).is_null());
  EXPECT_DOUBLE_EQ(double(plp.at(1)["2"]["logprob"]), -1.5);
  EXPECT_EQ(int64_t(plp.at(1)["2"]["rank"]), 1);
  EXPECT_DOUBLE_EQ(double(plp.at(1)["9"]["logprob"]), -0.5);
}

TEST(generation, streamed_echo_sends_the_prompt_with_the_first_chunk) {
  generation g(echo_context(true));
  std::string sse = g.stream_start();
  for (const request_output& o : echo_outputs()) sse += g.on_output(0, o);
  const size_t first = sse.find("data: ");
  ASSERT_NE(first, std::string::npos);
  simdjson::dom::parser parser;
  const std::string json = sse.substr(first + 6, sse.find("\n\n", first) - first - 6);
  simdjson::dom::element doc = parser.parse(json);
  EXPECT_EQ(std::string_view(doc["choices"].at(0)["text"]), "abcd");
  EXPECT_EQ(doc["choices"].at(0)["logprobs"]["tokens"].get_array().size(), 4u);
  EXPECT_NE(sse.find("data: [DONE]"), std::string::npos);
}

TEST(prometheus, histograms_are_cumulative_with_vllm_names) {
  request_metrics m(100);
  m.observe_first_token(0.003);
  m.observe_first_token(0.05);
  m.observe_first_token(5000);  // beyond the last bound: only +Inf
  m.observe_finished(finish_reason::length, 1.2, 10, 20);
  m.observe_finished(finish_reason::abort, 0.1, 5, 0);
  engine_stats s;
  s.num_blocks_total = 11;
  s.num_blocks_free = 6;  // 4 of 10 usable blocks in use (the null block is never free)
  s.num_running = 2;
  s.num_blocks_swapped_out = 3;
  s.num_blocks_swapped_in = 2;
  s.kv_bytes_per_block = 4096;
  s.preempted_seconds = 1.5;
  const std::string page = render_prometheus("my \"model\"", s, m.snapshot());
  const auto has = [&page](const std::string& line) {
    return page.find(line + "\n") != std::string::npos;
  };
  const std::string labels = R"(model_name="my \"model\"")";
  EXPECT_TRUE(has("# TYPE troupe:time_to_first_token_seconds histogram")) << page;
  EXPECT_TRUE(has("troupe:time_to_first_token_seconds_bucket{" + labels + R"(,le="0.001"} 0)")) << page;
  EXPECT_TRUE(has("troupe:time_to_first_token_seconds_bucket{" + labels + R"(,le="0.005"} 1)")) << page;
  EXPECT_TRUE(has("troupe:time_to_first_token_seconds_bucket{" + labels + R"(,le="2560"} 2)")) << page;
  EXPECT_TRUE(has("troupe:time_to_first_token_seconds_bucket{" + labels + R"(,le="+Inf"} 3)")) << page;
  EXPECT_TRUE(has("troupe:time_to_first_token_seconds_count{" + labels + "} 3")) << page;
  EXPECT_TRUE(has("troupe:request_success_total{" + labels + R"(,finished_reason="length"} 1)")) << page;
  EXPECT_TRUE(has("troupe:request_success_total{" + labels + R"(,finished_reason="abort"} 1)")) << page;
  EXPECT_TRUE(has("troupe:request_success_total{" + labels + R"(,finished_reason="stop"} 0)")) << page;
  EXPECT_TRUE(has("troupe:request_generation_tokens_sum{" + labels + "} 20")) << page;
  // 1-2-5 buckets up to max_model_len.
  EXPECT_TRUE(has("troupe:request_prompt_tokens_bucket{" + labels + R"(,le="100"} 2)")) << page;
  EXPECT_EQ(page.find(R"(le="200")"), std::string::npos) << page;
  EXPECT_TRUE(has("troupe:kv_cache_usage_perc{" + labels + "} 0.4")) << page;
  EXPECT_TRUE(has("troupe:num_requests_running{" + labels + "} 2")) << page;
  EXPECT_TRUE(has("# TYPE troupe:num_preemptions_total counter")) << page;
  EXPECT_TRUE(has("# TYPE troupe:num_preempted_tokens_recomputed_total counter")) << page;
  EXPECT_TRUE(has("# TYPE troupe:num_swap_outs_total counter")) << page;
  EXPECT_TRUE(has("troupe:kv_swap_out_bytes_total{" + labels + "} 12288")) << page;
  EXPECT_TRUE(has("troupe:kv_swap_in_bytes_total{" + labels + "} 8192")) << page;
  EXPECT_TRUE(has("troupe:preempted_seconds_total{" + labels + "} 1.5")) << page;
}

// An idle engine's stats: 10 usable blocks free (and the null block).
engine_stats idle_stats() {
  engine_stats s;
  s.num_blocks_total = 11;
  s.num_blocks_free = 10;
  return s;
}

// Speculative decoding's counters (vLLM's names), present from the start
// when it is on (per position, one sample each) and absent when it is off.
TEST(prometheus, spec_decode_counters_when_speculation_is_on) {
  request_metrics m(100);
  engine_stats s = idle_stats();
  EXPECT_EQ(render_prometheus("m", s, m.snapshot()).find("spec_decode"), std::string::npos);
  s.spec_num_drafts = 7;
  s.spec_num_draft_tokens = 20;
  s.spec_num_accepted_tokens = 12;
  s.spec_accepted_per_pos = {6, 4, 2, 0};
  const std::string page = render_prometheus("m", s, m.snapshot());
  const auto has = [&page](const std::string& line) {
    return page.find(line + "\n") != std::string::npos;
  };
  EXPECT_TRUE(has("# TYPE troupe:spec_decode_num_drafts_total counter")) << page;
  EXPECT_TRUE(has(R"(troupe:spec_decode_num_drafts_total{model_name="m"} 7)")) << page;
  EXPECT_TRUE(has(R"(troupe:spec_decode_num_draft_tokens_total{model_name="m"} 20)")) << page;
  EXPECT_TRUE(has(R"(troupe:spec_decode_num_accepted_tokens_total{model_name="m"} 12)")) << page;
  EXPECT_TRUE(has(R"(troupe:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 6)"))
      << page;
  EXPECT_TRUE(has(R"(troupe:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="3"} 0)"))
      << page;
}

// The cache's configuration (vLLM's cache_config_info) in the labels,
// value 1; absent without a block size (stats from no scheduler).
TEST(prometheus, cache_config_info_names_the_cache) {
  request_metrics m(100);
  engine_stats s = idle_stats();
  EXPECT_EQ(render_prometheus("m", s, m.snapshot()).find("cache_config_info"), std::string::npos);
  s.block_size = 16;
  s.kv_cache_dtype = "fp8_e4m3";
  s.enable_prefix_caching = true;
  s.num_cpu_blocks_total = 3;
  const std::string page = render_prometheus("m", s, m.snapshot());
  EXPECT_NE(page.find("# TYPE troupe:cache_config_info gauge\n"), std::string::npos) << page;
  EXPECT_NE(page.find(R"(troupe:cache_config_info{model_name="m",block_size="16",cache_dtype="fp8_e4m3",)"
                      R"(enable_prefix_caching="True",num_cpu_blocks="3",num_gpu_blocks="11"} 1)"),
            std::string::npos)
      << page;
}

// LoRA's gauge (vLLM's lora_requests_info): the adapters by name in its
// labels, quoted names escaped, absent without LoRA.
TEST(prometheus, lora_requests_info_when_lora_is_on) {
  request_metrics m(100);
  engine_stats s = idle_stats();
  EXPECT_EQ(render_prometheus("m", s, m.snapshot()).find("lora"), std::string::npos);
  s.max_loras = 4;
  s.running_lora_ids = {1, 3};
  s.waiting_lora_ids = {2};
  const std::string page = render_prometheus("m", s, m.snapshot(), {{1, "sql"}, {2, "po\"et"}, {3, "chat"}});
  EXPECT_NE(page.find("# TYPE troupe:lora_requests_info gauge\n"), std::string::npos) << page;
  EXPECT_NE(page.find(R"(troupe:lora_requests_info{model_name="m",max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters="po\"et"} )"),
            std::string::npos)
      << page;
}

TEST(routes, api_keys_compare_whole_and_exact) {
  EXPECT_TRUE(constant_time_equals("Bearer secret", "Bearer secret"));
  EXPECT_TRUE(constant_time_equals("", ""));
  EXPECT_FALSE(constant_time_equals("Bearer secreT", "Bearer secret"));
  EXPECT_FALSE(constant_time_equals("Bearer secret", "Bearer secret2"));
  EXPECT_FALSE(constant_time_equals("Bearer secret2", "Bearer secret"));
  EXPECT_FALSE(constant_time_equals("", "Bearer secret"));
  EXPECT_FALSE(constant_time_equals(std::string_view("a\0", 2), "a"));
}

}  // namespace
}  // namespace troupe
