#include "net/tool_parser.h"

#include <simdjson.h>

#include <random>

namespace troupe {

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The longest suffix of `text` that is a proper prefix of `word`.
size_t partial_suffix(std::string_view text, std::string_view word) {
  for (size_t n = std::min(text.size(), word.empty() ? 0 : word.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == word.substr(0, n)) return n;
  }
  return 0;
}

// Whether `rest` may still grow into one of `words` (and is not one yet).
bool may_become(std::string_view rest, const std::vector<std::string>& words) {
  for (const std::string& w : words) {
    if (rest.size() < w.size() && std::string_view(w).substr(0, rest.size()) == rest) return true;
  }
  return false;
}

simdjson::dom::parser& json_parser() {
  thread_local simdjson::dom::parser parser;
  return parser;
}

bool is_json(std::string_view text) {
  simdjson::dom::element e;
  return json_parser().parse(text.data(), text.size()).get(e) == simdjson::SUCCESS;
}

// A JSON string literal's value, or nullopt when `quoted` is not one.
std::optional<std::string> json_string(std::string_view quoted) {
  std::string_view s;
  if (json_parser().parse(quoted.data(), quoted.size()).get_string().get(s) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  return std::string(s);
}

tool_call_delta& delta_for(tool_stream_delta& out, size_t index) {
  if (out.calls.empty() || out.calls.back().index != index) out.calls.push_back({index, "", "", ""});
  return out.calls.back();
}

bool is_arguments_key(std::string_view key) { return key == "arguments" || key == "parameters"; }

}  // namespace

std::optional<tool_parser_kind> tool_parser_by_name(std::string_view name) {
  if (name == "hermes") return tool_parser_kind::hermes;
  if (name == "llama3_json") return tool_parser_kind::llama3_json;
  if (name == "mistral") return tool_parser_kind::mistral;
  return std::nullopt;
}

const char* tool_parser_name(tool_parser_kind kind) {
  switch (kind) {
    case tool_parser_kind::hermes: return "hermes";
    case tool_parser_kind::llama3_json: return "llama3_json";
    case tool_parser_kind::mistral: return "mistral";
  }
  return "";
}

std::optional<tool_parser_kind> detect_tool_parser(std::string_view chat_template) {
  if (chat_template.find("<tool_call>") != std::string_view::npos) return tool_parser_kind::hermes;
  if (chat_template.find("[TOOL_CALLS]") != std::string_view::npos) return tool_parser_kind::mistral;
  if (chat_template.find("<|python_tag|>") != std::string_view::npos ||
      (chat_template.find("\"parameters\"") != std::string_view::npos &&
       chat_template.find("<|eot_id|>") != std::string_view::npos)) {
    return tool_parser_kind::llama3_json;
  }
  return std::nullopt;
}

// Each syntax once: how it is read, and how a forced call is written.
const tool_call_syntax& tool_call_syntax_of(std::optional<tool_parser_kind> kind) {
  static const tool_call_syntax vllm_json{"", false, {"[", ",", "]"}, false,
                                          "[", "{\"name\": ", ", \"parameters\": ", "}", ", ", "]"};
  static const tool_call_syntax hermes{"<tool_call>", false, {"<tool_call>", "</tool_call>"}, false,
                                       "", "<tool_call>\n{\"name\": ", ", \"arguments\": ", "}\n</tool_call>",
                                       "\n", ""};
  static const tool_call_syntax llama3_json{"<|python_tag|>", true, {";"}, false,
                                            "", "{\"name\": ", ", \"parameters\": ", "}", "; ", ""};
  // Forced without the special [TOOL_CALLS] token: a grammar spells text.
  static const tool_call_syntax mistral{"[TOOL_CALLS]", false, {"[", ",", "]"}, true,
                                        "[", "{\"name\": ", ", \"arguments\": ", "}", ", ", "]"};
  if (!kind) return vllm_json;
  switch (*kind) {
    case tool_parser_kind::hermes: return hermes;
    case tool_parser_kind::llama3_json: return llama3_json;
    case tool_parser_kind::mistral: return mistral;
  }
  return vllm_json;
}

tool_call_stream tool_call_stream::parsing(tool_parser_kind kind, bool parallel) {
  const phase p = kind == tool_parser_kind::llama3_json ? phase::content_at_start : phase::content_anywhere;
  return tool_call_stream(tool_call_syntax_of(kind), p, parallel);
}

tool_call_stream tool_call_stream::forced(std::optional<tool_parser_kind> kind, bool parallel) {
  return tool_call_stream(tool_call_syntax_of(kind), phase::section, parallel);
}

tool_call_stream tool_call_stream::arguments_of(std::string name) {
  tool_call_stream s(tool_call_syntax_of(std::nullopt), phase::arguments, false);
  s.obj_.name = std::move(name);
  s.obj_.args_begin = 0;
  return s;
}

std::string tool_call_stream::new_id() const {
  static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 gen{std::random_device{}()};
  std::string id = syntax_->short_ids ? "" : "call_";
  for (int i = 0; i < (syntax_->short_ids ? 9 : 24); ++i) id += alphabet[gen() % (sizeof(alphabet) - 1)];
  return id;
}

tool_stream_delta tool_call_stream::feed(std::string_view text) {
  text_.append(text);
  tool_stream_delta out;
  run(false, out);
  return out;
}

void tool_call_stream::run(bool final, tool_stream_delta& out) {
  while (step(final, out)) {
  }
}

bool tool_call_stream::step(bool final, tool_stream_delta& out) {
  const auto send_content = [&](size_t upto) {
    if (upto > content_sent_) out.content.append(text_, content_sent_, upto - content_sent_);
    content_sent_ = std::max(content_sent_, upto);
  };
  switch (phase_) {
    case phase::content_anywhere: {
      const size_t m = text_.find(syntax_->marker, pos_);
      if (m != std::string::npos) {
        send_content(m);
        content_end_ = m;
        pos_ = m + syntax_->marker.size();
        phase_ = phase::section;
        return true;
      }
      const size_t upto = text_.size() - (final ? 0 : partial_suffix(text_, syntax_->marker));
      send_content(upto);
      pos_ = upto;
      return false;
    }
    case phase::content_at_start: {
      const size_t first = text_.find_first_not_of(" \t\r\n");
      if (first == std::string::npos) {
        if (!final) return false;
        phase_ = phase::plain;
        return true;
      }
      const std::string_view rest = std::string_view(text_).substr(first);
      if (rest.substr(0, syntax_->marker.size()) == syntax_->marker) {
        pos_ = first + syntax_->marker.size();
        phase_ = phase::section;
        return true;
      }
      if (!final && may_become(rest, {syntax_->marker})) return false;
      if (syntax_->brace_opens && rest[0] == '{') {
        pos_ = first;
        phase_ = phase::section;
        return true;
      }
      phase_ = phase::plain;
      return true;
    }
    case phase::plain:
      send_content(text_.size());
      pos_ = text_.size();
      return false;
    case phase::section: {
      if (!parallel_ && !calls_.empty()) {
        phase_ = phase::trailing;
        return true;
      }
      while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
      if (pos_ == text_.size()) return false;
      if (text_[pos_] == '{') {
        obj_ = object_scan{};
        obj_.start = pos_;
        phase_ = phase::object;
        return true;
      }
      const std::string_view rest = std::string_view(text_).substr(pos_);
      for (const std::string& between : syntax_->between) {
        if (rest.substr(0, between.size()) == between) {
          pos_ += between.size();
          return true;
        }
      }
      if (!final && may_become(rest, syntax_->between)) return false;
      fail();  // not a call: after calls it is left out, before any it is content
      return true;
    }
    case phase::object: {
      const bool done = scan_object();
      if (phase_ != phase::object) return true;  // failed
      emit_call(out);
      if (!done) return false;
      end_object(out);
      return true;
    }
    case phase::trailing:
      pos_ = text_.size();
      return false;
    case phase::arguments:
      pos_ = text_.size();
      emit_call(out);
      return false;
  }
  return false;
}

// Reads the object from pos_ on: true once its closing brace is read.
bool tool_call_stream::scan_object() {
  object_scan& o = obj_;
  const auto value_done = [&](size_t end) {
    o.top = object_scan::after;
    if (o.key_name == "name" && !o.name) {  // the first name (a stream has sent it)
      o.name = json_string(std::string_view(text_).substr(o.value_begin, end - o.value_begin));
    } else if (is_arguments_key(o.key_name) && o.args_end == std::string::npos) {
      o.args_end = end;
    }
  };
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (o.depth == 0) {  // the opening brace
      o.depth = 1;
      ++pos_;
      continue;
    }
    if (o.in_string) {
      if (o.escape) {
        o.escape = false;
      } else if (c == '\\') {
        o.escape = true;
      } else if (c == '"') {
        o.in_string = false;
        if (o.depth == 1 && o.top == object_scan::key) {
          o.key_name = text_.substr(o.key_begin + 1, pos_ - o.key_begin - 1);
          o.top = object_scan::colon;
        } else if (o.depth == 1) {
          value_done(pos_ + 1);
        }
      }
      ++pos_;
      continue;
    }
    if (o.depth > 1) {
      if (c == '"') o.in_string = true;
      else if (c == '{' || c == '[') ++o.depth;
      else if ((c == '}' || c == ']') && --o.depth == 1) value_done(pos_ + 1);
      ++pos_;
      continue;
    }
    bool bad = false;
    switch (o.top) {
      case object_scan::key:
        if (c == '"') {
          o.in_string = true;
          o.key_begin = pos_;
        } else if (c == '}') {
          ++pos_;
          return true;
        } else {
          bad = !is_space(c) && c != ',';
        }
        break;
      case object_scan::colon:
        if (c == ':') o.top = object_scan::value;
        else bad = !is_space(c);
        break;
      case object_scan::value:
        if (is_space(c)) break;
        o.value_begin = pos_;
        if (is_arguments_key(o.key_name) && o.args_begin == std::string::npos) {
          o.args_begin = o.args_sent = pos_;
        }
        if (c == '"') {
          o.in_string = true;
        } else if (c == '{' || c == '[') {
          ++o.depth;
        } else {
          o.top = object_scan::scalar;
        }
        break;
      case object_scan::scalar:
        if (c == ',' || c == '}' || is_space(c)) {
          value_done(pos_);
          continue;  // the same byte again, after the value
        }
        break;
      case object_scan::after:
        if (c == ',') o.top = object_scan::key;
        else if (c == '}') {
          ++pos_;
          return true;
        } else {
          bad = !is_space(c);
        }
        break;
    }
    if (bad) {
      fail();
      return false;
    }
    ++pos_;
  }
  return false;
}

