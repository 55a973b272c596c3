// Parsing speculative_config as vLLM's SpeculativeConfig does (its
// __post_init__ and _verify_args; messages quoted from it where it has
// one), every problem collected. Checks run in a fixed order: method and
// model, num_speculative_tokens, the prompt_lookup pair, then the other keys
// in name order.
#include "config/speculative_config.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>
#include <string_view>

#include "common/check.h"
#include "config/engine_config.h"

namespace troupe {
namespace {

using problem_list = std::vector<std::string>;

// The keys troupe reads.
constexpr std::string_view supported_keys[] = {"method", "model", "num_speculative_tokens",
                                               "prompt_lookup_min", "prompt_lookup_max"};

// SpeculativeConfig's other user-facing fields (vLLM main): valid in vLLM,
// rejected here as not supported by troupe. (Its internal fields, target_model_config and the
// like, and tensor_parallel_size, which vLLM itself rejects, are unknown
// keys here.)
constexpr std::string_view vllm_only_keys[] = {
    "enforce_eager", "draft_tensor_parallel_size", "quantization", "moe_backend",
    "attention_backend", "kv_cache_dtype", "max_model_len", "revision", "code_revision",
    "index_share_for_mtp_iteration", "disable_padded_drafter_batch", "disable_eagle_block_drop",
    "use_local_argmax_reduction", "use_heterogeneous_vocab", "parallel_drafting",
    "num_speculative_tokens_per_batch_size", "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob", "draft_load_config", "rejection_sample_method",
    "synthetic_acceptance_rates", "synthetic_acceptance_length", "enable_adaptive_verification",
    "draft_sample_method", "dspark_draft_topk"};

// vLLM's SpeculativeMethod values other than ngram. Its per-model MTP names
// ("deepseek_mtp", "qwen3_next_mtp", ...: deprecated aliases of "mtp") are
// matched by their "_mtp" suffix.
constexpr std::string_view vllm_other_methods[] = {
    "ngram_gpu", "suffix", "draft_model", "eagle", "eagle3", "mtp", "medusa", "mlp_speculator",
    "dflash", "dspark", "extract_hidden_states", "custom_class"};

template <size_t N>
bool contains(const std::string_view (&list)[N], std::string_view s) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

template <size_t N>
std::string join(const std::string_view (&list)[N]) {
  std::string s;
  for (std::string_view item : list) (s += s.empty() ? "" : ", ") += item;
  return s;
}

bool is_ngram(const std::string& name) { return name == "ngram" || name == "[ngram]"; }

bool is_vllm_method(const std::string& m) {
  const bool mtp_alias = m.size() > 4 && m.compare(m.size() - 4, 4, "_mtp") == 0;
  return is_ngram(m) || mtp_alias || contains(vllm_other_methods, m);
}

// Reads the configuration mapping; a problem's key is "speculative_config.<key>".
class reader {
 public:
  reader(const std::map<std::string, std::string>& raw, problem_list& out)
      : raw_(raw), out_(out) {}

  // The key's text, or "" when absent or null.
  std::string text(const std::string& key) const {
    const auto it = raw_.find(key);
    return it == raw_.end() ? "" : it->second;
  }

  // The key's value as an integer; nullopt (with a problem when it is set
  // but not an integer) otherwise.
  std::optional<int64_t> integer(const std::string& key) {
    std::string_view s = text(key);
    if (s.empty()) return std::nullopt;
    if (s.front() == '+') s.remove_prefix(1);
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
      problem(key, "expected an integer, got '" + text(key) + "'");
      return std::nullopt;
    }
    if (v > std::numeric_limits<int32_t>::max()) {
      problem(key, std::to_string(v) + " is too large (at most " +
                       std::to_string(std::numeric_limits<int32_t>::max()) + ")");
      return std::nullopt;
    }
    return v;
  }

  void problem(const std::string& key, const std::string& message) {
    out_.push_back("speculative_config" + (key.empty() ? "" : "." + key) + ": " + message);
  }

