// Tests for config/: flag parsing, YAML loading, validation, logging. Every
// expectation names the exact message a user would read.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <tuple>

#include <unistd.h>

#include "config/config_loader.h"
#include "config/logging.h"
#include "tests/config/config_test_util.h"

namespace troupe {
namespace {

using namespace config_testing;

// ---- keys and suggestions -------------------------------------------------

TEST(config_keys, are_every_schema_key_in_order) {
  const auto& keys = config_keys();
  ASSERT_EQ(keys.size(), 57u);
  EXPECT_EQ(keys.front(), "model");
  EXPECT_EQ(keys[2], "served_model_name");
  EXPECT_EQ(keys[7], "quantization");
  EXPECT_EQ(keys[9], "max_model_len");
  EXPECT_EQ(keys[12], "cpu_offload_gb");
  EXPECT_EQ(keys[16], "kv_cache_dtype");
  EXPECT_EQ(keys[22], "kv_admission");
  EXPECT_EQ(keys[23], "max_num_seqs_per_request");
  EXPECT_EQ(keys[26], "max_waiting_tokens");
  EXPECT_EQ(keys[28], "async_scheduling");
  EXPECT_EQ(keys[29], "batch_invariant");
  EXPECT_EQ(keys[30], "tensor_parallel_size");
  EXPECT_EQ(keys[31], "pipeline_parallel_size");
  EXPECT_EQ(keys[32], "distributed_host");
  EXPECT_EQ(keys[34], "distributed_timeout");
  EXPECT_EQ(keys[35], "speculative_config");
  EXPECT_EQ(keys[36], "enable_lora");
  EXPECT_EQ(keys[40], "max_cpu_loras");
  EXPECT_EQ(keys[41], "allow_runtime_lora_updating");
  EXPECT_EQ(keys[42], "lora_allowed_dirs");
  EXPECT_EQ(keys[43], "structured_outputs_disable_any_whitespace");
  EXPECT_EQ(keys[44], "chat_template");
  EXPECT_EQ(keys[45], "tool_call_parser");
  EXPECT_EQ(keys[46], "enable_auto_tool_choice");
  EXPECT_EQ(keys[47], "host");
  EXPECT_EQ(keys[keys.size() - 2], "log_level");
  EXPECT_EQ(keys.back(), "log_expert_counts");
}

TEST(nearest_name, suggests_only_close_names) {
  const auto& keys = config_keys();
  EXPECT_EQ(nearest_name("max_model_lenght", keys), "max_model_len");
  EXPECT_EQ(nearest_name("blok_size", keys), "block_size");
  EXPECT_EQ(nearest_name("prot", keys), "port");  // distance 2, short word
  EXPECT_EQ(nearest_name("zzz", keys), "");
  // len 7 -> limit 2; "portxyz" is 3 edits from "port".
  EXPECT_EQ(nearest_name("portxyz", {"port"}), "");
  // len 15 -> limit 5.
  EXPECT_EQ(nearest_name("abcdefghijklmno", {"abcdefghij"}), "abcdefghij");
  EXPECT_EQ(nearest_name("abcdefghijklmno", {"abcdefghi"}), "");
  EXPECT_EQ(nearest_name("x", {}), "");
}

// ---- flags ----------------------------------------------------------------

TEST(parse_args, no_arguments_gives_defaults) {
  auto r = parse_args({}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->config_file, "");
  EXPECT_TRUE(r->rest.empty());
  EXPECT_EQ(r->config.block_size, 16);
  EXPECT_EQ(r->config.port, 8000);
  EXPECT_FALSE(r->config.max_model_len.has_value());
}

TEST(parse_args, value_forms_and_types) {
  engine_config c = parse_ok({"--model", "/m", "--max-model-len=4096", "--gpu-memory-utilization",
                              "0.5", "--seed", "-3", "--dtype=float32", "--num-gpu-blocks-override",
                              "100", "--api-key", "", "--max_num_seqs", "8"});
  EXPECT_EQ(c.model, "/m");
  EXPECT_EQ(c.max_model_len, 4096);
  EXPECT_DOUBLE_EQ(c.gpu_memory_utilization, 0.5);
  EXPECT_EQ(c.seed, -3);
  EXPECT_EQ(c.dtype, "float32");
  EXPECT_EQ(c.num_gpu_blocks_override, 100);
  EXPECT_EQ(c.api_key, "");
  EXPECT_EQ(c.max_num_seqs, 8);
}

TEST(parse_args, boolean_forms) {
  engine_config c = parse_ok({"--enforce-eager", "--no-enable-chunked-prefill",
                              "--skip-tokenizer-init=true", "--enable-lora", "false"});
  EXPECT_TRUE(c.enforce_eager);
  EXPECT_FALSE(c.enable_chunked_prefill);
  EXPECT_TRUE(c.skip_tokenizer_init);
  EXPECT_FALSE(c.enable_lora);
  EXPECT_TRUE(parse_ok({"--enable-prefix-caching", "true"}).enable_prefix_caching);
  EXPECT_FALSE(parse_ok({"--no-enable-prefix-caching"}).enable_prefix_caching);
  EXPECT_FALSE(parse_ok({"--enforce-eager=false"}).enforce_eager);
  EXPECT_TRUE(engine_config{}.async_scheduling);
  EXPECT_FALSE(parse_ok({"--async-scheduling", "false"}).async_scheduling);
  EXPECT_FALSE(engine_config{}.batch_invariant);
  EXPECT_TRUE(parse_ok({"--batch-invariant"}).batch_invariant);
  // A boolean flag consumes only a literal true/false.
  EXPECT_EQ(parse_error({"--enforce-eager", "yes"}), one_problem("unexpected argument 'yes'"));
  EXPECT_EQ(parse_error({"--enforce-eager=yes"}),
            one_problem("enforce_eager: expected true or false, got 'yes'"));
  EXPECT_EQ(parse_error({"--no-enforce-eager=true"}),
            one_problem("flag '--no-enforce-eager' takes no value"));
}

TEST(parse_args, unknown_flags_suggest_nearest) {
  EXPECT_EQ(parse_error({"--max-model-lenght", "4096"}),
            one_problem("unknown flag '--max-model-lenght' (did you mean '--max-model-len'?)"));
  EXPECT_EQ(parse_error({"--zzz"}), one_problem("unknown flag '--zzz'"));
  EXPECT_EQ(parse_error({"--max-tokns=3"}, {{"max-tokens", true}}),
            one_problem("unknown flag '--max-tokns' (did you mean '--max-tokens'?)"));
  EXPECT_EQ(parse_error({"--confg", "x.yaml"}),
            one_problem("unknown flag '--confg' (did you mean '--config'?)"));
  EXPECT_EQ(parse_error({"model"}), one_problem("unexpected argument 'model'"));
}

TEST(parse_args, missing_values_and_bad_types) {
  EXPECT_EQ(parse_error({"--model"}), one_problem("flag '--model' needs a value"));
  EXPECT_EQ(parse_error({"--model", "--port", "1"}), one_problem("flag '--model' needs a value"));
  EXPECT_EQ(parse_error({"--block-size", "abc"}),
            one_problem("block_size: expected an integer, got 'abc'"));
  EXPECT_EQ(parse_error({"--block-size", "16.0"}),
            one_problem("block_size: expected an integer, got '16.0'"));
  EXPECT_EQ(parse_error({"--swap-space=lots"}),
            one_problem("swap_space: expected a number, got 'lots'"));
  EXPECT_EQ(parse_error({"--swap-space=nan"}),
            one_problem("swap_space: expected a number, got 'nan'"));
  EXPECT_EQ(parse_error({"--config"}), one_problem("flag '--config' needs a value"));
}

TEST(parse_args, collects_every_problem_in_order) {
  EXPECT_EQ(parse_error({"--port", "x", "--zzz", "--max-num-seqs=", "--model"}),
            "invalid configuration (4 problems):\n"
            "  - port: expected an integer, got 'x'\n"
            "  - unknown flag '--zzz'\n"
            "  - max_num_seqs: expected an integer, got ''\n"
            "  - flag '--model' needs a value");
}

TEST(parse_args, repeated_lists) {
  engine_config c = parse_ok({"--served-model-name", "a", "--served-model-name=b",
                              "--lora-modules", "sql=/l/sql", "--lora-modules",
                              R"({"name": "chat", "path": "/l/chat"})"});
  EXPECT_EQ(c.served_model_name, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(c.lora_modules.size(), 2u);
  EXPECT_EQ(c.lora_modules[0].name, "sql");
  EXPECT_EQ(c.lora_modules[0].path, "/l/sql");
  EXPECT_EQ(c.lora_modules[1].name, "chat");
  EXPECT_EQ(c.lora_modules[1].path, "/l/chat");
  EXPECT_EQ(parse_error({"--lora-modules", "sql"}),
            one_problem("lora_modules: expected 'name=path', got 'sql'"));
}

std::vector<std::pair<std::string, std::string>> lora_pairs(const engine_config& c) {
  std::vector<std::pair<std::string, std::string>> v;
  for (const lora_module& m : c.lora_modules) v.emplace_back(m.name, m.path);
  return v;
}

using name_path = std::vector<std::pair<std::string, std::string>>;

// vLLM's `--lora-modules name=path [name=path ...]` (nargs='+'): every value
// up to the next flag, repeated flags appending, JSON objects among them.
TEST(parse_args, list_flags_take_several_values) {
  engine_config c = parse_ok({"--lora-modules", "sql=/l/sql", "chat=/l/chat", "--port", "1",
                              "--lora-modules", R"({"name": "code", "path": "/l/code"})",
                              "math=/l/math"});
  EXPECT_EQ(lora_pairs(c), (name_path{{"sql", "/l/sql"}, {"chat", "/l/chat"},
                                      {"code", "/l/code"}, {"math", "/l/math"}}));
  EXPECT_EQ(c.port, 1);
  EXPECT_EQ(parse_ok({"--served-model-name", "a", "b", "--served-model-name=c"}).served_model_name,
            (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(parse_ok({"--lora-allowed-dirs", "/a", "/b"}).lora_allowed_dirs,
            (std::vector<std::string>{"/a", "/b"}));
  // Each value is checked at its place.
  EXPECT_EQ(parse_error({"--lora-modules", "sql=/l/sql", "bad", "--port", "x", "--lora-modules",
                         "chat"}),
            "invalid configuration (3 problems):\n"
            "  - lora_modules: expected 'name=path', got 'bad'\n"
            "  - port: expected an integer, got 'x'\n"
            "  - lora_modules: expected 'name=path', got 'chat'");
  // `--key=value` is one value (as argparse): the next word is no value of it.
  EXPECT_EQ(parse_error({"--lora-modules=sql=/l/sql", "chat=/l/chat"}),
            one_problem("unexpected argument 'chat=/l/chat'"));
  // The command line replaces the file's list, whatever the number of values.
  yaml_file f("lora_modules: [a=/a, b=/b]\nlora_allowed_dirs: [/x]\n");
  c = parse_ok({"--config", f.path(), "--lora-modules", "c=/c", "d=/d", "--lora-allowed-dirs",
                "/y"});
  EXPECT_EQ(lora_pairs(c), (name_path{{"c", "/c"}, {"d", "/d"}}));
  EXPECT_EQ(c.lora_allowed_dirs, std::vector<std::string>{"/y"});
  EXPECT_EQ(lora_pairs(parse_ok({"--config", f.path()})), (name_path{{"a", "/a"}, {"b", "/b"}}));
}

TEST(parse_args, lora_keys) {
  const engine_config defaults;
  EXPECT_FALSE(defaults.enable_lora);
  EXPECT_EQ(defaults.max_loras, 1);
  EXPECT_EQ(defaults.max_lora_rank, 16);
  EXPECT_EQ(defaults.max_cpu_loras, 0);
  EXPECT_FALSE(defaults.allow_runtime_lora_updating);
  EXPECT_TRUE(defaults.lora_allowed_dirs.empty());
  engine_config c = parse_ok({"--enable-lora", "--max-loras", "4", "--max-lora-rank=64",
                              "--max-cpu-loras", "8", "--allow-runtime-lora-updating",
                              "--lora-allowed-dirs", "/adapters", "--lora_allowed_dirs=/more"});
  EXPECT_TRUE(c.enable_lora);
  EXPECT_EQ(c.max_loras, 4);
  EXPECT_EQ(c.max_lora_rank, 64);
  EXPECT_EQ(c.max_cpu_loras, 8);
  EXPECT_TRUE(c.allow_runtime_lora_updating);
  EXPECT_EQ(c.lora_allowed_dirs, (std::vector<std::string>{"/adapters", "/more"}));
  EXPECT_FALSE(parse_ok({"--allow-runtime-lora-updating", "false"}).allow_runtime_lora_updating);
  EXPECT_FALSE(parse_ok({"--no-allow-runtime-lora-updating"}).allow_runtime_lora_updating);
  EXPECT_EQ(parse_error({"--max-cpu-loras", "many"}),
            one_problem("max_cpu_loras: expected an integer, got 'many'"));
  EXPECT_EQ(parse_error({"--allow-runtime-lora-updating=yes"}),
            one_problem("allow_runtime_lora_updating: expected true or false, got 'yes'"));
  EXPECT_EQ(parse_error({"--lora-allowed-dirs"}),
            one_problem("flag '--lora-allowed-dirs' needs a value"));
  EXPECT_EQ(parse_error({"--max-cpu-lora", "2"}),
            one_problem("unknown flag '--max-cpu-lora' (did you mean '--max-cpu-loras'?)"));
}

TEST(parse_args, speculative_config_is_a_json_object) {
  engine_config c = parse_ok(
      {"--speculative-config", R"({"method": "ngram", "num_speculative_tokens": 5})"});
  EXPECT_EQ(c.speculative_config,
            (std::map<std::string, std::string>{{"method", "ngram"},
                                                {"num_speculative_tokens", "5"}}));
  EXPECT_EQ(parse_error({"--speculative-config", "ngram"}),
            one_problem("speculative_config: expected a mapping, got 'ngram'"));
  EXPECT_EQ(parse_error({"--speculative-config", R"({"a": [1]})"}),
            one_problem("speculative_config.a: expected a string, got a list"));
  const std::string err = parse_error({"--speculative-config", R"({"a": )"});
  EXPECT_EQ(err.rfind(one_problem("speculative_config: cannot parse '{\"a\": ' as JSON: "), 0), 0u)
      << err;
}

TEST(parse_args, command_flags_go_to_rest_in_order) {
  const std::vector<command_flag> flags = {{"max-tokens", true}, {"stream", false}};
  auto r = parse_args({"--max-tokens", "32", "--model", "/m", "--stream", "--max-tokens=64"},
                      flags);
  ASSERT_TRUE(r.ok()) << r.error_message();
  using p = std::pair<std::string, std::string>;
  EXPECT_EQ(r->rest, (std::vector<p>{{"max-tokens", "32"}, {"stream", ""}, {"max-tokens", "64"}}));
  EXPECT_EQ(r->config.model, "/m");
  EXPECT_EQ(parse_error({"--max-tokens"}, flags), one_problem("flag '--max-tokens' needs a value"));
  EXPECT_EQ(parse_error({"--stream=1"}, flags), one_problem("flag '--stream' takes no value"));
}

// ---- YAML -----------------------------------------------------------------

TEST(load_config_file, reads_every_kind_of_value) {
  yaml_file f(
      "model: /models/llama\n"
      "served_model_name: [a, b]\n"
      "max_model_len: 2048\n"
      "gpu_memory_utilization: 0.75\n"
      "enable_chunked_prefill: false\n"
      "lora_modules:\n"
      "  - sql=/l/sql\n"
      "  - {name: chat, path: /l/chat}\n"
      "speculative_config:\n"
      "  method: ngram\n"
      "  num_speculative_tokens: 4\n"
      "max-num-seqs: 12\n");
  engine_config base;
  base.port = 9000;
  auto r = load_config_file(f.path(), base);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->model, "/models/llama");
  EXPECT_EQ(r->served_model_name, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->max_model_len, 2048);
  EXPECT_DOUBLE_EQ(r->gpu_memory_utilization, 0.75);
  EXPECT_FALSE(r->enable_chunked_prefill);
  ASSERT_EQ(r->lora_modules.size(), 2u);
  EXPECT_EQ(r->lora_modules[1].name, "chat");
  EXPECT_EQ(r->lora_modules[1].path, "/l/chat");
  EXPECT_EQ(r->speculative_config.at("num_speculative_tokens"), "4");
  EXPECT_EQ(r->max_num_seqs, 12);
  EXPECT_EQ(r->port, 9000);  // absent keys keep the base value
}

TEST(load_config_file, lora_keys) {
  yaml_file f(
      "enable_lora: true\n"
      "lora_modules:\n"
      "  - sql=/l/sql\n"
      "  - {name: chat, path: /l/chat}\n"
      "max_loras: 2\n"
      "max_lora_rank: 32\n"
      "max_cpu_loras: 6\n"
      "allow_runtime_lora_updating: true\n"
      "lora_allowed_dirs: [/adapters, /more]\n");
  auto r = load_config_file(f.path(), {});
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_TRUE(r->enable_lora);
  EXPECT_EQ(lora_pairs(*r), (name_path{{"sql", "/l/sql"}, {"chat", "/l/chat"}}));
  EXPECT_EQ(r->max_loras, 2);
  EXPECT_EQ(r->max_lora_rank, 32);
  EXPECT_EQ(r->max_cpu_loras, 6);
  EXPECT_EQ(effective_max_cpu_loras(*r), 6);
  EXPECT_TRUE(r->allow_runtime_lora_updating);
  EXPECT_EQ(r->lora_allowed_dirs, (std::vector<std::string>{"/adapters", "/more"}));

  yaml_file one("lora_allowed_dirs: /adapters\nmax-cpu-loras: 3\n");
  r = load_config_file(one.path(), {});
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(r->lora_allowed_dirs, std::vector<std::string>{"/adapters"});
  EXPECT_EQ(r->max_cpu_loras, 3);

  yaml_file bad(
      "max_cpu_loras: 1.5\n"
      "allow_runtime_lora_updating: sometimes\n"
      "lora_allowed_dirs: {a: 1}\n"
      "lora_alowed_dirs: [/a]\n");
  r = load_config_file(bad.path(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error_message(),
            "invalid configuration (4 problems):\n"
            "  - max_cpu_loras: expected an integer, got '1.5'\n"
            "  - allow_runtime_lora_updating: expected true or false, got 'sometimes'\n"
            "  - lora_allowed_dirs: expected a list, got a mapping\n"
            "  - lora_alowed_dirs: unknown key (did you mean 'lora_allowed_dirs'?)");
}

TEST(load_config_file, reports_every_bad_key_and_type) {
  yaml_file f(
      "max_model_lenght: 10\n"
      "zzz: 1\n"
      "block_size: abc\n"
      "swap_space: [1]\n"
      "enforce_eager: yes\n"
      "model: {a: 1}\n"
      "lora_modules: x=y\n"
      "speculative_config: ngram\n"
      "served_model_name: [{a: 1}]\n"
      "lora_modules: [{name: a, pth: b}]\n");
  auto r = load_config_file(f.path(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error_message(),
            "invalid configuration (10 problems):\n"
            "  - max_model_lenght: unknown key (did you mean 'max_model_len'?)\n"
            "  - zzz: unknown key\n"
            "  - block_size: expected an integer, got 'abc'\n"
            "  - swap_space: expected a number, got a list\n"
            "  - enforce_eager: expected true or false, got 'yes'\n"
            "  - model: expected a string, got a mapping\n"
            "  - lora_modules: expected a list, got 'x=y'\n"
            "  - speculative_config: expected a mapping, got 'ngram'\n"
            "  - served_model_name[0]: expected a string, got a mapping\n"
            "  - lora_modules[0].pth: unknown key (did you mean 'path'?)");
}

TEST(load_config_file, file_level_errors) {
  auto missing = load_config_file("/nonexistent/x.yaml", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error_message(),
            one_problem("cannot read config file '/nonexistent/x.yaml': No such file or directory"));

  yaml_file list("- a\n- b\n");
  auto not_map = load_config_file(list.path(), {});
  ASSERT_FALSE(not_map.ok());
  EXPECT_EQ(not_map.error_message(),
            one_problem("config file '" + list.path() + "': top level must be a mapping of keys"));

  yaml_file broken("model: [a, b\n");
  auto bad = load_config_file(broken.path(), {});
  ASSERT_FALSE(bad.ok());
  const std::string prefix = one_problem("config file '" + broken.path() + "': line ");
  EXPECT_EQ(bad.error_message().rfind(prefix, 0), 0u) << bad.error_message();

  yaml_file empty("# nothing here\n");
  auto ok = load_config_file(empty.path(), {});
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(ok->block_size, 16);
}

TEST(parse_args, cli_overrides_file_whatever_the_order) {
  yaml_file f("port: 7000\nblock_size: 32\nserved_model_name: [x, y]\nmodel: /file\n");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--port", "1", "--config", f.path(), "--served-model-name", "z"},
           {"--served-model-name", "z", "--config=" + f.path(), "--port=1"}}) {
    auto r = parse_args(args, {});
    ASSERT_TRUE(r.ok()) << r.error_message();
    EXPECT_EQ(r->config_file, f.path());
    EXPECT_EQ(r->config.port, 1);
    EXPECT_EQ(r->config.block_size, 32);
    EXPECT_EQ(r->config.model, "/file");
    EXPECT_EQ(r->config.served_model_name, std::vector<std::string>{"z"});
  }
}

TEST(parse_args, file_problems_come_first_then_flags) {
  yaml_file f("blok_size: 8\n");
  EXPECT_EQ(parse_error({"--port", "p", "--config", f.path()}),
            "invalid configuration (2 problems):\n"
            "  - blok_size: unknown key (did you mean 'block_size'?)\n"
            "  - port: expected an integer, got 'p'");
  EXPECT_EQ(parse_error({"--config", f.path(), "--config", f.path()}),
            "invalid configuration (2 problems):\n"
            "  - blok_size: unknown key (did you mean 'block_size'?)\n"
            "  - flag '--config' given more than once");
}

// ---- validation -----------------------------------------------------------


TEST(validate_config, defaults_with_a_model_are_valid) {
  const model_config m = tiny_model();
  EXPECT_EQ(validate_config(valid_config(), nullptr), problems{});
  EXPECT_EQ(validate_config(valid_config(), &m), problems{});
  EXPECT_EQ(validate_config(engine_config{}, nullptr),
            problems{"model: required (a folder with config.json)"});
}

TEST(validate_config, model_section) {
  const model_config m = tiny_model();
  EXPECT_EQ(problems_with([](auto& c) { c.backend = "gpu"; }),
            problems{"backend: 'gpu' is not one of auto, cpu, cuda"});
  if (cuda_backend_built()) {
    EXPECT_EQ(problems_with([](auto& c) { c.backend = "cuda"; }), problems{});
    EXPECT_EQ(problems_with([](auto& c) { c.dtype = "bfloat16"; }), problems{});
  } else {
    EXPECT_EQ(problems_with([](auto& c) { c.backend = "cuda"; }),
              problems{"backend: 'cuda' is not available (this build has no CUDA backend: build "
                       "where nvcc exists, -DTROUPE_CUDA=ON)"});
    EXPECT_EQ(problems_with([](auto& c) { c.dtype = "bfloat16"; }),
              problems{"dtype: 'bfloat16' is not supported by the cpu backend (float32 only)"});
  }
  EXPECT_EQ(problems_with([](auto& c) {
              c.backend = "cpu";
              c.dtype = "bfloat16";
            }),
            problems{"dtype: 'bfloat16' is not supported by the cpu backend (float32 only)"});
  EXPECT_EQ(problems_with([](auto& c) { c.dtype = "fp8"; }),
            problems{"dtype: 'fp8' is not one of auto, float32, bfloat16, float16"});
  EXPECT_EQ(problems_with([](auto& c) { c.load_format = "pt"; }),
            problems{"load_format: 'pt' is not one of auto, dummy"});
  EXPECT_EQ(problems_with([](auto& c) { c.chat_template = "/no/such/template.jinja"; }),
            problems{"chat_template: '/no/such/template.jinja' is neither a readable file nor a template"});
  EXPECT_EQ(problems_with([](auto& c) { c.chat_template = "{{ messages[0].content }}"; }), problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.tool_call_parser = "pythonic"; }),
            problems{"tool_call_parser: 'pythonic' is not one of auto, none, hermes, llama3_json, mistral"});
  EXPECT_EQ(problems_with([](auto& c) { c.max_model_len = 0; }),
            problems{"max_model_len: 0 must be >= 1"});
  EXPECT_EQ(problems_with([](auto& c) { c.max_model_len = 8192; }, &m),
            problems{"max_model_len: 8192 exceeds the model's max_position_embeddings 4096"});
  EXPECT_EQ(problems_with([](auto& c) { c.max_model_len = 8192; }), problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.served_model_name = {"a", ""}; }),
            problems{"served_model_name[1]: must not be empty"});
}

