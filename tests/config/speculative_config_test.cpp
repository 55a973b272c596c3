// speculative_config: vLLM's defaults and validation messages, every
// problem at once, from the command line and a file.
#include <gtest/gtest.h>

#include <tuple>

#include "config/speculative_config.h"
#include "tests/config/config_test_util.h"

namespace troupe {
namespace {

using namespace config_testing;

// ---- speculative_config ---------------------------------------------------

using raw_spec = std::map<std::string, std::string>;

problems spec_problems(const raw_spec& raw) {
  problems p;
  parse_speculative_config(raw, p);
  return p;
}

speculative_settings spec_ok(const raw_spec& raw) {
  problems p;
  const speculative_settings s = parse_speculative_config(raw, p);
  EXPECT_EQ(p, problems{});
  return s;
}

// method, K, prompt_lookup_min, prompt_lookup_max
std::tuple<std::string, int32_t, int32_t, int32_t> spec_tuple(const speculative_settings& s) {
  return {s.method, s.num_speculative_tokens, s.prompt_lookup_min, s.prompt_lookup_max};
}

using spec = std::tuple<std::string, int32_t, int32_t, int32_t>;

const std::string known_keys =
    "method, model, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max";

TEST(speculative_config, unset_is_disabled) {
  EXPECT_FALSE(spec_ok({}).enabled());
  const speculative_settings s = speculative_settings_of(valid_config());
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(spec_tuple(s), (spec{"", 0, 0, 0}));
}

TEST(speculative_config, ngram_and_vllm_defaults) {
  const raw_spec base = {{"method", "ngram"}, {"num_speculative_tokens", "3"}};
  auto with = [&](raw_spec extra) {
    extra.insert(base.begin(), base.end());
    return spec_tuple(spec_ok(extra));
  };
  EXPECT_TRUE(spec_ok(base).enabled());
  // Both bounds unset: 5 and 5; one unset: the other's value.
  EXPECT_EQ(with({}), (spec{"ngram", 3, 5, 5}));
  EXPECT_EQ(with({{"prompt_lookup_min", "2"}}), (spec{"ngram", 3, 2, 2}));
  EXPECT_EQ(with({{"prompt_lookup_max", "7"}}), (spec{"ngram", 3, 7, 7}));
  EXPECT_EQ(with({{"prompt_lookup_min", "2"}, {"prompt_lookup_max", "4"}}), (spec{"ngram", 3, 2, 4}));
  EXPECT_EQ(with({{"prompt_lookup_min", "3"}, {"prompt_lookup_max", "3"}}), (spec{"ngram", 3, 3, 3}));
  // null (stored as "") is the key left out; a null vLLM-only key asks for nothing.
  EXPECT_EQ(with({{"prompt_lookup_min", ""}, {"enforce_eager", ""}, {"model", ""}}),
            (spec{"ngram", 3, 5, 5}));
  // "[ngram]" is ngram; without a method, model "ngram" / "[ngram]" means ngram
  // (vLLM); with method ngram, model is ignored (vLLM).
  EXPECT_EQ(spec_tuple(spec_ok({{"method", "[ngram]"}, {"num_speculative_tokens", "1"}})),
            (spec{"ngram", 1, 5, 5}));
  EXPECT_EQ(spec_tuple(spec_ok({{"model", "ngram"}, {"num_speculative_tokens", "+2"}})),
            (spec{"ngram", 2, 5, 5}));
  EXPECT_EQ(spec_tuple(spec_ok({{"model", "[ngram]"}, {"num_speculative_tokens", "2"}})),
            (spec{"ngram", 2, 5, 5}));
  EXPECT_EQ(with({{"model", "org/draft"}}), (spec{"ngram", 3, 5, 5}));
}

TEST(speculative_config, each_message) {
  const raw_spec base = {{"method", "ngram"}, {"num_speculative_tokens", "3"}};
  auto with = [&](raw_spec changes) {
    for (const auto& kv : base) changes.insert(kv);  // `changes` wins
    return spec_problems(changes);
  };
  auto without = [&](const std::string& key) {
    raw_spec r = base;
    r.erase(key);
    return spec_problems(r);
  };
  EXPECT_EQ(with({{"prompt_lookup_min", "0"}}),
            problems{"speculative_config: prompt_lookup_min=0 must be > 0"});
  EXPECT_EQ(with({{"prompt_lookup_max", "0"}}),
            problems{"speculative_config: prompt_lookup_max=0 must be > 0"});
  EXPECT_EQ(with({{"prompt_lookup_min", "4"}, {"prompt_lookup_max", "2"}}),
            problems{"speculative_config: prompt_lookup_min=4 must be <= prompt_lookup_max=2"});
  EXPECT_EQ(without("num_speculative_tokens"),
            problems{"speculative_config: num_speculative_tokens must be provided with "
                     "speculative model unless the draft model config contains an n_predict "
                     "parameter."});
  EXPECT_EQ(with({{"num_speculative_tokens", ""}}), without("num_speculative_tokens"));
  EXPECT_EQ(with({{"num_speculative_tokens", "0"}}),
            problems{"speculative_config: Expected num_speculative_tokens to be greater than "
                     "zero (0)."});
  EXPECT_EQ(with({{"num_speculative_tokens", "-2"}}),
            problems{"speculative_config: Expected num_speculative_tokens to be greater than "
                     "zero (-2)."});
  EXPECT_EQ(with({{"num_speculative_tokens", "three"}}),
            problems{"speculative_config.num_speculative_tokens: expected an integer, got 'three'"});
  EXPECT_EQ(with({{"prompt_lookup_min", "1.5"}}),
            problems{"speculative_config.prompt_lookup_min: expected an integer, got '1.5'"});
  EXPECT_EQ(with({{"num_speculative_tokens", "3000000000"}}),
            problems{"speculative_config.num_speculative_tokens: 3000000000 is too large (at "
                     "most 2147483647)"});
  // vLLM's other methods, and names that are no vLLM method.
  for (const char* m : {"eagle", "eagle3", "mtp", "deepseek_mtp", "medusa", "mlp_speculator",
                        "draft_model", "suffix", "ngram_gpu", "dflash", "custom_class"}) {
    EXPECT_EQ(with({{"method", m}}),
              problems{"speculative_config.method: '" + std::string(m) +
                       "' is not supported by troupe (supported: ngram)"});
  }
  EXPECT_EQ(with({{"method", "lookahead"}}),
            problems{"speculative_config.method: 'lookahead' is not a vLLM speculative method "
                     "(ngram, ngram_gpu, suffix, draft_model, eagle, eagle3, mtp, medusa, "
                     "mlp_speculator, dflash, dspark, extract_hidden_states, custom_class); "
                     "troupe supports ngram"});
  // No method: vLLM infers it from the model.
  EXPECT_EQ(spec_problems({{"model", "yuhuili/EAGLE-LLaMA3-Instruct-8B"},
                           {"num_speculative_tokens", "3"}}),
            problems{"speculative_config.model: 'yuhuili/EAGLE-LLaMA3-Instruct-8B' without a "
                     "method: vLLM infers the method from the model (draft_model, eagle, mtp, "
                     "...), which troupe does not support (supported: ngram)"});
  EXPECT_EQ(without("method"),
            problems{"speculative_config.method: must be provided when model is not "
                     "(supported: ngram)"});
  // Keys: vLLM's that troupe lacks, and unknown ones.
  EXPECT_EQ(with({{"draft_tensor_parallel_size", "1"}}),
            problems{"speculative_config.draft_tensor_parallel_size: not supported by troupe "
                     "(supported keys: " + known_keys + ")"});
  EXPECT_EQ(with({{"prompt_lookup_mn", "2"}}),
            problems{"speculative_config.prompt_lookup_mn: unknown key (known: " + known_keys + ")"});
  EXPECT_EQ(with({{"disable_by_batch_size", ""}}),
            problems{"speculative_config.disable_by_batch_size: unknown key (known: " +
                     known_keys + ")"});
}

TEST(speculative_config, every_problem_at_once) {
  EXPECT_EQ(spec_problems({{"method", "eagle"},
                           {"num_speculative_tokens", "0"},
                           {"prompt_lookup_min", "x"},
                           {"prompt_lookup_max", "-1"},
                           {"quantization", "fp8"},
                           {"foo", "1"},
                           {"bar", "2"}}),
            (problems{
                "speculative_config.method: 'eagle' is not supported by troupe (supported: ngram)",
                "speculative_config: Expected num_speculative_tokens to be greater than zero (0).",
                "speculative_config.prompt_lookup_min: expected an integer, got 'x'",
                "speculative_config: prompt_lookup_max=-1 must be > 0",
                "speculative_config.bar: unknown key (known: " + known_keys + ")",
                "speculative_config.foo: unknown key (known: " + known_keys + ")",
                "speculative_config.quantization: not supported by troupe (supported keys: " +
                    known_keys + ")"}));
  EXPECT_EQ(spec_problems({{"method", "ngram"},
                           {"prompt_lookup_min", "0"},
                           {"prompt_lookup_max", "0"}}),
            (problems{"speculative_config: num_speculative_tokens must be provided with "
                      "speculative model unless the draft model config contains an n_predict "
                      "parameter.",
                      "speculative_config: prompt_lookup_min=0 must be > 0",
                      "speculative_config: prompt_lookup_max=0 must be > 0"}));
}

TEST(speculative_config, from_the_command_line_and_a_file) {
  engine_config c = parse_ok({"--model", "/m", "--speculative-config",
                              R"({"method": "ngram", "num_speculative_tokens": 4,)"
                              R"( "prompt_lookup_max": 3})"});
  EXPECT_EQ(validate_config(c, nullptr), problems{});
  EXPECT_EQ(spec_tuple(speculative_settings_of(c)), (spec{"ngram", 4, 3, 3}));

  c = parse_ok({"--model", "/m", "--speculative-config",
                R"({"method": "ngram", "num_speculative_tokens": 0, "prompt_lookup_min": 4,)"
                R"( "prompt_lookup_max": 2, "draft_model": "x"})"});
  EXPECT_EQ(format_config_problems(validate_config(c, nullptr)),
            "invalid configuration (3 problems):\n"
            "  - speculative_config: Expected num_speculative_tokens to be greater than zero (0).\n"
            "  - speculative_config: prompt_lookup_min=4 must be <= prompt_lookup_max=2\n"
            "  - speculative_config.draft_model: unknown key (known: " + known_keys + ")");

  yaml_file f(
      "model: /m\n"
      "speculative_config:\n"
      "  model: '[ngram]'\n"
      "  num_speculative_tokens: 2\n"
      "  prompt_lookup_min: 2\n"
      "  prompt_lookup_max: ~\n");
  c = parse_ok({"--config", f.path()});
  EXPECT_EQ(validate_config(c, nullptr), problems{});
  EXPECT_EQ(spec_tuple(speculative_settings_of(c)), (spec{"ngram", 2, 2, 2}));
  // The command line replaces the file's mapping; '' clears it.
  EXPECT_FALSE(speculative_settings_of(parse_ok({"--config", f.path(), "--speculative-config", ""}))
                   .enabled());

  yaml_file bad(
      "model: /m\n"
      "speculative_config:\n"
      "  method: medusa\n"
      "  num_speculative_tokens: many\n");
  c = parse_ok({"--config", bad.path()});
  EXPECT_EQ(validate_config(c, nullptr),
            (problems{"speculative_config.method: 'medusa' is not supported by troupe "
                      "(supported: ngram)",
                      "speculative_config.num_speculative_tokens: expected an integer, got "
                      "'many'"}));
}

TEST(speculative_configDeathTest, settings_of_requires_a_validated_config) {
  engine_config c = valid_config();
  c.speculative_config = {{"method", "ngram"}};
  EXPECT_DEATH(speculative_settings_of(c), "config not validated");
}

}  // namespace
}  // namespace troupe
