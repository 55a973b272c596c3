// chat_template: a Jinja2 interpreter sufficient for Hugging Face chat
// templates, rendering exactly as transformers' apply_chat_template does
// (jinja2 ImmutableSandboxedEnvironment with trim_blocks=True,
// lstrip_blocks=True, the loopcontrols extension, transformers' tojson,
// raise_exception and strftime_now).
//
// A parsed template is immutable; render() is const and thread-safe.
//
// Not supported (a parse error names the tag): extends / block / include /
// import, recursive for-loops, *args / **kwargs in calls. Case mapping
// (upper, lower, title, capitalize) changes ASCII letters only.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "model/chat_template/value.h"

namespace troupe {

struct chat_template_render_options {
  // The clock strftime_now() reads. Unset: the current local time, as
  // transformers' datetime.now(). Set (tests, reproducible prompts): this
  // date and time; only tm_year / tm_mon / tm_mday / tm_hour / tm_min /
  // tm_sec are read, the weekday and day of the year are derived.
  std::optional<std::tm> now;
};

class chat_template {
 public:
  // Parses the template; a syntax error names line and column.
  static result<chat_template> parse(std::string_view source);

  // Renders with `context` (an object: messages, add_generation_prompt,
  // tools, bos_token, eos_token, ...). raise_exception(msg) and runtime
  // errors come back as errors (never a crash).
  result<std::string> render(const value& context) const;
  result<std::string> render(const value& context, const chat_template_render_options& options) const;

 private:
  struct program;
  std::shared_ptr<const program> program_;
};

}  // namespace troupe
