#include "cli/bench/datasets.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "cli/bench/sharegpt.h"

namespace troupe::bench {

int64_t bench_rng::uniform_int(int64_t lo, int64_t hi) {
  const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  if (range == 0) return static_cast<int64_t>(next());  // the whole 64-bit range
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t x = next();
  while (x >= limit) x = next();
  return lo + static_cast<int64_t>(x % range);
}

double bench_rng::uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double bench_rng::normal() {
  const double u1 = 1.0 - uniform01();  // (0, 1]
  const double u2 = uniform01();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Marsaglia and Tsang (2000); shape < 1 by the boost gamma(a + 1) u^(1/a).
double bench_rng::gamma(double shape, double scale) {
  if (shape < 1.0) return gamma(shape + 1.0, scale) * std::pow(uniform01(), 1.0 / shape);
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = normal();
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = uniform01();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

result<dataset_kind> parse_dataset_kind(const std::string& name) {
  if (name == "random") return dataset_kind::random;
  if (name == "sharegpt") return dataset_kind::sharegpt;
  if (name == "prefix") return dataset_kind::prefix;
  if (name == "repeat") return dataset_kind::repeat;
  return make_error("--dataset: expected random, sharegpt, prefix or repeat, got '" + name + "'");
}

const char* dataset_kind_name(dataset_kind k) {
  switch (k) {
    case dataset_kind::random: return "random";
    case dataset_kind::sharegpt: return "sharegpt";
    case dataset_kind::prefix: return "prefix";
    case dataset_kind::repeat: return "repeat";
  }
  return "?";
}

const std::vector<std::string>& filler_words() {
  static const std::vector<std::string> words = {
      "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be",
      "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
      "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has",
      "there", "been", "if", "more", "when", "will", "would", "who", "so", "no", "she", "other",
      "its", "may", "these", "what", "them", "than", "some", "him", "time", "into", "only", "do",
      "could", "new", "about", "two", "first", "then", "also", "any", "like", "our", "over",
      "such", "way", "even", "most", "made", "after", "many", "before", "must", "through",
      "back", "years", "where", "much", "your", "well", "down", "should", "because", "each",
      "just", "those", "people", "how", "too", "little", "state", "good", "very", "make",
      "world", "still", "own", "see", "men", "work", "long", "here", "get", "both", "between",
      "life", "being", "under", "never", "day", "same", "another", "know", "while", "last",
      "might", "us", "great", "old", "year", "off", "come"};
  return words;
}

namespace {

struct length_range {
  int64_t lo = 0, hi = 0;
};

// vLLM: floor(len (1 - r)) .. ceil(len (1 + r)), both inclusive.
length_range range_of(int64_t len, double r) {
  return {static_cast<int64_t>(std::floor(static_cast<double>(len) * (1.0 - r))),
          static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1.0 + r)))};
}

class prompt_builder {
 public:
  prompt_builder(const dataset_options& opts, const token_source& src, bench_rng& rng)
      : opts_(opts), src_(src), rng_(rng) {
    for (int64_t id = 0; id < src.vocab_size; ++id) {
      if (src.tok == nullptr || !src.tok->is_special(static_cast<int32_t>(id))) {
        allowed_.push_back(static_cast<int32_t>(id));
      }
    }
    if (src.tok != nullptr) num_special_ = static_cast<int64_t>(src.tok->encode("", true).size());
  }

  int64_t num_allowed() const { return static_cast<int64_t>(allowed_.size()); }
  // Special tokens the server adds to a text prompt (vLLM subtracts them).
  int64_t text_overhead() const {
    return opts_.format == prompt_format::text ? num_special_ : 0;
  }
  int32_t allowed_at(int64_t i) const {
    return allowed_[static_cast<size_t>(i % static_cast<int64_t>(allowed_.size()))];
  }
  int32_t random_id() { return allowed_at(rng_.uniform_int(0, static_cast<int64_t>(allowed_.size()) - 1)); }
  std::vector<int32_t> random_ids(int64_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = random_id();
    return ids;
  }

  // Fills the request's prompt from `ids` in the chosen format.
  void finish(sample_request& r, std::vector<int32_t> ids) {
    if (opts_.format == prompt_format::ids) {
      r.prompt_len = static_cast<int64_t>(ids.size());
      r.prompt_ids = std::move(ids);
    } else if (src_.tok == nullptr) {
      const auto& words = filler_words();
      for (int32_t id : ids) {
        if (!r.prompt_text.empty()) r.prompt_text += ' ';
        r.prompt_text += words[static_cast<size_t>(id) % words.size()];
      }
      r.prompt_len = static_cast<int64_t>(ids.size());
    } else {
      decode_to_length(r, std::move(ids));
    }
  }

