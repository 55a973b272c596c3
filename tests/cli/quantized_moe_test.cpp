// GPTQ mixture-of-experts checkpoints, in the layout of the hub's
// Qwen3-30B-A3B-GPTQ-Int4: the attention projections and every expert's
// gate, up and down projections as GPTQ v1 4-bit tensors (qweight, qzeros
// stored minus one, float16 scales; groups of 64 inputs), the routers,
// norms, embeddings and LM head in float. The test writes one from
// tiny-qwen3-moe (round-to-nearest codes of its weights, model/quant_pack.h
// rtn_quantize) beside a float checkpoint holding exactly the
// dequantized weights, and checks with `troupe eval kl` on the CPU that the
// two are the same model: KL 0 at every position, every greedy token the
// same. (Against the original float fixture the quantized model differs:
// a positive KL.) With TROUPE_QUANT_MOE_DIR set, the two checkpoints are
// written there and kept (the GPU host runs the same comparison in
// float32 and bfloat16: scripts/gpu-quant-bench.sh PARTS=kl).
#include <gtest/gtest.h>

#include <simdjson.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "model/quant_pack.h"
#include "model/weights.h"
#include "tests/cli/cli_runner.h"
#include "tests/model/checkpoint_copy.h"

namespace troupe {
namespace {

namespace sw = safetensors_writing;
namespace fs = std::filesystem;

constexpr int64_t group_size = 64;

template <class T>
sw::bytes raw_bytes(const std::vector<T>& values) {
  sw::bytes b(values.size() * sizeof(T));
  std::memcpy(b.data(), values.data(), b.size());
  return b;
}

bool quantized(const std::string& name) {
  for (const char* p : {".self_attn.q_proj.", ".self_attn.k_proj.", ".self_attn.v_proj.", ".self_attn.o_proj.",
                        ".mlp.experts."}) {
    if (name.find(p) != std::string::npos) return name.size() > 7 && name.substr(name.size() - 7) == ".weight";
  }
  return false;
}

// GPTQ v1 tensors of p (row layout, no permutation) under `prefix`.
void add_gptq(const std::string& prefix, const packed_linear& p, std::vector<sw::raw_tensor>& out) {
  const int64_t in = p.cols, rows = p.rows, groups = p.groups(), wpr = p.words_per_row();
  std::vector<int32_t> qweight(static_cast<size_t>(wpr * rows)), qzeros(static_cast<size_t>(groups * rows / 8));
  std::vector<uint16_t> scales(static_cast<size_t>(groups * rows));
  for (int64_t o = 0; o < rows; ++o) {
    for (int64_t r = 0; r < wpr; ++r) {  // inputs 8r .. 8r + 7: one word, as the packed row's
      qweight[static_cast<size_t>(r * rows + o)] = static_cast<int32_t>(p.words[static_cast<size_t>(o * wpr + r)]);
    }
    for (int64_t g = 0; g < groups; ++g) {
      const auto stored = static_cast<uint32_t>((p.zeros[static_cast<size_t>(o * groups + g)] - 1) & 15);
      auto& word = qzeros[static_cast<size_t>(g * rows / 8 + o / 8)];
      word = static_cast<int32_t>(static_cast<uint32_t>(word) | stored << (4 * (o % 8)));
      scales[static_cast<size_t>(g * rows + o)] = p.scales[static_cast<size_t>(o * groups + g)];
    }
  }
  out.push_back({prefix + ".qweight", "I32", {in / 8, rows}, raw_bytes(qweight)});
  out.push_back({prefix + ".qzeros", "I32", {groups, rows / 8}, raw_bytes(qzeros)});
  out.push_back({prefix + ".scales", "F16", {groups, rows}, raw_bytes(scales)});
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The fixture quantized (gptq_dir) and its exact dequantization (float_dir).
void write_checkpoints(const fs::path& gptq_dir, const fs::path& float_dir) {
  const std::string fixture = std::string(TROUPE_TEST_DATA) + "/moe/tiny-qwen3-moe";
  std::vector<sw::raw_tensor> gptq;
  int64_t packed = 0;
  std::vector<sw::raw_tensor> dequantized = sw::float32_copy(
      fixture, [&](const std::string& name, const std::vector<int64_t>& shape, std::vector<float>& w,
                   std::vector<sw::raw_tensor>& out) {
        if (!quantized(name)) {
          gptq.push_back({name, "F32", shape, raw_bytes(w)});
          return false;
        }
        EXPECT_EQ(shape.size(), 2u) << name;
        const packed_linear p = rtn_quantize(w.data(), shape[0], shape[1], 4, group_size);
        add_gptq(name.substr(0, name.size() - 7), p, gptq);
        unpack_linear(p, w.data());  // the float twin holds the dequantized weight
        out.push_back({name, "F32", shape, raw_bytes(w)});
        ++packed;
        return true;
      });
  EXPECT_EQ(packed, 3 * (4 + 8 * 3));  // 3 layers: q, k, v, o and 8 experts' gate, up, down
  fs::create_directories(gptq_dir);
  fs::create_directories(float_dir);
  sw::write_safetensors(gptq_dir / "model.safetensors", gptq);
  sw::write_safetensors(float_dir / "model.safetensors", dequantized);
  const std::string config = testing::read_file(fs::path(fixture) / "config.json");
  const size_t end = config.rfind('}');
  ASSERT_NE(end, std::string::npos);
  write_text(gptq_dir / "config.json",
             config.substr(0, end) +
                 ", \"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 64, "
                 "\"desc_act\": false, \"sym\": false, \"checkpoint_format\": \"gptq\"}}\n");
  write_text(float_dir / "config.json", config);
}

double json_number(const std::string& path, const char* key) {
  simdjson::dom::parser parser;
  return double(parser.load(path)[key]);
}

TEST(quantized_moe, a_gptq_checkpoint_is_its_dequantized_weights) {
  const char* keep = std::getenv("TROUPE_QUANT_MOE_DIR");
  const testing::temp_dir tmp("quant-moe");
  const fs::path root = keep != nullptr ? fs::path(keep) : tmp.path();
  const fs::path gptq = root / "tiny-qwen3-moe-gptq", dequantized = root / "tiny-qwen3-moe-dequantized";
  write_checkpoints(gptq, dequantized);
  if (HasFatalFailure()) return;
  const std::string json = (tmp.path() / "kl.json").string();
  const std::vector<std::string> common = {"--num-prompts", "8", "--input-len", "40", "--output-len", "12",
                                           "--json-out", json};
  auto run = [&](const std::string& model, const std::string& compared) {
    std::vector<std::string> args = {"eval", "kl", "--model", model, "--compare", "model=" + compared};
    args.insert(args.end(), common.begin(), common.end());
    return testing::run_troupe(args);
  };
  auto same = run(gptq.string(), dequantized.string());
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(json_number(json, "kl_max"), 0.0) << same.out;
  EXPECT_EQ(json_number(json, "sequence_agreement"), 1.0) << same.out;
  EXPECT_EQ(json_number(json, "positions"), 96.0);

  auto original = run(gptq.string(), std::string(TROUPE_TEST_DATA) + "/moe/tiny-qwen3-moe");
  ASSERT_EQ(original.exit_code, 0) << original.err;
  EXPECT_GT(json_number(json, "kl_mean"), 0.0) << original.out;
}

}  // namespace
}  // namespace troupe