TEST(validate_config, kv_cache_section) {
  for (int64_t bad : {0, 4, 12, 256}) {
    EXPECT_EQ(problems_with([&](auto& c) { c.block_size = bad; }),
              problems{"block_size: " + std::to_string(bad) + " must be a power of two in 8..128"});
  }
  for (int64_t good : {8, 32, 128}) {
    EXPECT_EQ(problems_with([&](auto& c) { c.block_size = good; }), problems{});
  }
  EXPECT_EQ(problems_with([](auto& c) { c.gpu_memory_utilization = 1.5; }),
            problems{"gpu_memory_utilization: 1.5 must be in (0, 1]"});
  EXPECT_EQ(problems_with([](auto& c) { c.gpu_memory_utilization = 0; }),
            problems{"gpu_memory_utilization: 0 must be in (0, 1]"});
  EXPECT_EQ(problems_with([](auto& c) { c.gpu_memory_utilization = 1; }), problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.num_gpu_blocks_override = -2; }),
            problems{"num_gpu_blocks_override: -2 must be >= 1"});
  EXPECT_EQ(problems_with([](auto& c) { c.swap_space = -1; }),
            problems{"swap_space: -1 must be >= 0"});
  EXPECT_EQ(problems_with([](auto& c) { c.swap_space = 4; }), problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.cpu_kvcache_space = 0; }),
            problems{"cpu_kvcache_space: 0 must be > 0"});
  EXPECT_EQ(problems_with([](auto& c) { c.enable_prefix_caching = true; }), problems{});
}

