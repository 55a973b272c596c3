// troupe: the command-line entry point. Dispatches to subcommands.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace troupe {

void print_error(const std::string& message) {
  std::fprintf(stderr, "troupe: error: %s\n", message.c_str());
}

namespace {

constexpr const char* usage =
    "usage: troupe <command> [options]\n"
    "\n"
    "commands:\n"
    "  generate   offline generation through the engine:\n"
    "             troupe generate --model DIR [--config FILE] [--<config-key> VALUE]...\n"
    "                 (--prompt-ids 1,2,3 | --prompt TEXT | --prompts-file FILE.jsonl)\n"
    "                 [--max-tokens N] [--temperature T] [--top-p P] [--top-k K] [--min-p P]\n"
    "                 [--seed S] [--n N] [--logprobs K] [--prompt-logprobs K] [--ignore-eos]\n"
    "                 [--stop S]... [--json]   (--prompt TEXT where the model has a tokenizer)\n"
    "  tokenize   troupe tokenize --tokenizer DIR (--text S | --chat FILE.json\n"
    "                 [--add-generation-prompt]) [--add-special-tokens] [--json]\n"
    "  detokenize troupe detokenize --tokenizer DIR --ids 1,2,3 [--skip-special-tokens]\n"
    "  serve      the OpenAI-compatible HTTP server (see docs/server.md):\n"
    "             troupe serve --model DIR [--config FILE] [--<config-key> VALUE]...\n"
    "  worker     one pipeline stage for a head in another process (docs/parallelism.md):\n"
    "             troupe worker --connect HOST:PORT [--rank-offset R] --model DIR [--<config-key> VALUE]...\n"
    "  bench      benchmarks (see docs/bench.md): troupe bench serve|throughput|latency ...\n"
    "  eval       logits consistency of two configurations (docs/eval.md):\n"
    "             troupe eval kl --model DIR [--<config-key> VALUE]... --compare KEY=VALUE [--compare ...]\n"
    "  make-lora  random PEFT LoRA adapters for a model (benchmarks; docs/lora.md):\n"
    "             troupe make-lora --model DIR --out DIR [--rank 16] [--alpha 32]\n"
    "                 [--targets q_proj,...|all] [--seed 0] [--dtype bfloat16] [--count N] [--b-scale S]\n"
    "  chat       chat with a running server (history kept; streamed): troupe chat [--url URL]\n"
    "                 [--model NAME] [--system-prompt S] [--quick MESSAGE]\n"
    "  complete   complete prompts on a running server: troupe complete [--url URL] [--quick PROMPT]\n"
    "  run-batch  OpenAI batch files through the engine (as vLLM's run-batch):\n"
    "             troupe run-batch -i FILE.jsonl -o OUT.jsonl --model DIR [--<config-key> VALUE]...\n"
    "  version    the version, the commit and the build's backends (CUDA, NCCL) with what they find\n"
    "  collect-env  what a bug report needs: OS, compiler, CPU, CUDA, driver, GPUs, libraries\n"
    "\n"
    "Every config key is also a --kebab-case flag; see docs/configuration.md.\n"
    "troupe <command> --help lists a command's flags and config keys with their defaults.\n";

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::fputs(troupe::usage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "generate") return troupe::run_generate(args);
  if (command == "tokenize") return troupe::run_tokenize(args);
  if (command == "detokenize") return troupe::run_detokenize(args);
  if (command == "version" || command == "--version") return troupe::run_version(args);
  if (command == "collect-env") return troupe::run_collect_env(args);
  if (command == "chat") return troupe::run_chat(args);
  if (command == "complete") return troupe::run_complete(args);
  if (command == "serve") return troupe::run_serve(args);
  if (command == "bench") return troupe::run_bench(args);
  if (command == "eval") return troupe::run_eval(args);
  if (command == "make-lora") return troupe::run_make_lora(args);
  if (command == "worker") return troupe::run_worker(args);
  if (command == "run-batch") return troupe::run_run_batch(args);
  troupe::print_error("unknown command '" + command + "'\n" + troupe::usage);
  return 2;
}
