#include "actors/drafter/ngram_proposer.h"

#include <algorithm>

#include "common/check.h"

namespace troupe {

ngram_proposer::ngram_proposer(const ngram_config& config) : config_(config) {
  TROUPE_CHECK(config.num_speculative_tokens >= 1 && config.prompt_lookup_min >= 1 &&
               config.prompt_lookup_min <= config.prompt_lookup_max);
}

std::string ngram_proposer::key(const std::vector<int32_t>& t, int64_t end, int32_t n) {
  const int32_t* first = t.data() + (end - n + 1);
  return std::string(reinterpret_cast<const char*>(first), static_cast<size_t>(n) * sizeof(int32_t));
}

void ngram_proposer::index_through(history& h, int64_t end) const {
  for (int64_t e = h.indexed_end + 1; e <= end; ++e) {
    for (int32_t n = config_.prompt_lookup_min; n <= config_.prompt_lookup_max; ++n) {
      if (e + 1 < n) break;  // not enough tokens for this length (nor longer ones)
      h.index[static_cast<size_t>(n - config_.prompt_lookup_min)][key(h.tokens, e, n)] = e;
    }
  }
  h.indexed_end = std::max(h.indexed_end, end);
}

void ngram_proposer::add(request_id id, const std::vector<int32_t>& tokens) {
  history h;
  h.index.resize(static_cast<size_t>(config_.prompt_lookup_max - config_.prompt_lookup_min + 1));
  h.tokens = tokens;
  // Every n-gram but those ending at the last token: a match must be earlier.
  index_through(h, static_cast<int64_t>(h.tokens.size()) - 2);
  requests_[id] = std::move(h);
}

void ngram_proposer::append(request_id id, const std::vector<int32_t>& tokens) {
  auto it = requests_.find(id);
  if (it == requests_.end() || tokens.empty()) return;
  history& h = it->second;
  h.tokens.insert(h.tokens.end(), tokens.begin(), tokens.end());
  index_through(h, static_cast<int64_t>(h.tokens.size()) - 2);
}

void ngram_proposer::remove(request_id id) { requests_.erase(id); }

std::vector<int32_t> ngram_proposer::propose(request_id id, int64_t limit) const {
  auto it = requests_.find(id);
  const int64_t k = std::min<int64_t>(config_.num_speculative_tokens, limit);
  if (it == requests_.end() || k <= 0) return {};
  const history& h = it->second;
  const auto len = static_cast<int64_t>(h.tokens.size());
  // Longest suffix first; its latest earlier occurrence.
  for (int32_t n = config_.prompt_lookup_max; n >= config_.prompt_lookup_min; --n) {
    if (len < n + 1) continue;  // a suffix of n tokens and an earlier occurrence
    const auto& index = h.index[static_cast<size_t>(n - config_.prompt_lookup_min)];
    auto found = index.find(key(h.tokens, len - 1, n));
    if (found == index.end()) continue;
    // The tokens after the occurrence; past the history's end the copy
    // continues over what it has proposed (as an LZ77 match may overlap).
    const int64_t start = found->second + 1;
    std::vector<int32_t> out;
    out.reserve(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) {
      const int64_t at = start + i;
      out.push_back(at < len ? h.tokens[static_cast<size_t>(at)] : out[static_cast<size_t>(at - len)]);
    }
    return out;
  }
  return {};
}

}  // namespace troupe