TEST(validate_config, scheduler_section) {
  const model_config m = tiny_model();
  EXPECT_EQ(problems_with([](auto& c) { c.max_num_seqs = 0; }),
            problems{"max_num_seqs: 0 must be >= 1"});
  EXPECT_EQ(problems_with([](auto& c) { c.max_num_batched_tokens = -1; }),
            problems{"max_num_batched_tokens: -1 must be >= 1"});
  EXPECT_EQ(problems_with([](auto& c) {
              c.max_num_batched_tokens = 8;
              c.max_num_seqs = 16;
            }),
            problems{"max_num_batched_tokens: 8 is smaller than max_num_seqs 16"});
  EXPECT_EQ(problems_with([](auto& c) {
              c.enable_chunked_prefill = false;
              c.max_num_batched_tokens = 2048;
            }, &m),
            problems{"max_num_batched_tokens: 2048 is smaller than max_model_len 4096 and "
                     "enable_chunked_prefill is false"});
  // Unset, the budget grows to max_model_len without chunked prefill (as vLLM).
  EXPECT_EQ(problems_with([](auto& c) { c.enable_chunked_prefill = false; }, &m), problems{});
  EXPECT_EQ(problems_with([](auto& c) {
              c.enable_chunked_prefill = false;
              c.max_model_len = 3000;
              c.max_num_batched_tokens = 2048;
            }),
            problems{"max_num_batched_tokens: 2048 is smaller than max_model_len 3000 and "
                     "enable_chunked_prefill is false"});
  EXPECT_EQ(problems_with([](auto& c) {
              c.enable_chunked_prefill = false;
              c.max_model_len = 2048;
            }, &m),
            problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.enable_chunked_prefill = false; }), problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.scheduling_policy = "priority"; }), problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.scheduling_policy = "lifo"; }),
            problems{"scheduling_policy: 'lifo' is not one of fcfs, priority"});
  EXPECT_EQ(problems_with([](auto& c) { c.kv_admission = "chunk"; }), problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.kv_admission = "greedy"; }),
            problems{"kv_admission: 'greedy' is not one of reserve, chunk"});
}

