#include "cli/command_setup.h"

#include "actors/engine.h"
#include "cli/commands.h"
#include "config/logging.h"

namespace troupe {

bool prepare_command(const engine_config& config, command_setup& out) {
  setup_logging(config.log_level);
  auto model = config.model.empty() ? result<model_config>(make_error("--model: required"))
                                    : load_model_config(config.model);
  const std::vector<std::string> problems =
      validate_config(config, model ? &model.value() : nullptr);
  if (!problems.empty()) {
    print_error(format_config_problems(problems));
    return false;
  }
  if (!model) {
    print_error(model.error_message());
    return false;
  }
  if (status s = apply_quantization(config, *model); !s.ok()) {  // (validate_config said so already)
    print_error(s.error_message());
    return false;
  }
  auto tok = engine::load_tokenizer(config);
  if (!tok) {
    print_error(tok.error_message());
    return false;
  }
  out.model = std::move(model.value());
  out.tok = std::move(tok.value());
  return true;
}

}  // namespace troupe
