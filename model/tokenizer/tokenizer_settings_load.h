// tokenizer_settings_load: reads the special tokens and chat template of
// DIR/tokenizer_config.json and the eos ids of DIR/generation_config.json;
// both files are optional, but a present file must parse.
#pragma once

#include <filesystem>

#include "common/result.h"
#include "model/tokenizer/hf_tokenizer.h"

namespace troupe::tok {

result<tokenizer_settings> load_tokenizer_settings(const std::filesystem::path& dir);

}  // namespace troupe::tok