// `quantization` (vLLM's names) against the checkpoint's
// quantization_config: the same method, or dummy weights on a float
// config (4-bit, groups of 128); anything else names what would work.
TEST(validate_config, quantization_matches_the_checkpoint) {
  const model_config m = tiny_model();  // a float config
  model_config gptq = m;
  gptq.quantization.kind = quant_config::method::gptq;
  gptq.quantization.bits = 8;
  gptq.quantization.group_size = 64;
  EXPECT_EQ(problems_with([](auto& c) { c.quantization = "gptq"; }, &gptq), problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.quantization = "gptq_marlin"; }, &gptq), problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.quantization = "awq"; }, &gptq),
            problems{"quantization: 'awq' needs an AWQ checkpoint, and config.json's quantization_config is gptq"});
  EXPECT_EQ(problems_with([](auto& c) { c.quantization = "gptq"; }, &m),
            problems{"quantization: 'gptq' needs a GPTQ checkpoint, and config.json has no quantization_config "
                     "(a float checkpoint) (load_format: dummy makes quantized dummy weights)"});
  EXPECT_EQ(problems_with([](auto& c) {
              c.quantization = "awq_marlin";
              c.load_format = "dummy";
            }, &m),
            problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.quantization = "fp8"; }, &m), problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.quantization = "fp8"; }, &gptq),
            problems{"quantization: 'fp8': config.json's quantization_config is gptq (FP8 quantizes a float "
                     "checkpoint at load, or reads a block-FP8 one; not a GPTQ or AWQ one)"});
  EXPECT_EQ(problems_with([](auto& c) { c.quantization = "int4"; }),
            problems{"quantization: 'int4' is not supported (gptq, gptq_marlin, awq, awq_marlin, fp8, or leave it "
                     "unset for the checkpoint's own)"});
  // What the engine runs: the checkpoint's own, or the dummy's 4-bit g128.
  engine_config c;
  c.quantization = "gptq";
  c.load_format = "dummy";
  model_config dummy = m;
  ASSERT_TRUE(apply_quantization(c, dummy).ok());
  EXPECT_EQ(dummy.quantization.kind, quant_config::method::gptq);
  EXPECT_EQ(dummy.quantization.bits, 4);
  EXPECT_EQ(dummy.quantization.group_size, 128);
  model_config own = gptq;
  ASSERT_TRUE(apply_quantization(c, own).ok());
  EXPECT_EQ(own.quantization.bits, 8);
  EXPECT_EQ(own.quantization.group_size, 64);
  // Online FP8 on a float checkpoint (dummy or not): a scale a row.
  for (const char* format : {"dummy", "auto"}) {
    engine_config f;
    f.quantization = "fp8";
    f.load_format = format;
    model_config online = m;
    ASSERT_TRUE(apply_quantization(f, online).ok());
    EXPECT_EQ(online.quantization.kind, quant_config::method::fp8);
    EXPECT_TRUE(online.quantization.online);
    EXPECT_EQ(online.quantization.block_out, 1);
    EXPECT_EQ(online.quantization.fp8_block_in(4096), 4096);
  }
}

