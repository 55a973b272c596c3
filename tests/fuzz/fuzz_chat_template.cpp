// libFuzzer target for chat-template rendering: the chat templates of the
// fixture tokenizers (TROUPE_TEST_DATA/tokenizers/*/tokenizer_config.json
// that have one, in directory-name order, each parsed once at start-up; the
// configs are read with parse_json_value, which takes Python's big integers)
// render fuzzed chat messages, as chat_renderer does for a request.
// Input: the first byte picks the template ((byte & 0x0F) % count) and
// add_generation_prompt (byte & 0x10), so seeds start with '@'..'B' or
// 'P'..'R'; the rest is a JSON body for parse_chat_messages ({"messages":
// [...]} or a bare list). Parsed messages are rendered with messages,
// add_generation_prompt, the config's special tokens (bos_token, eos_token,
// ... as chat_renderer sets them) and a fixed clock.
// Invariants: parse and render give a value or an error with a message;
// a crash, an escaping exception or a sanitizer report aborts. The
// interpreter bounds macro recursion (100), range() (100000) and expression
// nesting, but not loop iterations or output size; the fixture templates
// only loop over the messages (and their tool calls), so a render is about
// linear in the input, and libFuzzer's -timeout would report a hang.
// Built by tests/fuzz/CMakeLists.txt; seeds in tests/fuzz/corpus_chat_template/.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "model/chat_prompt.h"
#include "model/chat_template/chat_template.h"
#include "tests/fuzz/fuzz_support.h"

namespace troupe {

const char* const fuzz_target_name = "fuzz_chat_template";

namespace {


struct fixture {
  std::string name;
  chat_template tmpl;
  value_object specials;  // bos_token, eos_token, ... as strings
};

// A special token: a string or an AddedToken object's "content".
value token_content(const value& v) { return v.is_object() ? v.member("content") : v; }

// chat_template: a string, or a list of {name, template} (the "default" one).
std::string template_of(const value& config) {
  const value v = config.member("chat_template");
  if (v.is_string()) return v.as_string();
  if (!v.is_array()) return {};
  for (const value& item : v.as_array()) {
    const value name = item.is_object() ? item.member("name") : value();
    const value text = item.is_object() ? item.member("template") : value();
    if (name.is_string() && name.as_string() == "default" && text.is_string()) return text.as_string();
  }
  return {};
}

// tokenizer_config.json as the tokenizer reads it (Python's big integers,
// such as llama2's model_max_length, included).
value read_config(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto config = parse_json_value(text);
  if (!in || !config || !config->is_object()) {
    std::fprintf(stderr, "fuzz_chat_template: cannot read %s\n", path.c_str());
    std::abort();
  }
  return std::move(config.value());
}

std::vector<fixture> load_fixtures() {
  const std::filesystem::path root = std::filesystem::path(TROUPE_TEST_DATA) / "tokenizers";
  std::vector<std::filesystem::path> configs;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (std::filesystem::exists(entry.path() / "tokenizer_config.json")) {
      configs.push_back(entry.path() / "tokenizer_config.json");
    }
  }
  std::sort(configs.begin(), configs.end());  // a stable template order for reproducers
  std::vector<fixture> out;
  for (const auto& path : configs) {
    const std::string name = path.parent_path().filename().string();
    const value config = read_config(path);
    const std::string source = template_of(config);
    if (source.empty()) continue;
    auto tmpl = chat_template::parse(source);
    if (!tmpl) {
      std::fprintf(stderr, "fuzz_chat_template: %s: %s\n", name.c_str(),
                   tmpl.error_message().c_str());
      std::abort();
    }
    value_object specials;
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                            "cls_token", "mask_token"}) {
      const value content = token_content(config.member(key));
      if (content.is_string()) specials.set(key, content);
    }
    out.push_back(fixture{name, std::move(tmpl.value()), std::move(specials)});
  }
  if (out.empty()) {
    std::fprintf(stderr, "fuzz_chat_template: no chat template under %s\n", root.c_str());
    std::abort();
  }
  return out;
}

const std::vector<fixture>& fixtures() {
  static const std::vector<fixture> all = load_fixtures();
  return all;
}

chat_template_render_options fixed_clock() {
  chat_template_render_options options;
  std::tm now{};
  now.tm_year = 2024 - 1900;
  now.tm_mon = 6;
  now.tm_mday = 26;
  options.now = now;
  return options;
}

void render(const fixture& f, std::string_view body, bool add_generation_prompt) {
  auto messages = parse_chat_messages(body);
  if (!messages) {
    require(!messages.error_message().empty(), "messages error has a message");
    return;
  }
  require(messages->is_array(), "chat messages are a list");
  value_object context = f.specials;
  context.set("messages", *messages);
  context.set("add_generation_prompt", value(add_generation_prompt));
  static const chat_template_render_options options = fixed_clock();
  auto text = f.tmpl.render(value(std::move(context)), options);
  if (!text) require(!text.error_message().empty(), "render error has a message");
}

}  // namespace
}  // namespace troupe

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const auto& all = troupe::fixtures();
  for (const auto& f : all) std::fprintf(stderr, "fuzz_chat_template: template %s\n", f.name.c_str());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& all = troupe::fixtures();
  const troupe::fixture& f = all[(data[0] & 0x0Fu) % all.size()];
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  troupe::guarded([&] { troupe::render(f, body, (data[0] & 0x10u) != 0); });
  return 0;
}
