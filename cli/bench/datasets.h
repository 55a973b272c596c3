// Benchmark datasets: the prompts (token ids or text) and their max_tokens,
// deterministic for a seed. Shared by `bench serve`, `bench throughput` and
// `bench latency`.
//
//   random    vLLM's random dataset: lengths uniform integers in
//             [floor(len (1 - r)), ceil(len (1 + r))] (output at least 1);
//             prompt i is the ids (offset_i + i + j) mod |allowed|, j < len
//   sharegpt  a ShareGPT JSON file: conversations[0] is the prompt,
//             conversations[1] the reference whose length (tokens with a
//             tokenizer, else bytes / 4) is max_tokens unless --output-len
//             fixes it; vLLM's filter (prompt >= 4, reference >= 4 unless
//             fixed, prompt <= 1024, prompt + output <= 2048), shuffled,
//             oversampled when too few
//   prefix    num_prefix_groups random prefixes of prefix_len tokens; request
//             i uses prefix i mod groups plus a random suffix of input_len
//             (range ratio applies); then shuffled
//   repeat    a random block of repeat_block_len tokens repeated up to the
//             prompt's length (n-gram speculative decoding finds matches)
//
// Token ids are drawn from [0, vocab_size) without the tokenizer's special
// ids. Text prompts: with a tokenizer, the ids decoded (then re-encoded and
// adjusted until they encode to the wanted length, as vLLM does); without
// one, one common English word per id (about a token each; the server's
// usage gives the real count).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/tokenizer/tokenizer.h"

namespace troupe::bench {

// std::mt19937_64 (fully specified by the standard) with distributions
// written here, so that a seed gives the same numbers on every platform.
class bench_rng {
 public:
  explicit bench_rng(uint64_t seed) : gen_(seed) {}
  uint64_t next() { return gen_(); }
  int64_t uniform_int(int64_t lo, int64_t hi);  // inclusive; REQUIRES lo <= hi
  double uniform01();                           // [0, 1)
  double normal();                              // standard normal
  double gamma(double shape, double scale);     // REQUIRES shape > 0
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) {
      std::swap(v[i - 1], v[static_cast<size_t>(uniform_int(0, static_cast<int64_t>(i) - 1))]);
    }
  }

 private:
  std::mt19937_64 gen_;
};

enum class dataset_kind { random, sharegpt, prefix, repeat };
enum class prompt_format { ids, text };

result<dataset_kind> parse_dataset_kind(const std::string& name);
const char* dataset_kind_name(dataset_kind k);

struct dataset_options {
  dataset_kind kind = dataset_kind::random;
  int64_t num_prompts = 1000;
  int64_t input_len = 1024;   // random/repeat: prompt; prefix: suffix
  int64_t output_len = 128;
  bool output_len_set = false;  // sharegpt: fixed max_tokens instead of the reference length
  double range_ratio = 0;       // [0, 1)
  std::string dataset_path;     // sharegpt
  int64_t prefix_len = 256;
  int64_t num_prefix_groups = 10;
  int64_t repeat_block_len = 64;
  uint64_t seed = 0;
  prompt_format format = prompt_format::ids;
};

// Where token ids come from.
struct token_source {
  int64_t vocab_size = 0;          // ids in [0, vocab_size)
  const tokenizer* tok = nullptr;  // optional: special ids excluded, text decoded
};

struct sample_request {
  std::vector<int32_t> prompt_ids;  // format ids
  std::string prompt_text;          // format text
  int64_t prompt_len = 0;           // tokens (an estimate for text without a tokenizer)
  int64_t output_len = 0;           // max_tokens
  int64_t group = -1;               // prefix: the prefix group
};

// Every problem names its flag (--input-len, --dataset-path, ...).
result<std::vector<sample_request>> make_dataset(const dataset_options& opts,
                                                 const token_source& src);

// The common English words used for text without a tokenizer.
const std::vector<std::string>& filler_words();

}  // namespace troupe::bench
