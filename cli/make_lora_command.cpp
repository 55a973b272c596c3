// `troupe make-lora`: writes a random PEFT LoRA adapter for a model's
// configuration (benchmarks: the GPU host has no adapters to download).
//
//   troupe make-lora --model DIR --out DIR [--rank 16] [--alpha 32]
//                    [--targets q_proj,k_proj,...|all] [--seed 0]
//                    [--dtype bfloat16|float16|float32] [--count N] [--b-scale 0.01]
//
// With --count N, writes N adapters OUT/lora-0 .. OUT/lora-(N-1) with seeds
// seed .. seed + N - 1.
#include <cstdio>
#include <map>
#include <sstream>

#include "cli/commands.h"
#include "cli/help.h"
#include "model/lora_writer.h"

namespace troupe {

int run_make_lora(const std::vector<std::string>& args) {
  static const char* usage =
      "make-lora --model DIR --out DIR [--rank 16] [--alpha 32] [--targets LIST|all] [--seed 0] "
      "[--dtype bfloat16|float16|float32] [--count N] [--b-scale 0.01]";
  std::map<std::string, std::string> flags = {{"rank", "16"}, {"alpha", "32"}, {"targets", "all"},
                                              {"seed", "0"},  {"dtype", "bfloat16"}, {"count", "1"},
                                              {"b-scale", "0.01"}};
  std::vector<command_flag> listed = {{"model", true}, {"out", true}};
  for (const auto& [name, value] : flags) listed.push_back({name, true, value});
  if (show_help(args, std::string("usage: troupe ") + usage +
                          "\nRandom PEFT LoRA adapters for a model's configuration "
                          "(docs/lora.md); --count N writes OUT/lora-0 .. OUT/lora-(N-1).",
                listed, false)) {
    return 0;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || i + 1 >= args.size()) {
      print_error("'" + a + "': expected --flag VALUE\nusage: troupe " + usage);
      return 2;
    }
    const std::string key = a.substr(2);
    if (key != "model" && key != "out" && flags.count(key) == 0) {
      print_error("unknown flag '" + a + "'\nusage: troupe " + usage);
      return 2;
    }
    flags[key] = args[++i];
  }
  std::vector<std::string> problems;
  if (flags["model"].empty()) problems.push_back("--model: required");
  if (flags["out"].empty()) problems.push_back("--out: required");
  random_lora_spec spec;
  auto number = [&](const char* key, double& v) {
    char* end = nullptr;
    v = std::strtod(flags[key].c_str(), &end);
    if (flags[key].empty() || *end != '\0') problems.push_back(std::string("--") + key + ": expected a number");
  };
  double rank = 0, seed = 0, count = 0, b_scale = 0;
  number("rank", rank);
  number("alpha", spec.alpha);
  number("seed", seed);
  number("count", count);
  number("b-scale", b_scale);
  spec.b_scale = static_cast<float>(b_scale);
  spec.rank = static_cast<int64_t>(rank);
  spec.seed = static_cast<int64_t>(seed);
  if (spec.rank < 1) problems.push_back("--rank: must be >= 1");
  if (count < 1) problems.push_back("--count: must be >= 1");
  const std::string& dt = flags["dtype"];
  if (dt == "bfloat16") spec.type = dtype::bf16;
  else if (dt == "float16") spec.type = dtype::f16;
  else if (dt == "float32") spec.type = dtype::f32;
  else problems.push_back("--dtype: '" + dt + "' is not one of bfloat16, float16, float32");
  if (flags["targets"] != "all") {
    std::stringstream ss(flags["targets"]);
    std::string name;
    while (std::getline(ss, name, ',')) {
      bool known = false;
      for (int t = 0; t < num_lora_targets; ++t) {
        if (name == lora_target_name(static_cast<lora_target>(t))) {
          spec.targets.push_back(static_cast<lora_target>(t));
          known = true;
        }
      }
      if (!known) problems.push_back("--targets: '" + name + "' is not a projection of the Llama family");
    }
  }
  auto base = flags["model"].empty() ? result<model_config>(make_error(""))
                                     : load_model_config(flags["model"]);
  if (!flags["model"].empty() && !base) problems.push_back(base.error_message());
  if (!problems.empty()) {
    std::string m = problems.front();
    for (size_t i = 1; i < problems.size(); ++i) m += "\n  " + problems[i];
    print_error(m);
    return 2;
  }
  const auto n = static_cast<int64_t>(count);
  for (int64_t i = 0; i < n; ++i) {
    random_lora_spec one = spec;
    one.seed = spec.seed + i;
    const std::filesystem::path dir =
        n == 1 ? std::filesystem::path(flags["out"]) : std::filesystem::path(flags["out"]) / ("lora-" + std::to_string(i));
    if (status s = write_random_lora(*base, dir, one); !s) {
      print_error(s.error_message());
      return 1;
    }
    std::printf("%s\n", dir.string().c_str());
  }
  return 0;
}

}  // namespace troupe
