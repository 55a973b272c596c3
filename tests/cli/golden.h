// The fixtures' golden outputs (made by Hugging Face transformers) and the
// comparison rule of the fixtures README (vLLM's check_logprobs_close):
// walk the steps; while tokens agree, every reference top-5 logprob must
// match within `tol`; the first disagreement is accepted only if each side's
// token is in the other's top-5 and the reference's top-2 margin there is
// within `tol`; stop comparing after it.
#pragma once

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace troupe::testing {

struct step_logprobs {
  int64_t token = -1;
  std::vector<int64_t> top_ids;
  std::vector<double> top_logprobs;
};

struct golden_case {
  std::vector<int64_t> prompt_ids;
  std::vector<std::optional<double>> prompt_logprobs;
  std::vector<int64_t> greedy_ids;
  std::vector<int64_t> base_greedy_ids;  // LoRA goldens: the base model's greedy ids
  std::vector<step_logprobs> steps;
};

inline std::vector<golden_case> load_golden(const std::string& path) {
  static simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(path);
  std::vector<golden_case> cases;
  for (simdjson::dom::element c : doc["cases"].get_array()) {
    golden_case g;
    for (int64_t id : c["prompt_ids"].get_array()) g.prompt_ids.push_back(id);
    simdjson::dom::array list;
    if (c["prompt_logprobs"].get(list) == simdjson::SUCCESS) {  // (not in LoRA goldens)
      for (simdjson::dom::element lp : list) {
        if (lp.is_null()) g.prompt_logprobs.push_back(std::nullopt);
        else g.prompt_logprobs.push_back(double(lp));
      }
    }
    for (int64_t id : c["greedy_ids"].get_array()) g.greedy_ids.push_back(id);
    if (c["base_greedy_ids"].get(list) == simdjson::SUCCESS) {
      for (int64_t id : list) g.base_greedy_ids.push_back(id);
    }
    size_t t = 0;
    for (simdjson::dom::element s : c["steps"].get_array()) {
      step_logprobs step;
      step.token = g.greedy_ids[t++];
      for (int64_t id : s["top_ids"].get_array()) step.top_ids.push_back(id);
      for (double lp : s["top_logprobs"].get_array()) step.top_logprobs.push_back(lp);
      g.steps.push_back(step);
    }
    cases.push_back(g);
  }
  return cases;
}

// Token ids as "1,2,3" (--prompt-ids) and as "[1,2,3]" (JSON).
// A test parameter's name for a model directory ("tiny-llama" ->
// "tiny_llama": gtest names allow no '-').
inline std::string model_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& ch : s) {
    if (ch == '-') ch = '_';
  }
  return s;
}

inline std::string join_ids(const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}
inline std::string ids_json(const std::vector<int64_t>& ids) { return "[" + join_ids(ids) + "]"; }

// Parses one `generate --json` output's first sequence into steps.
inline std::vector<step_logprobs> parse_output_steps(simdjson::dom::element line) {
  std::vector<step_logprobs> steps;
  simdjson::dom::element out = line["outputs"].at(0);
  for (simdjson::dom::element lp : out["logprobs"].get_array()) {
    step_logprobs s;
    s.token = int64_t(lp["token_id"]);
    for (int64_t id : lp["top_ids"].get_array()) s.top_ids.push_back(id);
    for (double v : lp["top_logprobs"].get_array()) s.top_logprobs.push_back(v);
    steps.push_back(s);
  }
  return steps;
}

inline bool contains(const std::vector<int64_t>& v, int64_t x) {
  for (int64_t y : v) {
    if (y == x) return true;
  }
  return false;
}

// "" when `ours` matches `ref` by the rule, else what went wrong.
inline std::string compare_steps(const std::vector<step_logprobs>& ref,
                                 const std::vector<step_logprobs>& ours, double tol) {
  if (ours.size() != ref.size()) {
    return "generated " + std::to_string(ours.size()) + " tokens, reference has " +
           std::to_string(ref.size());
  }
  for (size_t t = 0; t < ref.size(); ++t) {
    const step_logprobs& r = ref[t];
    const step_logprobs& o = ours[t];
    if (r.token != o.token) {
      const double margin = r.top_logprobs[0] - r.top_logprobs[1];
      if (contains(r.top_ids, o.token) && contains(o.top_ids, r.token) && margin <= tol) {
        return "";  // an accepted near-tie; stop comparing
      }
      return "step " + std::to_string(t) + ": token " + std::to_string(o.token) +
             " vs reference " + std::to_string(r.token) + " (margin " + std::to_string(margin) + ")";
    }
    for (size_t k = 0; k < r.top_ids.size(); ++k) {
      // Look the reference token up among ours; a near-tie may swap ranks.
      bool found = false;
      for (size_t j = 0; j < o.top_ids.size(); ++j) {
        if (o.top_ids[j] != r.top_ids[k]) continue;
        found = true;
        if (std::abs(o.top_logprobs[j] - r.top_logprobs[k]) > tol) {
          return "step " + std::to_string(t) + ": logprob of " + std::to_string(r.top_ids[k]) +
                 " is " + std::to_string(o.top_logprobs[j]) + ", reference " +
                 std::to_string(r.top_logprobs[k]);
        }
      }
      // Missing only at the last rank when our k-th and (k+1)-th tie.
      if (!found && !(k + 1 == r.top_ids.size() &&
                      std::abs(o.top_logprobs.back() - r.top_logprobs[k]) <= tol)) {
        return "step " + std::to_string(t) + ": reference top id " +
               std::to_string(r.top_ids[k]) + " missing from our top-" +
               std::to_string(o.top_ids.size());
      }
    }
  }
  return "";
}

// One `troupe generate --json` output line against its golden case: the
// prompt, the steps (compare_steps) and the prompt logprobs within `tol`.
inline void check_golden_line(const golden_case& g, simdjson::dom::element line, const std::string& where,
                              double tol) {
  std::vector<int64_t> prompt;
  for (int64_t id : line["prompt_ids"].get_array()) prompt.push_back(id);
  EXPECT_EQ(prompt, g.prompt_ids) << where;
  const std::string problem = compare_steps(g.steps, parse_output_steps(line), tol);
  EXPECT_EQ(problem, "") << where;
  // Prompt logprobs: null first, then log p(prompt[i] | prompt[:i]).
  simdjson::dom::array plp = line["prompt_logprobs"].get_array();
  ASSERT_EQ(plp.size(), g.prompt_logprobs.size()) << where;
  size_t i = 0;
  for (simdjson::dom::element e : plp) {
    if (i == 0) {
      EXPECT_TRUE(e.is_null()) << where;
    } else {
      EXPECT_EQ(int64_t(e["token_id"]), g.prompt_ids[i]) << where;
      EXPECT_NEAR(double(e["logprob"]), *g.prompt_logprobs[i], tol) << where << " position " << i;
    }
    ++i;
  }
}

}  // namespace troupe::testing