TEST(validate_config, execution_and_lora_sections) {
  const model_config m = tiny_model();
  EXPECT_EQ(problems_with([](auto& c) { c.tensor_parallel_size = 0; }),
            problems{"tensor_parallel_size: 0 must be >= 1"});
  // Heads that T does not divide are padded (model/tp_layout.h): any T runs.
  EXPECT_EQ(problems_with([](auto& c) { c.tensor_parallel_size = 3; }, &m), problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.tensor_parallel_size = 2; }, &m), problems{});
  EXPECT_EQ(problems_with([](auto& c) {
              c.tensor_parallel_size = 2;
              c.enable_lora = true;
            }),
            problems{"tensor_parallel_size: 2 with enable_lora is not supported yet (LoRA runs "
                     "with tensor_parallel_size 1)"});
  EXPECT_EQ(problems_with([](auto& c) {
              c.speculative_config = {{"method", "ngram"}, {"num_speculative_tokens", "3"}};
            }),
            problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.speculative_config["method"] = "eagle"; }),
            problems{"speculative_config.method: 'eagle' is not supported by troupe "
                     "(supported: ngram)"});
  EXPECT_EQ(problems_with([](auto& c) { c.enable_lora = true; }), problems{});
  EXPECT_EQ(problems_with([](auto& c) { c.batch_invariant = true; }, &m), problems{});
  EXPECT_EQ(problems_with([](auto& c) {
              c.batch_invariant = true;
              c.enable_lora = true;
              c.tensor_parallel_size = 2;
            }),
            (problems{"tensor_parallel_size: 2 with enable_lora is not supported yet (LoRA runs "
                      "with tensor_parallel_size 1)",
                      "batch_invariant: not supported with enable_lora (the LoRA kernels' form "
                      "depends on the step's tokens)",
                      "batch_invariant: not supported with tensor_parallel_size 2 (NCCL's "
                      "all-reduce picks its algorithm by the step's size)"}));
  EXPECT_EQ(problems_with([](auto& c) { c.lora_modules = {{"a", "/a"}, {"", "/b"}}; }),
            (problems{"lora_modules: requires enable_lora: true",
                      "lora_modules[1]: needs a name (path '/b')"}));
  EXPECT_EQ(problems_with([](auto& c) { c.max_loras = 0; }),
            problems{"max_loras: 0 must be >= 1"});
  EXPECT_EQ(problems_with([](auto& c) { c.max_lora_rank = 24; }),
            problems{"max_lora_rank: 24 is not one of 1, 8, 16, 32, 64, 128, 256, 320, 512"});
  EXPECT_EQ(problems_with([](auto& c) { c.max_lora_rank = 320; }), problems{});
}