// Sends what is new of the call being read: its id and name once the name
// is known, then its arguments as far as they are certain.
void tool_call_stream::emit_call(tool_stream_delta& out) {
  object_scan& o = obj_;
  if (!o.name) return;
  const size_t index = calls_.size();
  if (!o.header_sent) {
    o.id = new_id();
    tool_call_delta& d = delta_for(out, index);
    d.id = o.id;
    d.name = *o.name;
    o.header_sent = true;
  }
  if (o.args_begin == std::string::npos) return;
  size_t upto = pos_;
  if (o.args_end != std::string::npos) upto = o.args_end;
  else if (phase_ == phase::object && o.top == object_scan::scalar && o.depth == 1) upto = o.args_sent;
  if (upto > o.args_sent) {
    delta_for(out, index).arguments.append(text_, o.args_sent, upto - o.args_sent);
    o.args_sent = upto;
  }
}

void tool_call_stream::end_object(tool_stream_delta& out) {
  object_scan& o = obj_;
  const bool has_args = o.args_begin != std::string::npos;
  const std::string args = has_args ? text_.substr(o.args_begin, o.args_end - o.args_begin) : "{}";
  if (!o.name || (has_args && o.args_end == std::string::npos) || !is_json(args)) {
    fail();
    return;
  }
  if (!has_args) delta_for(out, calls_.size()).arguments += args;
  calls_.push_back({o.id, *o.name, args});
  phase_ = phase::section;
}

// Not a call after all. After calls that completed, the rest is left out
// (as vLLM's parsers leave text after the calls); before any, the text
// from the marker on goes out as content, so that the stream's content is
// the whole text, as the response's is.
void tool_call_stream::fail() {
  if (!calls_.empty()) {
    phase_ = phase::trailing;
    return;
  }
  content_sent_ = content_end_;
  phase_ = phase::plain;
}

tool_stream_delta tool_call_stream::finish() {
  tool_stream_delta out;
  run(true, out);
  if (phase_ == phase::arguments) {
    if (is_json(text_)) {
      final_calls_.push_back({obj_.id, *obj_.name, text_});
    } else {
      final_content_ = text_;
    }
    return out;
  }
  if (calls_.empty()) {  // a marker and no call (cut off, malformed): all content
    if (phase_ == phase::section || phase_ == phase::object) {
      fail();
      run(true, out);
    }
    final_content_ = text_;
    return out;
  }
  final_calls_ = calls_;  // a call cut off after them is left out
  if (content_end_ > 0) final_content_ = text_.substr(0, content_end_);
  return out;
}

}  // namespace troupe
