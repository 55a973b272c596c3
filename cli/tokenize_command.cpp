// `troupe tokenize` and `troupe detokenize`: the tokenizer (and chat
// template) on their own, for checking what the server will feed the model.
//
//   troupe tokenize --tokenizer DIR (--text S | --chat FILE.json [--add-generation-prompt])
//                   [--add-special-tokens] [--json]
//   troupe detokenize --tokenizer DIR --ids 1,2,3 [--skip-special-tokens]
//
// --tokenizer defaults to --model. --json prints {"ids":[...],"text":"..."}.
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/help.h"
#include "common/file_util.h"
#include "common/json_writer.h"
#include "config/config_loader.h"
#include "model/chat_prompt.h"
#include "model/tokenizer/tokenizer.h"

namespace troupe {

namespace {

result<std::unique_ptr<tokenizer>> open_tokenizer(const engine_config& config) {
  const std::string dir = config.tokenizer.empty() ? config.model : config.tokenizer;
  if (dir.empty()) return make_error("--tokenizer: required (a folder with tokenizer.json)");
  return tokenizer::load(dir);
}

std::string flag_value(const parsed_args& args, const std::string& name, bool* present = nullptr) {
  for (const auto& [flag, value] : args.rest) {
    if (flag == name) {
      if (present != nullptr) *present = true;
      return value;
    }
  }
  if (present != nullptr) *present = false;
  return "";
}

result<std::vector<int32_t>> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size()) {
      return make_error("--ids: expected an integer, got '" + item + "'");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// The text to tokenize: --text, or --chat (messages, and tools when the
// file is a request body that has them) rendered with the chat template
// (the tokenizer's, or the chat_template key's).
result<std::string> tokenize_input(const parsed_args& args, const tokenizer& tok) {
  bool has_text = false, has_chat = false, add_gen = false;
  std::string text = flag_value(args, "text", &has_text);
  const std::string chat_file = flag_value(args, "chat", &has_chat);
  flag_value(args, "add-generation-prompt", &add_gen);
  if (has_text == has_chat) return make_error("tokenize needs exactly one of --text, --chat");
  if (has_text) return text;
  auto json = read_text_file(chat_file);
  if (!json) return make_error("--chat: " + json.error_message());
  auto input = parse_chat_input(*json);
  if (!input) return make_error("--chat: " + chat_file + ": " + input.error_message());
  auto template_text = chat_template_text(args.config.chat_template);
  if (!template_text) return std::move(template_text).take_error();
  auto renderer = chat_renderer::create(tok, *template_text);
  if (!renderer) return std::move(renderer).take_error();
  return renderer->render(input->messages, add_gen, input->tools_or_null());
}

}  // namespace

int run_tokenize(const std::vector<std::string>& argv) {
  const std::vector<command_flag> flags = {{"text", true}, {"chat", true}, {"add-generation-prompt", false},
                                           {"add-special-tokens", false}, {"json", false}};
  if (show_help(argv, "usage: troupe tokenize --tokenizer DIR (--text S | --chat FILE.json "
                        "[--add-generation-prompt]) [--add-special-tokens] [--json]\n"
                        "--tokenizer defaults to --model; --json prints {\"ids\":[...],\"text\":\"...\"}.",
                        flags, false)) return 0;
  auto args = parse_args(argv, flags);
  if (!args) {
    print_error(args.error_message());
    return 2;
  }
  auto tok = open_tokenizer(args->config);
  if (!tok) {
    print_error(tok.error_message());
    return 2;
  }
  auto text = tokenize_input(*args, **tok);
  if (!text) {
    print_error(text.error_message());
    return 2;
  }
  bool add_special = false, json = false;
  flag_value(*args, "add-special-tokens", &add_special);
  flag_value(*args, "json", &json);
  const std::vector<int32_t> ids = (*tok)->encode(*text, add_special);
  if (json) {
    json_writer w;
    w.begin_object().key("ids").array(ids).key("text").value(*text).end_object();
    std::cout << w.str() << "\n";
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
    std::cout << "\n";
  }
  return 0;
}

int run_detokenize(const std::vector<std::string>& argv) {
  const std::vector<command_flag> flags = {{"ids", true}, {"skip-special-tokens", false}, {"json", false}};
  if (show_help(argv, "usage: troupe detokenize --tokenizer DIR --ids 1,2,3 "
                        "[--skip-special-tokens] [--json]",
                        flags, false)) return 0;
  auto args = parse_args(argv, flags);
  if (!args) {
    print_error(args.error_message());
    return 2;
  }
  auto tok = open_tokenizer(args->config);
  if (!tok) {
    print_error(tok.error_message());
    return 2;
  }
  bool has_ids = false, skip = false, json = false;
  const std::string id_text = flag_value(*args, "ids", &has_ids);
  flag_value(*args, "skip-special-tokens", &skip);
  flag_value(*args, "json", &json);
  if (!has_ids) {
    print_error("detokenize needs --ids 1,2,3");
    return 2;
  }
  auto ids = parse_id_list(id_text);
  if (!ids) {
    print_error(ids.error_message());
    return 2;
  }
  for (int32_t id : *ids) {
    if (id < 0 || id >= (*tok)->vocab_size()) {
      print_error("--ids: token id " + std::to_string(id) + " is out of range for vocab size " +
                  std::to_string((*tok)->vocab_size()));
      return 2;
    }
  }
  const std::string text = (*tok)->decode(*ids, skip);
  if (json) {
    json_writer w;
    w.begin_object().key("text").value(text).end_object();
    std::cout << w.str() << "\n";
  } else {
    std::cout << text << "\n";
  }
  return 0;
}

}  // namespace troupe