 private:
  const std::map<std::string, std::string>& raw_;
  problem_list& out_;
};

// The method vLLM would run, "ngram" or "" (after recording why not).
std::string resolve_method(reader& r) {
  const std::string method = r.text("method");
  const std::string model = r.text("model");
  const std::string supported = "(supported: ngram)";
  if (method.empty()) {
    // vLLM: no method, model "ngram" / "[ngram]": ngram; any other model:
    // the method is detected from the model's config (draft_model, eagle,
    // mtp, ...); neither: draft_model, which needs a model.
    if (is_ngram(model)) return "ngram";
    if (model.empty()) {
      r.problem("method", "must be provided when model is not " + supported);
    } else {
      r.problem("model", "'" + model + "' without a method: vLLM infers the method from the "
                         "model (draft_model, eagle, mtp, ...), which troupe does not support " +
                             supported);
    }
    return "";
  }
  if (is_ngram(method)) return "ngram";  // model, if any, is ignored (as vLLM)
  if (is_vllm_method(method)) {
    r.problem("method", "'" + method + "' is not supported by troupe " + supported);
  } else {
    r.problem("method", "'" + method + "' is not a vLLM speculative method (ngram, " +
                            join(vllm_other_methods) + "); troupe supports ngram");
  }
  return "";
}

}  // namespace

speculative_settings parse_speculative_config(const std::map<std::string, std::string>& raw,
                                              std::vector<std::string>& problems) {
  speculative_settings s;
  if (raw.empty()) return s;  // unset: disabled
  reader r(raw, problems);
  const std::string method = resolve_method(r);

  const std::optional<int64_t> k = r.integer("num_speculative_tokens");
  if (k && *k <= 0) {
    r.problem("", "Expected num_speculative_tokens to be greater than zero (" +
                      std::to_string(*k) + ").");
  } else if (!k && r.text("num_speculative_tokens").empty() && !method.empty()) {
    r.problem("", "num_speculative_tokens must be provided with speculative model unless the "
                  "draft model config contains an n_predict parameter.");
  }

  // Each bound must be >= 1 (vLLM: a pydantic ge=1; the message is vLLM's
  // own from before that); an unset one takes the other's value, both unset
  // are 5 (vLLM's defaults).
  const bool lo_set = !r.text("prompt_lookup_min").empty();
  const bool hi_set = !r.text("prompt_lookup_max").empty();
  std::optional<int64_t> lo = r.integer("prompt_lookup_min");
  std::optional<int64_t> hi = r.integer("prompt_lookup_max");
  bool bounds_ok = (!lo_set || lo) && (!hi_set || hi);  // a non-integer is reported
  for (const auto& [name, v] :
       {std::pair{"prompt_lookup_min", lo}, std::pair{"prompt_lookup_max", hi}}) {
    if (!v || *v >= 1) continue;
    r.problem("", std::string(name) + "=" + std::to_string(*v) + " must be > 0");
    bounds_ok = false;
  }
  if (!lo_set && !hi_set) lo = hi = 5;
  else if (!lo_set) lo = hi;
  else if (!hi_set) hi = lo;
  if (bounds_ok && *lo > *hi) {
    r.problem("", "prompt_lookup_min=" + std::to_string(*lo) +
                      " must be <= prompt_lookup_max=" + std::to_string(*hi));
  }

  for (const auto& [key, value] : raw) {
    if (contains(supported_keys, key)) continue;
    if (contains(vllm_only_keys, key)) {
      if (value.empty()) continue;  // null: vLLM's default, nothing asked of troupe
      r.problem(key, "not supported by troupe (supported keys: " + join(supported_keys) + ")");
    } else {
      r.problem(key, "unknown key (known: " + join(supported_keys) + ")");
    }
  }

  s.method = method;
  if (k && *k > 0) s.num_speculative_tokens = static_cast<int32_t>(*k);
  if (bounds_ok) {
    s.prompt_lookup_min = static_cast<int32_t>(*lo);
    s.prompt_lookup_max = static_cast<int32_t>(*hi);
  }
  return s;
}

speculative_settings speculative_settings_of(const engine_config& config) {
  std::vector<std::string> problems;
  speculative_settings s = parse_speculative_config(config.speculative_config, problems);
  TROUPE_CHECK_MSG(problems.empty(), "speculative_settings_of: config not validated");
  return s;
}

}  // namespace troupe
