// grammar_bench: the structured-output engine's CPU costs, for
// docs/structured_outputs.md:
//   - compile time of every JSON Schema of tests/data/structured/corpus.json
//     (schema -> grammar -> automata);
//   - per-token mask time (fill_mask, then accept of the chosen token) over
//     a real vocabulary (Llama 3.1's 128k by default), at batch 1 and 64:
//     each slot a random walk through one schema of the corpus (slot i takes
//     schema i mod 16), restarted when it ends, cold (the first walks, state
//     splits computed as they are met) and warm (later walks).
// Usage: grammar_bench [--tokenizer DIR] [--corpus FILE] [--steps N] [--whitespace]
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "grammar/compiled.h"
#include "grammar/constraint_cache.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"
#include "model/tokenizer/tokenizer.h"

using namespace troupe;
using clock_type = std::chrono::steady_clock;

namespace {

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

struct stats {
  double mean = 0, p50 = 0, p99 = 0, max = 0;
};

stats summarize(std::vector<double> v) {
  stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  s.max = v.back();
  return s;
}

// Runs `steps` decode steps of `batch` walks; per-token times (us) and
// per-step totals (ms, one worker thread does every row).
void run(const std::vector<std::shared_ptr<const grammar::token_grammar>>& grammars, int batch, int steps,
         uint32_t seed, std::vector<double>& per_token, std::vector<double>& per_step) {
  std::mt19937 rng(seed);
  const auto& vocab = grammars[0]->vocab();
  std::vector<grammar::matcher> slots;
  for (int i = 0; i < batch; ++i) slots.emplace_back(grammars[static_cast<size_t>(i) % grammars.size()]);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab.mask_words()));
  std::vector<int32_t> allowed;
  for (int s = 0; s < steps; ++s) {
    double step_us = 0;
    for (int i = 0; i < batch; ++i) {
      grammar::matcher& m = slots[static_cast<size_t>(i)];
      const auto t0 = clock_type::now();
      m.fill_mask(mask.data());
      double t = us_since(t0);
      allowed.clear();  // the sampler's choice: a uniformly random allowed token (not timed)
      for (size_t w = 0; w < mask.size(); ++w) {
        for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
          allowed.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits))));
        }
      }
      if (allowed.empty() || (m.can_end() && rng() % 2 == 0)) {  // ends: a new walk in the slot
        m = grammar::matcher(grammars[static_cast<size_t>(i) % grammars.size()]);
        continue;
      }
      const int32_t token = allowed[rng() % allowed.size()];
      const auto t1 = clock_type::now();
      m.accept(token);
      t += us_since(t1);
      per_token.push_back(t);
      step_us += t;
    }
    per_step.push_back(step_us / 1000.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_dir = "tests/data/tokenizers/llama3_1", corpus_path = "tests/data/structured/corpus.json";
  int steps = 400;
  bool whitespace = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokenizer" && i + 1 < argc) tok_dir = argv[++i];
    else if (a == "--corpus" && i + 1 < argc) corpus_path = argv[++i];
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--whitespace") whitespace = true;
    else {
      std::fprintf(stderr, "usage: grammar_bench [--tokenizer DIR] [--corpus FILE] [--steps N] [--whitespace]\n");
      return 2;
    }
  }
  auto tok = tokenizer::load(tok_dir);
  if (!tok) {
    std::fprintf(stderr, "grammar_bench: %s\n", tok.error_message().c_str());
    return 1;
  }
  auto t0 = clock_type::now();
  auto vocab = grammar::token_vocabulary::of(**tok, (*tok)->vocab_size());
  std::printf("vocabulary: %lld tokens (%d with bytes), table built in %.1f ms\n",
              static_cast<long long>(vocab->size()), vocab->num_sorted(), us_since(t0) / 1000);

  simdjson::dom::parser parser;
  simdjson::padded_string json;
  if (simdjson::padded_string::load(corpus_path).get(json) != simdjson::SUCCESS) {
    std::fprintf(stderr, "grammar_bench: cannot read %s\n", corpus_path.c_str());
    return 1;
  }
  simdjson::dom::element corpus = parser.parse(json);
  std::vector<double> compile_ms;
  std::vector<std::shared_ptr<const grammar::token_grammar>> grammars;
  grammar::json_options options;
  options.any_whitespace = whitespace;
  for (simdjson::dom::element s : corpus["schemas"].get_array()) {
    const std::string text = simdjson::minify(s["schema"]);
    t0 = clock_type::now();
    auto g = grammar::json_schema_grammar(text, options);
    auto compiled = g ? grammar::compiled_grammar::compile(*g)
                      : result<std::shared_ptr<const grammar::compiled_grammar>>(std::move(g).take_error());
    compile_ms.push_back(us_since(t0) / 1000);
    if (!compiled) {
      std::fprintf(stderr, "grammar_bench: %s\n", compiled.error_message().c_str());
      return 1;
    }
    grammars.push_back(std::make_shared<const grammar::token_grammar>(*compiled, vocab));
  }
  const stats c = summarize(compile_ms);
  std::printf("compile (%zu JSON Schemas, %s): mean %.3f ms, max %.3f ms\n", compile_ms.size(),
              whitespace ? "JSON whitespace" : "compact", c.mean, c.max);
  for (int batch : {1, 64}) {
    for (const char* phase : {"cold", "warm"}) {
      std::vector<double> per_token, per_step;
      run(grammars, batch, batch == 1 ? steps * 4 : steps, std::strcmp(phase, "cold") == 0 ? 1 : 2, per_token,
          per_step);
      const stats t = summarize(per_token), st = summarize(per_step);
      std::printf("batch %2d %s: per token mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us; "
                  "per step mean %.3f ms, p99 %.3f ms (%zu tokens)\n",
                  batch, phase, t.mean, t.p50, t.p99, t.max, st.mean, st.p99, per_token.size());
    }
  }
  int64_t splits = 0;
  for (const auto& g : grammars) splits += g->num_computed();
  std::printf("state splits computed by the walks: %lld\n", static_cast<long long>(splits));
  // Every reading state's split, from scratch (what an eager compile costs).
  double all_ms = 0;
  int64_t states = 0;
  std::vector<double> per_state;
  for (const auto& g : grammars) {
    const grammar::token_grammar fresh(std::shared_ptr<const grammar::compiled_grammar>(g, &g->automaton()), vocab);
    for (int32_t st = 0; st < g->automaton().num_states(); ++st) {
      if (!g->automaton().at(st).consumes) continue;
      t0 = clock_type::now();
      fresh.masks(st);
      per_state.push_back(us_since(t0) / 1000);
      all_ms += per_state.back();
      ++states;
    }
  }
  const stats ps = summarize(per_state);
  std::printf("every state's split: %lld states, %.1f ms in all; per state mean %.3f ms, p50 %.3f ms, max %.3f ms\n",
              static_cast<long long>(states), all_ms, ps.mean, ps.p50, ps.max);
  return 0;
}
