#include "common/nearest_name.h"

#include <algorithm>

namespace troupe {

std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::string best;
  size_t best_distance = limit + 1;
  std::vector<size_t> prev, cur;
  for (const std::string& c : candidates) {
    prev.resize(c.size() + 1);
    cur.resize(c.size() + 1);
    for (size_t j = 0; j <= c.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= c.size(); ++j) {
        const size_t sub = prev[j - 1] + (word[i - 1] == c[j - 1] ? 0 : 1);
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
      }
      std::swap(prev, cur);
    }
    if (prev[c.size()] < best_distance) {
      best_distance = prev[c.size()];
      best = c;
    }
  }
  return best;
}

}  // namespace troupe
