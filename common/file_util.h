// Small file helpers shared by the loaders.
#pragma once

#include <filesystem>
#include <string>

#include "common/result.h"

namespace troupe {

// The whole file as bytes; error "cannot read 'PATH'" when it cannot be read.
result<std::string> read_text_file(const std::filesystem::path& path);

}  // namespace troupe
