#include "cli/bench/sse.h"

#include <algorithm>
#include <cctype>

namespace troupe::bench {

bool sse_splitter::event_data(std::string_view event, std::string& data) {
  bool any = false;
  size_t pos = 0;
  while (pos <= event.size()) {
    size_t nl = event.find('\n', pos);
    if (nl == std::string_view::npos) nl = event.size();
    std::string_view line = event.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.substr(0, 5) != "data:") continue;
    line.remove_prefix(5);
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (any) data += '\n';
    data.append(line);
    any = true;
  }
  return any;
}

namespace {

bool is_empty_value(simdjson::dom::element v) {
  if (v.is_null()) return true;
  std::string_view s;
  if (!v.get_string().get(s)) return s.empty();
  simdjson::dom::array a;
  if (!v.get_array().get(a)) return a.size() == 0;
  return false;
}

// A chat delta with the role and nothing else of substance.
bool role_only(simdjson::dom::object delta) {
  bool has_role = false;
  for (auto field : delta) {
    if (field.key == "role") has_role = true;
    else if (!is_empty_value(field.value)) return false;
  }
  return has_role;
}

void read_choice(simdjson::dom::element choice, stream_chunk& out) {
  std::string_view finish;
  if (!choice["finish_reason"].get_string().get(finish)) out.finish_reason = std::string(finish);
  simdjson::dom::array ids;
  if (!choice["token_ids"].get_array().get(ids)) out.num_token_ids = static_cast<int64_t>(ids.size());
  simdjson::dom::object delta;
  const bool preamble = !choice["delta"].get_object().get(delta) && role_only(delta) &&
                        out.finish_reason.empty() && out.num_token_ids <= 0;
  out.has_tokens = !preamble;
}

}  // namespace

stream_chunk parse_stream_chunk(simdjson::dom::parser& parser, std::string_view payload) {
  stream_chunk out;
  if (payload == "[DONE]") {
    out.done = true;
    return out;
  }
  simdjson::dom::element doc;
  if (parser.parse(payload.data(), payload.size()).get(doc) || !doc.is_object()) {
    out.invalid = true;
    return out;
  }
  simdjson::dom::element err;
  if (!doc["error"].get(err) && !err.is_null()) {
    out.error = error_body_message(parser, payload);
    return out;
  }
  simdjson::dom::array choices;
  if (!doc["choices"].get_array().get(choices) && choices.size() > 0) read_choice(choices.at(0), out);
  simdjson::dom::object usage;
  if (!doc["usage"].get_object().get(usage)) {
    int64_t v = 0;
    if (!usage["completion_tokens"].get_int64().get(v)) out.completion_tokens = v;
    if (!usage["prompt_tokens"].get_int64().get(v)) out.prompt_tokens = v;
  }
  return out;
}

std::string error_body_message(simdjson::dom::parser& parser, std::string_view body) {
  simdjson::dom::element doc;
  if (!parser.parse(body.data(), body.size()).get(doc)) {
    std::string_view msg;
    if (!doc["error"]["message"].get_string().get(msg)) return std::string(msg);
    if (!doc["error"].get_string().get(msg)) return std::string(msg);  // {"error": "..."}
    if (!doc["message"].get_string().get(msg)) return std::string(msg);
    if (!doc["detail"].get_string().get(msg)) return std::string(msg);  // FastAPI
  }
  size_t b = 0, e = body.size();
  while (b < e && std::isspace(static_cast<unsigned char>(body[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(body[e - 1]))) --e;
  return std::string(body.substr(b, std::min<size_t>(e - b, 300)));
}

}  // namespace troupe::bench
