// Loading of the BPE model and its per-piece entry point; the merge loop is
// in bpe_merge.cpp.
#include "model/tokenizer/bpe_model.h"

#include <atomic>
#include <cstdio>

#include "model/tokenizer/bpe_cache.h"
#include "model/tokenizer/byte_level.h"

namespace troupe::tok {
namespace {

std::atomic<uint64_t> next_cache_owner{1};
constexpr std::string_view kMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's space

}  // namespace

result<std::unique_ptr<bpe_model>> bpe_model::parse(json spec, bool byte_level) {
  const std::string type = json_type(spec);
  if (type != "BPE" && !(type.empty() && json_member(spec, "merges"))) {
    return make_error("unsupported model '" + type + "' (supported: BPE)");
  }
  auto m = std::make_unique<bpe_model>();
  double dropout = 0;
  if (auto d = json_member(spec, "dropout");
      d && d->get(dropout) == simdjson::SUCCESS && dropout > 0) {
    return make_error("BPE dropout is not supported");
  }
  auto unk = json_string(spec, "unk_token");
  auto prefix = json_string(spec, "continuing_subword_prefix");
  auto suffix = json_string(spec, "end_of_word_suffix");
  auto fuse_unk = json_bool(spec, "fuse_unk", false);
  auto byte_fallback = json_bool(spec, "byte_fallback", false);
  auto ignore_merges = json_bool(spec, "ignore_merges", false);
  for (const auto* r : {&unk, &prefix, &suffix}) {
    if (!r->ok()) return make_error("model: " + r->error_message());
  }
  for (const auto* r : {&fuse_unk, &byte_fallback, &ignore_merges}) {
    if (!r->ok()) return make_error("model: " + r->error_message());
  }
  m->byte_level_ = byte_level;
  m->fuse_unk_ = *fuse_unk;
  m->byte_fallback_ = *byte_fallback;
  m->ignore_merges_ = *ignore_merges;
  m->continuing_subword_prefix_ = prefix->value_or("");
  m->end_of_word_suffix_ = suffix->value_or("");
  const std::optional<json> vocab = json_member(spec, "vocab");
  const std::optional<json> merges = json_member(spec, "merges");
  if (!vocab || !merges) return make_error("model: BPE needs 'vocab' and 'merges'");
  if (status s = m->load_vocab(*vocab); !s.ok()) return std::move(s).take_error();
  if (status s = m->load_merges(*merges); !s.ok()) return std::move(s).take_error();
  if (*unk) m->unk_id_ = m->vocab_.find(**unk);
  m->split_at_marker_ = !byte_level && m->marker_never_follows_other_chars();
  m->cache_owner_ = next_cache_owner.fetch_add(1);
  return m;
}

status bpe_model::load_vocab(json vocab) {
  simdjson::dom::object entries;
  if (vocab.get(entries) != simdjson::SUCCESS)
    return make_error("model: 'vocab' must be an object");
  vocab_.reserve(entries.size());
  int64_t max_id = -1;
  for (auto [key, value] : entries) {
    int64_t id = 0;
    if (value.get(id) != simdjson::SUCCESS || id < 0 || id > INT32_MAX) {
      return make_error("model: vocab id of '" + std::string(key) +
                        "' must be a non-negative integer");
    }
    vocab_.insert(key, static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  vocab_r_.assign(static_cast<size_t>(max_id + 1), std::string());
  has_id_.assign(static_cast<size_t>(max_id + 1), false);
  std::string raw;
  if (byte_level_) raw_vocab_.reserve(entries.size());
  for (auto [key, value] : entries) {
    int64_t id = 0;
    if (value.get(id) != simdjson::SUCCESS) continue;
    vocab_r_[id] = std::string(key);
    has_id_[id] = true;
    raw.clear();
    if (byte_level_ && byte_level_decode(key, raw))
      raw_vocab_.insert(raw, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    byte_ids_[b] = byte_level_ ? raw_vocab_.find(std::string_view(&byte, 1)) : -1;
  }
  return {};
}

status bpe_model::load_merges(json merges) {
  simdjson::dom::array list;
  if (merges.get(list) != simdjson::SUCCESS) return make_error("model: 'merges' must be a list");
  merges_.reserve(list.size());
  int32_t rank = 0;
  for (json item : list) {
    std::string_view line;
    simdjson::dom::array pair;
    std::string_view left, right;
    if (item.get(line) == simdjson::SUCCESS) {
      if (rank == 0 && line.starts_with("#version")) continue;
      const size_t space = line.find(' ');
      if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
        return make_error("model: merge " + std::to_string(rank + 1) + " is not 'a b'");
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (item.get(pair) != simdjson::SUCCESS || pair.size() != 2 ||
               pair.at(0).get(left) != simdjson::SUCCESS ||
               pair.at(1).get(right) != simdjson::SUCCESS) {
      return make_error("model: merge " + std::to_string(rank + 1) + " is not [a, b]");
    }
    if (status s = add_merge(left, right, rank); !s.ok()) return s;
    ++rank;
  }
  return {};
}

status bpe_model::add_merge(std::string_view left, std::string_view right, int32_t rank) {
  const int32_t left_id = vocab_.find(left);
  const int32_t right_id = vocab_.find(right);
  const size_t prefix = std::min(continuing_subword_prefix_.size(), right.size());
  std::string merged(left);
  merged += right.substr(prefix);
  const int32_t new_id = vocab_.find(merged);
  for (const auto& [token, id] :
       {std::pair{std::string_view(left), left_id}, std::pair{std::string_view(right), right_id},
        std::pair{std::string_view(merged), new_id}}) {
    if (id < 0)
      return make_error("model: merge token '" + std::string(token) + "' is not in the vocab");
  }
  merges_.insert(left_id, right_id, bpe_merge{rank, new_id});
  return {};
}

const std::string* bpe_model::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_r_.size() || !has_id_[id]) return nullptr;
  return &vocab_r_[id];
}

bool bpe_model::marker_never_follows_other_chars() const {
  if (vocab_.find(kMarker) < 0) return false;
  for (const std::string& token : vocab_r_) {
    for (size_t at = token.find(kMarker, 1); at != std::string::npos;
         at = token.find(kMarker, at + 1)) {
      if (at < kMarker.size() || token.compare(at - kMarker.size(), kMarker.size(), kMarker) != 0) {
        return false;
      }
    }
  }
  return true;
}

void bpe_model::tokenize(std::string_view piece, std::vector<int32_t>& ids) const {
  if (ignore_merges_) {
    if (const int32_t id = lookup(piece); id >= 0) {
      ids.push_back(id);
      return;
    }
  }
  if (!split_at_marker_) {
    tokenize_cached(piece, ids);
    return;
  }
  size_t start = 0;
  for (size_t at = piece.find(kMarker, 1); at != std::string_view::npos;
       at = piece.find(kMarker, at + kMarker.size())) {
    if (at >= kMarker.size() && piece.substr(at - kMarker.size(), kMarker.size()) == kMarker)
      continue;
    tokenize_cached(piece.substr(start, at - start), ids);
    start = at;
  }
  tokenize_cached(piece.substr(start), ids);
}

void bpe_model::tokenize_cached(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.size() >= bpe_cache::kMaxPieceBytes) {
    merge_word(piece, ids);
    return;
  }
  const uint64_t hash = hash_bytes(piece);
  bpe_cache& cache = bpe_cache::for_thread(cache_owner_);
  if (const std::vector<int32_t>* hit = cache.find(hash, piece)) {
    ids.insert(ids.end(), hit->begin(), hit->end());
    return;
  }
  const size_t mark = ids.size();
  merge_word(piece, ids);
  cache.store(hash, piece, ids.data() + mark, ids.size() - mark);
}

}  // namespace troupe::tok