TEST(validate_config, server_section_and_schema_order) {
  EXPECT_EQ(problems_with([](auto& c) { c.host = ""; }), problems{"host: must not be empty"});
  EXPECT_EQ(problems_with([](auto& c) { c.port = 70000; }),
            problems{"port: 70000 must be in 1..65535"});
  EXPECT_EQ(problems_with([](auto& c) { c.port = 0; }), problems{"port: 0 must be in 1..65535"});
  EXPECT_EQ(problems_with([](auto& c) { c.log_level = "verbose"; }),
            problems{"log_level: 'verbose' is not one of trace, debug, info, warn, error, off"});
  EXPECT_EQ(problems_with([](auto& c) {
              c.log_level = "loud";
              c.port = -1;
              c.block_size = 3;
              c.model = "";
            }),
            (problems{"model: required (a folder with config.json)",
                      "block_size: 3 must be a power of two in 8..128",
                      "port: -1 must be in 1..65535",
                      "log_level: 'loud' is not one of trace, debug, info, warn, error, off"}));
}

TEST(format_config_problems, counts_and_lists) {
  EXPECT_EQ(format_config_problems({"a: b"}), "invalid configuration (1 problem):\n  - a: b");
  EXPECT_EQ(format_config_problems({"a: b", "c: d"}),
            "invalid configuration (2 problems):\n  - a: b\n  - c: d");
}

