#include "cli/help.h"

#include <algorithm>
#include <cstdio>

namespace troupe {

namespace {

// "  --name VALUE" padded to a column, then "(default: x)".
void add_line(std::string& out, const std::string& name, bool takes_value,
              const std::string& default_value) {
  std::string left = "  --" + name + (takes_value ? " VALUE" : "");
  if (left.size() < 34) left.resize(34, ' ');
  else left += "  ";
  out += left;
  if (!takes_value) out += "(flag; default: off)";
  else if (default_value.empty()) out += "(default: none)";
  else out += "(default: " + default_value + ")";
  out += "\n";
}

std::string command_help(const std::string& usage, const std::vector<command_flag>& flags,
                         bool config_keys) {
  std::string out = usage;
  if (!out.empty() && out.back() != '\n') out += "\n";
  if (!flags.empty()) {
    out += "\noptions:\n";
    for (const command_flag& f : flags) add_line(out, f.name, f.takes_value, f.default_value);
  }
  out += "  --help, -h                      this text\n";
  if (!config_keys) return out;
  out += "\nconfig keys (docs/configuration.md), as flags or in --config FILE.yaml;\n"
         "\"auto\" defaults are chosen at start-up from the model and the hardware:\n";
  add_line(out, "config", true, "");
  for (const auto& [key, value] : config_key_defaults()) {
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    add_line(out, flag, true, value);
  }
  return out;
}

}  // namespace

bool show_help(const std::vector<std::string>& args, const std::string& usage,
               const std::vector<command_flag>& flags, bool config_keys) {
  const bool asked = std::any_of(args.begin(), args.end(),
                                 [](const std::string& a) { return a == "--help" || a == "-h"; });
  if (asked) std::fputs(command_help(usage, flags, config_keys).c_str(), stdout);
  return asked;
}

}  // namespace troupe
