// Bad input to `troupe generate`: each case gets its exact message on stderr
// and a non-zero exit status, never a crash or a silent default.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>

#include "tests/cli/cli_runner.h"

namespace troupe::testing {
namespace {

const std::vector<std::string> prompt = {"--prompt-ids", "1,2,3", "--max-tokens", "2"};

run_result generate(std::vector<std::string> args) {
  args.insert(args.begin(), "generate");
  args.insert(args.end(), prompt.begin(), prompt.end());
  return run_troupe(args);
}

// A copy of a fixture model folder the test may break, removed with it.
std::unique_ptr<temp_dir> copy_model(const std::string& name) {
  auto dir = std::make_unique<temp_dir>("model");
  for (const auto& f : std::filesystem::directory_iterator(model_dir(name))) {
    std::filesystem::copy_file(f.path(), dir->path() / f.path().filename());
  }
  return dir;
}

void write(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

void replace_in(const std::filesystem::path& p, const std::string& from, const std::string& to) {
  std::string text = read_file(p);
  const auto pos = text.find(from);
  ASSERT_NE(pos, std::string::npos) << from;
  text.replace(pos, from.size(), to);
  write(p, text);
}

// Rewrites model.safetensors without tensor `drop` (same data section).
void drop_tensor(const std::filesystem::path& file, const std::string& drop) {
  const std::string bytes = read_file(file);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const std::string header = bytes.substr(8, n);
  simdjson::dom::parser parser;
  simdjson::dom::object obj = parser.parse(header);
  std::string out = "{";
  bool first = true;
  for (auto [key, value] : obj) {
    if (key == drop) continue;
    out += (first ? "\"" : ",\"") + std::string(key) + "\":" + simdjson::minify(value);
    first = false;
  }
  out += "}";
  const uint64_t m = out.size();
  std::string result(reinterpret_cast<const char*>(&m), 8);
  write(file, result + out + bytes.substr(8 + n));
}

TEST(cli_errors, missing_model_folder) {
  const run_result r = generate({"--model", "/nonexistent/troupe-model"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "troupe: error: model folder '/nonexistent/troupe-model' does not exist\n");
}

TEST(cli_errors, missing_model_flag) {
  const run_result r = generate({});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model: required (a folder with config.json)"), std::string::npos) << r.err;
}

TEST(cli_errors, corrupt_safetensors_header) {
  const auto model = copy_model("tiny-llama");
  const std::filesystem::path& dir = model->path();
  std::string bytes = read_file(dir / "model.safetensors");
  const uint64_t huge = 1ull << 40;
  std::memcpy(bytes.data(), &huge, 8);
  write(dir / "model.safetensors", bytes);
  const run_result r = generate({"--model", dir.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("troupe: error: model.safetensors: corrupt header (header length "
                       "1099511627776 exceeds file size"),
            std::string::npos)
      << r.err;
}

TEST(cli_errors, missing_tensor) {
  const auto model = copy_model("tiny-llama");
  const std::filesystem::path& dir = model->path();
  drop_tensor(dir / "model.safetensors", "model.layers.2.mlp.up_proj.weight");
  const run_result r = generate({"--model", dir.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("troupe: error: missing tensor 'model.layers.2.mlp.up_proj.weight' "
                       "(looked in model.safetensors)"),
            std::string::npos)
      << r.err;
}

TEST(cli_errors, wrong_tensor_shape) {
  const auto model = copy_model("tiny-llama");
  const std::filesystem::path& dir = model->path();
  // Claim a different hidden size: every [*, 128] weight now mismatches.
  replace_in(dir / "config.json", "\"intermediate_size\": 256", "\"intermediate_size\": 320");
  const run_result r = generate({"--model", dir.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("troupe: error: tensor 'model.layers.0.mlp.gate_proj.weight' in "
                       "model.safetensors has shape [256, 128], expected [320, 128]"),
            std::string::npos)
      << r.err;
}

TEST(cli_errors, unknown_architecture) {
  const auto model = copy_model("tiny-llama");
  const std::filesystem::path& dir = model->path();
  replace_in(dir / "config.json", "LlamaForCausalLM", "GPT2LMHeadModel");
  const run_result r = generate({"--model", dir.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "troupe: error: unsupported architecture 'GPT2LMHeadModel' in " +
                       (dir / "config.json").string() +
                       " (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                       "Qwen3ForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM)\n");
}

TEST(cli_errors, unsupported_rope_type) {
  const auto model = copy_model("tiny-llama");
  const std::filesystem::path& dir = model->path();
  replace_in(dir / "config.json", "\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"");
  const run_result r = generate({"--model", dir.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unsupported RoPE type 'yarn'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(supported: default, linear, llama3)"), std::string::npos) << r.err;
}

// One invalid flag: the exact one-problem message.
void expect_config_problem(const std::vector<std::string>& flags, const std::string& problem) {
  std::vector<std::string> args = {"--model", model_dir("tiny-llama")};
  args.insert(args.end(), flags.begin(), flags.end());
  const run_result r = generate(args);
  EXPECT_EQ(r.exit_code, 2) << problem;
  EXPECT_EQ(r.err, "troupe: error: invalid configuration (1 problem):\n  - " + problem + "\n");
}

TEST(cli_errors, each_config_rule) {
  expect_config_problem({"--block-size", "12"}, "block_size: 12 must be a power of two in 8..128");
  expect_config_problem({"--block-size", "256"}, "block_size: 256 must be a power of two in 8..128");
  expect_config_problem({"--gpu-memory-utilization", "1.5"},
                        "gpu_memory_utilization: 1.5 must be in (0, 1]");
  expect_config_problem({"--gpu-memory-utilization", "0"},
                        "gpu_memory_utilization: 0 must be in (0, 1]");
  expect_config_problem({"--max-model-len", "8192"},
                        "max_model_len: 8192 exceeds the model's max_position_embeddings 4096");
  expect_config_problem({"--max-num-seqs", "0"}, "max_num_seqs: 0 must be >= 1");
  expect_config_problem({"--backend", "gpu"}, "backend: 'gpu' is not one of auto, cpu, cuda");
  expect_config_problem({"--backend", "cpu", "--dtype", "bfloat16"},
                        "dtype: 'bfloat16' is not supported by the cpu backend (float32 only)");
  expect_config_problem({"--speculative-config", "{\"method\": \"ngram\"}"},
                        "speculative_config: num_speculative_tokens must be provided with "
                        "speculative model unless the draft model config contains an n_predict "
                        "parameter.");
  expect_config_problem({"--allow-runtime-lora-updating"},
                        "allow_runtime_lora_updating: requires enable_lora: true");
  expect_config_problem({"--swap-space", "-1"}, "swap_space: -1 must be >= 0");
  expect_config_problem({"--port", "70000"}, "port: 70000 must be in 1..65535");
}

// LoRA adapters are read and checked before the weights load; one error
// lists every adapter's problems, each naming the adapter.
TEST(cli_errors, bad_lora_adapters_listed_before_loading) {
  const std::string lora = std::string(TROUPE_TEST_DATA) + "/lora/";
  const run_result r = generate({"--model", model_dir("tiny-llama"), "--enable-lora",
                                 "--max-lora-rank", "8", "--lora-modules",
                                 "gone=/nonexistent/adapter",
                                 "poet=" + lora + "tiny-llama-lora-poet",
                                 "chat=" + lora + "tiny-qwen2-lora-chat"});
  EXPECT_EQ(r.exit_code, 1);
  for (const std::string& want :
       {std::string("troupe: error: LoRA adapters (3 problems):"),
        std::string("  - LoRA adapter 'gone' (/nonexistent/adapter): not a directory"),
        std::string("LoRA adapter 'poet' (") + lora + "tiny-llama-lora-poet): rank 16 is above max_lora_rank 8",
        std::string("LoRA adapter 'chat' (") + lora + "tiny-qwen2-lora-chat): tensor "
            "'base_model.model.model.layers.",
        std::string("0.self_attn.k_proj.lora_B.weight' has shape [64, 4], expected [32, 4] (rank "
                    "4, k_proj is 128 -> 32 in the base model)"),
        std::string("more tensors whose shapes do not fit the base model")}) {
    EXPECT_NE(r.err.find(want), std::string::npos) << "missing: " << want << "\n" << r.err;
  }
  EXPECT_EQ(r.err.find("loading weights"), std::string::npos) << r.err;
}

TEST(cli_errors, unknown_lora_name) {
  const std::string lora = std::string(TROUPE_TEST_DATA) + "/lora/";
  run_result r = generate({"--model", model_dir("tiny-llama"), "--enable-lora", "--lora-modules",
                           "sql=" + lora + "tiny-llama-lora-sql", "--lora", "sqll"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("prompt 0: lora: no adapter named 'sqll' (served: sql)"), std::string::npos)
      << r.err;
  r = generate({"--model", model_dir("tiny-llama"), "--lora", "sql"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("lora: no adapter named 'sql' (LoRA needs enable_lora and lora_modules)"),
            std::string::npos)
      << r.err;
}

// Any T runs (padding, docs/parallelism.md); what cannot run is named.
TEST(cli_errors, tensor_parallel_size_problems) {
  std::vector<std::string> args = {"--model", model_dir("tiny-llama"), "--tensor-parallel-size",
                                   "0", "--enable-lora"};
  run_result r = generate(args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "troupe: error: invalid configuration (1 problem):\n"
            "  - tensor_parallel_size: 0 must be >= 1\n");
  args[3] = "2";
  r = generate(args);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "troupe: error: invalid configuration (1 problem):\n"
            "  - tensor_parallel_size: 2 with enable_lora is not supported yet (LoRA runs with "
            "tensor_parallel_size 1)\n");
}

TEST(cli_errors, config_file_reports_every_problem) {
  const temp_dir dir("cfg");
  write(dir / "deploy.yaml",
        "model: " + model_dir("tiny-llama") +
            "\n"
            "max_model_lenght: 1024\n"
            "block_size: abc\n"
            "gpu_memory_utilization: 2\n");
  const run_result r = generate({"--config", dir.path().string() + "/deploy.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("max_model_lenght: unknown key (did you mean 'max_model_len'?)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("block_size: expected an integer, got 'abc'"), std::string::npos) << r.err;
}

TEST(cli_errors, command_line_overrides_file) {
  const temp_dir dir("cfg");
  write(dir / "deploy.yaml", "model: " + model_dir("tiny-llama") + "\nblock_size: 12\n");
  // The file's bad block_size is overridden by the flag: the run succeeds.
  const run_result r = generate({"--config", dir.path().string() + "/deploy.yaml", "--block-size", "32"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(cli_errors, unknown_flag_suggests) {
  const run_result r = generate({"--model", model_dir("tiny-llama"), "--max-model-lenght", "5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown flag '--max-model-lenght' (did you mean '--max-model-len'?)"),
            std::string::npos)
      << r.err;
}

TEST(cli_errors, bad_prompts) {
  run_result r = run_troupe({"generate", "--model", model_dir("tiny-llama"), "--prompt-ids", "1,5000"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "troupe: error: prompt_ids: token id 5000 is out of range for vocab_size 1024\n");
  r = run_troupe({"generate", "--model", model_dir("tiny-llama"), "--prompt-ids", "1,x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "troupe: error: --prompt-ids: expected an integer, got 'x'\n");
  r = run_troupe({"generate", "--model", model_dir("tiny-llama"), "--prompt-ids", "1",
                  "--temperature", "-1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "troupe: error: temperature: -1 must be >= 0\n");
  r = run_troupe({"generate", "--model", model_dir("tiny-llama"), "--prompt-ids", "1",
                  "--max-model-len", "16", "--max-tokens", "1", "--num-gpu-blocks-override", "4"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<int32_t> long_prompt(20, 7);
  std::string ids;
  for (size_t i = 0; i < long_prompt.size(); ++i) ids += (i ? "," : "") + std::to_string(long_prompt[i]);
  r = run_troupe({"generate", "--model", model_dir("tiny-llama"), "--prompt-ids", ids,
                  "--max-model-len", "16", "--max-tokens", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("troupe: error: prompt 0: the prompt has 20 tokens, more than "
                       "max_model_len 16"),
            std::string::npos)
      << r.err;
}

TEST(cli_errors, kv_cache_too_small_for_max_model_len) {
  const run_result r = run_troupe({"generate", "--model", model_dir("tiny-llama"), "--prompt-ids",
                                   "1", "--num-gpu-blocks-override", "3", "--max-model-len", "100"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("troupe: error: the KV cache holds 48 tokens (3 blocks of 16), fewer "
                       "than max_model_len 100"),
            std::string::npos)
      << r.err;
}

TEST(cli_errors, cuda_without_a_device_is_a_clear_error) {
  // Build machines have nvcc (the CUDA backend is built) but no GPU.
  const run_result r = generate({"--model", model_dir("tiny-llama"), "--backend", "cuda"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("troupe: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cuda"), std::string::npos) << r.err;
}

TEST(cli_errors, serve_without_model_is_a_config_error) {
  const run_result r = run_troupe({"serve"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model: required"), std::string::npos) << r.err;
}

// Every speculative_config problem at once, before any weights are read:
// the model folder has no weights at all.
TEST(cli_errors, serve_lists_every_speculative_config_problem_before_loading_weights) {
  const auto model = copy_model("tiny-llama");
  std::filesystem::remove(model->path() / "model.safetensors");
  const run_result r = run_troupe(
      {"serve", "--model", model->path().string(), "--port", "1", "--speculative-config",
       R"({"method": "ngram", "num_speculative_tokens": 0, "prompt_lookup_min": 4,)"
       R"( "prompt_lookup_max": 2, "draft_tensor_parallel_size": 1})"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "troupe: error: invalid configuration (3 problems):\n"
            "  - speculative_config: Expected num_speculative_tokens to be greater than zero "
            "(0).\n"
            "  - speculative_config: prompt_lookup_min=4 must be <= prompt_lookup_max=2\n"
            "  - speculative_config.draft_tensor_parallel_size: not supported by troupe "
            "(supported keys: method, model, num_speculative_tokens, prompt_lookup_min, "
            "prompt_lookup_max)\n");
}

}  // namespace
}  // namespace troupe::testing