// ---- logging --------------------------------------------------------------

TEST(logging, get_logger_works_without_setup) {
  auto logger = get_logger("config_test_only");
  ASSERT_NE(logger, nullptr);
  EXPECT_EQ(logger->name(), "config_test_only");
  EXPECT_EQ(get_logger("config_test_only"), logger);
}

TEST(logging, named_loggers_write_to_stderr_only) {
  setup_logging("debug");
  for (const char* name : {"net", "sched", "kv", "worker", "spec", "lora", "cfg", "model",
                           "engine"}) {
    ASSERT_NE(spdlog::get(name), nullptr) << name;
    EXPECT_EQ(spdlog::get(name)->level(), spdlog::level::debug) << name;
  }
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  get_logger("sched")->debug("step {}", 7);
  get_logger("kv")->trace("hidden");
  spdlog::info("through the default");
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "");
  const std::regex line(
      R"(\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}\] \[sched\] \[debug\] step 7\n)"
      R"(\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}\] \[engine\] \[info\] through the default\n)");
  EXPECT_TRUE(std::regex_match(err, line)) << err;

  setup_logging("warn");
  EXPECT_EQ(get_logger("cfg")->level(), spdlog::level::warn);
  EXPECT_EQ(get_logger("made_after_setup")->level(), spdlog::level::warn);
  setup_logging("info");
}

