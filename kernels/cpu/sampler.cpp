#include "kernels/cpu/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "common/check.h"
#include "kernels/philox.h"

namespace troupe {

namespace {

constexpr float sampling_eps = 1e-5f;

// log-sum-exp of the row, in double for a stable reference.
double log_normalizer(const float* logits, int64_t vocab) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  return max_logit + std::log(sum);
}

void apply_processors(std::vector<float>& logits, const sampler_row& row) {
  constexpr float banned = -std::numeric_limits<float>::infinity();
  if (row.allowed_mask != nullptr) {
    for (size_t t = 0; t < logits.size(); ++t) {
      if (((row.allowed_mask[t / 32] >> (t % 32)) & 1u) == 0) logits[t] = banned;
    }
  }
  for (int64_t j = 0; j < row.num_biases; ++j) {
    logits[static_cast<size_t>(row.bias_ids[j])] += row.bias_values[j];
  }
}

// The processed row, or (when the processors ban every token: say
// allowed_token_ids holds only EOS under min_tokens) the raw one: a position
// always has a token to draw.
void apply_processors_or_keep_raw(std::vector<float>& logits, const sampler_row& row) {
  if (!has_logits_processors(row)) return;
  std::vector<float> processed = logits;
  apply_processors(processed, row);
  const bool any = std::any_of(processed.begin(), processed.end(),
                               [](float x) { return x > -std::numeric_limits<float>::infinity(); });
  if (any) logits = std::move(processed);
}

void apply_penalties(std::vector<float>& logits, const sampler_row& row) {
  if (row.repetition_penalty != 1.0f) {
    std::vector<bool> seen(logits.size(), false);
    auto mark = [&](const int32_t* ids, int64_t n) {
      for (int64_t i = 0; i < n; ++i) seen[static_cast<size_t>(ids[i])] = true;
    };
    mark(row.prompt_ids, row.num_prompt_ids);
    mark(row.output_ids, row.num_output_ids);
    for (size_t t = 0; t < logits.size(); ++t) {
      if (!seen[t]) continue;
      logits[t] = logits[t] > 0 ? logits[t] / row.repetition_penalty
                                : logits[t] * row.repetition_penalty;
    }
  }
  if (row.frequency_penalty != 0.0f || row.presence_penalty != 0.0f) {
    std::unordered_map<int32_t, int32_t> counts;
    for (int64_t i = 0; i < row.num_output_ids; ++i) ++counts[row.output_ids[i]];
    for (const auto& [token, count] : counts) {
      logits[static_cast<size_t>(token)] -=
          row.frequency_penalty * static_cast<float>(count) + row.presence_penalty;
    }
  }
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Sorts candidates by probability (ties: lower id first) and applies the
// min_p / top_k / top_p filters; returns the kept prefix length.
size_t filter_candidates(const std::vector<double>& probs, std::vector<int32_t>& order,
                         const sampler_row& row) {
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return probs[static_cast<size_t>(a)] != probs[static_cast<size_t>(b)]
               ? probs[static_cast<size_t>(a)] > probs[static_cast<size_t>(b)]
               : a < b;
  });
  size_t keep = order.size();
  if (row.min_p > 0.0f) {
    const double threshold = row.min_p * probs[static_cast<size_t>(order[0])];
    size_t n = 0;
    while (n < keep && probs[static_cast<size_t>(order[n])] >= threshold) ++n;
    keep = std::max<size_t>(n, 1);
  }
  if (row.top_k > 0) keep = std::min(keep, static_cast<size_t>(row.top_k));
  if (row.top_p < 1.0f) {
    double mass = 0.0;
    for (size_t i = 0; i < keep; ++i) mass += probs[static_cast<size_t>(order[i])];
    // Keep the smallest prefix whose share of the kept mass reaches top_p.
    double cumulative = 0.0;
    size_t n = 0;
    while (n < keep) {
      cumulative += probs[static_cast<size_t>(order[n])] / mass;
      ++n;
      if (cumulative >= row.top_p) break;
    }
    keep = std::max<size_t>(n, 1);
  }
  return keep;
}

