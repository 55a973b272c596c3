#include "common/file_util.h"

#include <fstream>
#include <sstream>

namespace troupe {

result<std::string> read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  if (in) buffer << in.rdbuf();
  if (!in || in.bad()) return make_error("cannot read '" + path.string() + "'");
  return buffer.str();
}

}  // namespace troupe