// vLLM's batch defaults (EngineArgs.get_batch_defaults) for unset values.
TEST(engine_batch_defaults, follow_vllm_by_device_and_usage) {
  const int64_t gib = int64_t{1} << 30;
  // Unset values, per device and usage (serving / offline).
  struct row {
    bool offline, cuda;
    int64_t memory;
    const char* device;
    int64_t seqs, tokens;
  };
  const row rows[] = {
      {false, false, 0, "", 256, 2048},
      {false, true, 80 * gib, "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB", 1024, 8192},
      {false, true, 80 * gib, "NVIDIA A100-SXM4-80GB, sm_80, 79.2 GiB", 256, 2048},
      {true, true, 140 * gib, "NVIDIA H200, sm_90, 139.8 GiB", 1024, 16384},
      {true, true, 24 * gib, "NVIDIA L4, sm_89, 22.0 GiB", 256, 8192},
      {true, false, 0, "", 256, 2048},  // the CPU keeps its small step
  };
  engine_config c;
  for (const row& r : rows) {
    c.offline = r.offline;
    const auto d = engine_batch_defaults(c, r.cuda, r.memory, r.device);
    EXPECT_EQ(d.max_num_seqs, r.seqs) << r.device << (r.offline ? " offline" : " serving");
    EXPECT_EQ(d.max_num_batched_tokens, r.tokens) << r.device << (r.offline ? " offline" : " serving");
  }
  // Explicit values win; an explicit small budget lowers the default seqs.
  c.offline = false;
  c.max_num_batched_tokens = 512;
  auto d = engine_batch_defaults(c, true, 80 * gib, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d.max_num_seqs, 512);
  EXPECT_EQ(d.max_num_batched_tokens, 512);
  c.max_num_batched_tokens.reset();
  c.max_num_seqs = 4096;
  d = engine_batch_defaults(c, true, 80 * gib, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d.max_num_seqs, 4096);
  EXPECT_EQ(d.max_num_batched_tokens, 8192);
  c.max_num_seqs = 16384;
  EXPECT_EQ(engine_batch_defaults(c, true, 80 * gib, "H100").max_num_batched_tokens, 16384);
  // Without chunked prefill a whole prompt fits one step.
  c.max_num_seqs.reset();
  c.enable_chunked_prefill = false;
  c.max_model_len = 32768;
  EXPECT_EQ(engine_batch_defaults(c, false, 0, "").max_num_batched_tokens, 32768);
}

}  // namespace
}  // namespace troupe