 private:
  // vLLM's gen_prompt_decode_to_target_len: decode, re-encode, truncate or
  // pad with random ids, a few rounds, so the text encodes to the target.
  void decode_to_length(sample_request& r, std::vector<int32_t> ids) {
    const size_t target = ids.size();
    std::string text = src_.tok->decode(ids, false);
    for (int round = 0; round < 10; ++round) {
      std::vector<int32_t> enc = src_.tok->encode(text, false);
      if (enc.size() == target) break;
      if (enc.size() > target) {
        enc.resize(target);
      } else {
        for (size_t k = enc.size(); k < target; ++k) enc.push_back(random_id());
      }
      text = src_.tok->decode(enc, false);
    }
    r.prompt_len = static_cast<int64_t>(src_.tok->encode(text, false).size()) + num_special_;
    r.prompt_text = std::move(text);
  }

  const dataset_options& opts_;
  const token_source& src_;
  bench_rng& rng_;
  std::vector<int32_t> allowed_;
  int64_t num_special_ = 0;
};

status check_lengths(const dataset_options& o) {
  if (o.num_prompts < 1) return make_error("--num-prompts: must be >= 1");
  if (!(o.range_ratio >= 0 && o.range_ratio < 1)) return make_error("--range-ratio: must be in [0, 1)");
  if (o.input_len < 0) return make_error("--input-len: must be >= 0");
  if (o.output_len < 1) return make_error("--output-len: must be >= 1");
  if (o.kind == dataset_kind::prefix) {
    if (o.prefix_len < 1) return make_error("--prefix-len: must be >= 1");
    if (o.num_prefix_groups < 1) return make_error("--num-prefix-groups: must be >= 1");
  }
  if (o.kind == dataset_kind::repeat && o.repeat_block_len < 1) {
    return make_error("--repeat-block-len: must be >= 1");
  }
  return {};
}

std::vector<sample_request> synthetic(const dataset_options& o, prompt_builder& b, bench_rng& rng) {
  const size_t n = static_cast<size_t>(o.num_prompts);
  const length_range in = range_of(std::max<int64_t>(0, o.input_len - b.text_overhead()), o.range_ratio);
  length_range out = range_of(o.output_len, o.range_ratio);
  out.lo = std::max<int64_t>(out.lo, 1);
  std::vector<int64_t> input_lens(n), output_lens(n), offsets(n);
  for (int64_t& v : input_lens) v = rng.uniform_int(in.lo, in.hi);
  for (int64_t& v : output_lens) v = rng.uniform_int(out.lo, out.hi);
  for (int64_t& v : offsets) v = rng.uniform_int(0, b.num_allowed() - 1);
  std::vector<std::vector<int32_t>> prefixes;
  if (o.kind == dataset_kind::prefix) {
    for (int64_t g = 0; g < o.num_prefix_groups; ++g) prefixes.push_back(b.random_ids(o.prefix_len));
  }
  std::vector<sample_request> out_requests(n);
  for (size_t i = 0; i < n; ++i) {
    sample_request& r = out_requests[i];
    r.output_len = output_lens[i];
    std::vector<int32_t> ids;
    const int64_t len = input_lens[i];
    switch (o.kind) {
      case dataset_kind::random:
        for (int64_t j = 0; j < len; ++j) ids.push_back(b.allowed_at(offsets[i] + static_cast<int64_t>(i) + j));
        break;
      case dataset_kind::prefix: {
        r.group = static_cast<int64_t>(i) % o.num_prefix_groups;
        ids = prefixes[static_cast<size_t>(r.group)];
        const std::vector<int32_t> suffix = b.random_ids(len);
        ids.insert(ids.end(), suffix.begin(), suffix.end());
        break;
      }
      case dataset_kind::repeat: {
        const std::vector<int32_t> block = b.random_ids(std::min(o.repeat_block_len, std::max<int64_t>(len, 1)));
        for (int64_t j = 0; j < len; ++j) ids.push_back(block[static_cast<size_t>(j) % block.size()]);
        break;
      }
      case dataset_kind::sharegpt: break;
    }
    b.finish(r, std::move(ids));
  }
  if (o.kind == dataset_kind::prefix) rng.shuffle(out_requests);
  return out_requests;
}

}  // namespace

result<std::vector<sample_request>> make_dataset(const dataset_options& opts, const token_source& src) {
  if (auto s = check_lengths(opts); !s) return std::move(s).take_error();
  bench_rng rng(opts.seed);
  if (opts.kind == dataset_kind::sharegpt) return load_sharegpt(opts, src, rng);
  prompt_builder builder(opts, src, rng);
  if (builder.num_allowed() == 0) {
    return make_error("no token ids to draw prompts from (vocab_size " + std::to_string(src.vocab_size) + ")");
  }
  return synthetic(opts, builder, rng);
}

}  // namespace troupe::bench