bool filters_anything(const sampler_row& row, size_t vocab) {
  return row.min_p > 0.0f || (row.top_k > 0 && static_cast<size_t>(row.top_k) < vocab) ||
         row.top_p < 1.0f;
}

// softmax(logits / T) in double, the filters, and the kept tokens' race
// weights exp((logit - max) / T) rounded to float (the GPU computes the same
// quantity in float). Best first when `sorted`; otherwise, with no filter to
// apply, every token in id order (the race does not depend on the order, and
// sorting a 150k vocabulary costs more than the rest of sampling).
sampler_candidate_set candidates_of(const std::vector<float>& logits, const sampler_row& row,
                                    bool sorted) {
  const size_t vocab = logits.size();
  std::vector<double> weights(vocab);
  double max_scaled = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < vocab; ++i) {
    weights[i] = static_cast<double>(logits[i]) / row.temperature;
    max_scaled = std::max(max_scaled, weights[i]);
  }
  double total = 0.0;
  for (double& w : weights) {
    w = std::exp(w - max_scaled);
    total += w;
  }
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  size_t keep = vocab;
  if (sorted || filters_anything(row, vocab)) {
    std::vector<double> probs(vocab);
    for (size_t i = 0; i < vocab; ++i) probs[i] = weights[i] / total;
    keep = filter_candidates(probs, order, row);
  }
  sampler_candidate_set kept;
  kept.ids.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep));
  for (int32_t id : kept.ids) {
    kept.weights.push_back(static_cast<float>(weights[static_cast<size_t>(id)]));
  }
  return kept;
}

// The exponential race over the kept set (kernels/philox.h): argmax of
// weight / E with E the token's Exp(1) draw at (seed, step); ties: lowest id.
int32_t race(const sampler_candidate_set& kept, const sampler_row& row) {
  int32_t best = -1;
  float best_score = -1.0f;
  for (size_t j = 0; j < kept.ids.size(); ++j) {
    const int32_t id = kept.ids[j];
    const float score = sampling_race_score(
        kept.weights[j], sampling_exponential(row.seed, row.step, static_cast<uint32_t>(id)));
    if (score > best_score || (score == best_score && id < best)) {
      best = id;
      best_score = score;
    }
  }
  return best;
}

}  // namespace

sampler_candidate_set sampler_candidates(const float* logits, int64_t vocab,
                                         const sampler_row& row) {
  TROUPE_CHECK(vocab >= 1 && row.temperature >= sampling_eps);
  std::vector<float> work(logits, logits + vocab);
  apply_processors_or_keep_raw(work, row);
  apply_penalties(work, row);
  return candidates_of(work, row, true);
}

token_logprobs logprobs_of(const float* logits, int64_t vocab, int32_t token_id, int32_t k) {
  TROUPE_CHECK(token_id >= 0 && token_id < vocab);
  const double norm = log_normalizer(logits, vocab);
  token_logprobs out;
  out.token_id = token_id;
  out.logprob = static_cast<float>(logits[token_id] - norm);
  out.rank = 1 + static_cast<int32_t>(std::count_if(
                     logits, logits + vocab, [v = logits[token_id]](float x) { return x > v; }));
  const int64_t kk = std::min<int64_t>(std::max(k, 0), vocab);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + kk, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  for (int64_t i = 0; i < kk; ++i) {
    out.top_ids.push_back(order[static_cast<size_t>(i)]);
    out.top_logprobs.push_back(static_cast<float>(logits[order[static_cast<size_t>(i)]] - norm));
  }
  return out;
}

sample_result sample_row(const float* logits, int64_t vocab, const sampler_row& row) {
  TROUPE_CHECK(vocab >= 1);
  std::vector<float> work(logits, logits + vocab);
  apply_processors_or_keep_raw(work, row);
  apply_penalties(work, row);
  sample_result result;
  result.token_id =
      row.temperature < sampling_eps ? argmax(work) : race(candidates_of(work, row, false), row);
  if (row.num_logprobs >= 0) {
    result.logprobs = logprobs_of(logits, vocab, result.token_id, row.num_logprobs);
  }
  return result;
}

}  // namespace troupe
