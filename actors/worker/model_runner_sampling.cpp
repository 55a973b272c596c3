// model_runner's sampling half: each logits row's sampler_row (penalties,
// logits processors, a constraint's mask), computing the logits and
// sampling them on the device (or on the host), and the rows sampled late:
// a request whose sampler needs its last token (penalties, a constraint)
// planned while that token is still being sampled has its row sampled once
// the token is back (sample_deferred), while the step's forward runs.
#include "actors/worker/model_runner.h"

#include <algorithm>

#include "common/check.h"
#include "config/logging.h"
#include "grammar/constraint_cache.h"

namespace troupe {

namespace {

// The sampler's view of a request's parameters (seed, step and token
// history are filled in by the caller).
sampler_row sampler_row_for(const sampling_params& p, uint64_t seed) {
  sampler_row s;
  s.temperature = p.temperature;
  s.top_p = p.top_p;
  s.top_k = p.top_k;
  s.min_p = p.min_p;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.repetition_penalty = p.repetition_penalty;
  s.num_logprobs = p.logprobs;
  s.seed = seed;
  return s;
}

}  // namespace

sampler_row model_runner::next_token_row(const request_state& r, int32_t spec_index,
                                         row_storage& storage, int64_t pending) const {
  const int64_t num_outputs = static_cast<int64_t>(r.token_ids.size()) - r.num_prompt_tokens;
  sampler_row s = sampler_row_for(r.params, r.seed);
  // Output index of the token drawn now (tokens still being sampled count,
  // and the drafts before it): a draft's position is sampled exactly as it
  // would be without speculation.
  s.step = static_cast<uint64_t>(num_outputs + pending + spec_index);
  s.prompt_ids = r.token_ids.data();
  s.num_prompt_ids = r.num_prompt_tokens;
  s.output_ids = r.token_ids.data() + r.num_prompt_tokens;
  s.num_output_ids = num_outputs;
  if (spec_index > 0 && (has_penalties(r.params) || !r.params.bad_words_ids.empty())) {
    // The penalties and bad words see the drafts before it.
    storage.history.assign(s.output_ids, s.output_ids + num_outputs);
    storage.history.insert(storage.history.end(), r.drafts.begin(), r.drafts.begin() + spec_index);
    s.output_ids = storage.history.data();
    s.num_output_ids = static_cast<int64_t>(storage.history.size());
  }
  if (has_logits_processors(r.params) || r.constraint) {
    if (has_logits_processors(r.params)) {
      position_biases_for(r.params, model_->config().eos_token_ids, static_cast<int64_t>(s.step),
                          s.output_ids, s.num_output_ids, storage.biases);
    }
    const std::vector<uint32_t>* mask = &r.allowed_mask;
    if (r.constraint) {
      // A draft's position: the matcher after the drafts before it (a draft
      // it refuses is rejected anyway: its position's mask bans it).
      std::optional<grammar::matcher> ahead;
      if (spec_index > 0) {
        ahead = *r.constraint;
        for (int32_t j = 0; j < spec_index && ahead->accept(r.drafts[static_cast<size_t>(j)]); ++j) {
        }
      }
      const grammar::matcher& at = ahead ? *ahead : *r.constraint;
      grammar_mask(at, r.params, r.allowed_mask, storage.mask);
      mask = &storage.mask;
      // Complete: only the end is left, and min_tokens may not hold it back
      // (else every token would be banned and the row sampled unmasked).
      if (at.is_terminated()) storage.biases = position_biases{};
    }
    attach_processors(s, *mask, storage.biases);
  }
  return s;
}

std::optional<grammar::matcher> model_runner::new_matcher(const sampling_params& p) const {
  if (vocab_ == nullptr) {
    get_logger("worker")->error("a request with a {} constraint, and no tokenizer: run unconstrained",
                                constraint_kind_name(p.structured.kind));
    return std::nullopt;
  }
  auto g = grammar::token_grammar_for(p.structured, vocab_);
  if (!g) {
    get_logger("worker")->error("a request's {} constraint does not compile ({}): run unconstrained",
                                constraint_kind_name(p.structured.kind), g.error_message());
    return std::nullopt;
  }
  return grammar::matcher(*g);
}

void model_runner::grammar_mask(const grammar::matcher& m, const sampling_params& p,
                                const std::vector<uint32_t>& allowed, std::vector<uint32_t>& mask) const {
  mask.resize(static_cast<size_t>(vocab_->mask_words()));
  m.fill_mask(mask.data());
  if (m.can_end()) {
    const auto set = [&](int64_t t) {
      if (t >= 0 && t < vocab_->size()) mask[static_cast<size_t>(t / 32)] |= 1u << (t % 32);
    };
    // With ignore_eos an EOS does not end the request, but once the grammar
    // is complete it is the only token that keeps the text valid (EOS is
    // special: the text does not show it), so it is allowed then.
    if (!p.ignore_eos || m.is_terminated()) {
      for (int64_t t : model_->config().eos_token_ids) set(t);
    }
    for (int32_t t : p.stop_token_ids) set(t);
  }
  for (size_t i = 0; i < allowed.size() && i < mask.size(); ++i) mask[i] &= allowed[i];
}

sampler_row model_runner::fork_row(const request_state& parent, const fork_child& c,
                                   row_storage& storage) const {
  sampler_row s = sampler_row_for(c.params, c.seed);
  s.step = 0;
  s.prompt_ids = parent.token_ids.data();
  s.num_prompt_ids = parent.num_prompt_tokens;
  std::optional<grammar::matcher> m;
  if (is_constrained(c.params.structured)) m = new_matcher(c.params);
  if (has_logits_processors(c.params) || m) {
    if (has_logits_processors(c.params)) {
      position_biases_for(c.params, model_->config().eos_token_ids, 0, nullptr, 0, storage.biases);
    }
    std::vector<uint32_t> allowed;
    if (!c.params.allowed_token_ids.empty()) {
      allowed = allowed_token_mask(c.params.allowed_token_ids, model_->config().vocab_size);
    }
    if (m) {
      grammar_mask(*m, c.params, allowed, storage.mask);
    } else {
      storage.mask = std::move(allowed);
    }
    attach_processors(s, storage.mask, storage.biases);
  }
  return s;
}

bool model_runner::sample_chunk_async(const std::vector<logit_row>& rows, size_t begin, int64_t n,
                                      launched_step& step, bool late) {
  if (!device_sampling_enabled()) return false;
  // One job per logits row (a prompt logprob: its target forced), plus one
  // per fork child sharing its parent's row.
  const auto first = static_cast<int64_t>(step.jobs.size());
  std::vector<ops::sample_job> jobs;
  std::deque<row_storage> storage;  // read during sample_async
  for (int64_t i = 0; i < n; ++i) {
    const logit_row& row = rows[begin + static_cast<size_t>(i)];
    request_state& r = requests_.at(step.order[row.batch_index]);
    ops::sample_job job;
    job.logits_row = static_cast<int32_t>(i);
    if (row.prompt_target >= 0) {
      job.row.num_logprobs = r.params.prompt_logprobs;
      job.forced_token = r.token_ids[static_cast<size_t>(row.prompt_target)];
      jobs.push_back(job);
      step.jobs.push_back({job_ref::prompt_logprob, row.batch_index, 0, true});
      continue;
    }
    storage.emplace_back();
    job.row = next_token_row(r, row.spec_index, storage.back(), late ? r.pending_tokens - 1 : r.pending_tokens);
    // Penalties, bad words and constraints see the output so far: none may
    // still be in flight (else the row waits for sample_deferred).
    TROUPE_CHECK_MSG(!needs_output_history(r.params) || r.pending_tokens == (late ? 1 : 0),
                     "a request whose sampler reads its output was scheduled before its last "
                     "token was back");
    r.last_sample_index = static_cast<int32_t>(first) + static_cast<int32_t>(jobs.size());
    jobs.push_back(job);
    step.jobs.push_back({job_ref::next_token, row.batch_index, 0, r.params.logprobs >= 0});
    for (const fork_child& c : r.fork_children) {
      ops::sample_job child;
      child.logits_row = static_cast<int32_t>(i);
      storage.emplace_back();
      child.row = fork_row(r, c, storage.back());
      jobs.push_back(child);
      step.jobs.push_back({job_ref::fork, row.batch_index, c.id, c.params.logprobs >= 0});
    }
    r.fork_children.clear();
  }
  TROUPE_CHECK(ops_->sample_async(logits_.row_slice(0, n), jobs, step.seq, first));
  return true;
}

void model_runner::handle_row(request_state& r, const logit_row& row, const float* logits,
                              sampled_output& out) {
  const int64_t vocab = model_->config().vocab_size;
  if (row.prompt_target >= 0) {
    if (prompt_logits_tap_) prompt_logits_tap_(out.id, row.prompt_target, logits);
    const int32_t target = r.token_ids[static_cast<size_t>(row.prompt_target)];
    out.prompt_logprobs.push_back(logprobs_of(logits, vocab, target, r.params.prompt_logprobs));
    return;
  }
  row_storage storage;
  sample_result sampled =
      sample_row(logits, vocab, next_token_row(r, row.spec_index, storage, r.pending_tokens));
  out.token_ids.push_back(sampled.token_id);
  if (r.params.logprobs >= 0) out.logprobs.push_back(std::move(sampled.logprobs));
  if (!r.fork_children.empty()) sample_forks(r, logits, out);
}

void model_runner::sample_forks(request_state& r, const float* logits, sampled_output& out) {
  // Parallel sampling: each sibling draws its first token from the same
  // prompt logits with its own seed and parameters, as if it had run alone.
  const int64_t vocab = model_->config().vocab_size;
  for (const fork_child& c : r.fork_children) {
    row_storage storage;
    sample_result sampled = sample_row(logits, vocab, fork_row(r, c, storage));
    out.fork_samples.push_back({c.id, sampled.token_id, std::move(sampled.logprobs)});
  }
  r.fork_children.clear();
}

void model_runner::compute_outputs(const host_batch& batch, launched_step& step) {
  // A row whose sampler reads the output so far, with its last token still
  // being sampled (planned ahead), waits for sample_deferred.
  std::vector<logit_row> now;
  for (const logit_row& row : batch.logit_rows) {
    const request_state& r = requests_.at(step.order[row.batch_index]);
    const bool late = row.prompt_target < 0 && r.pending_tokens > 0 && needs_output_history(r.params) &&
                      device_sampling_enabled();
    (late ? step.deferred : now).push_back(row);
  }
  compute_rows(now, static_cast<int64_t>(batch.token_ids.size()), step, false);
}

void model_runner::sample_deferred(launched_step& step) {
  const std::vector<logit_row> rows = std::move(step.deferred);
  step.deferred.clear();
  compute_rows(rows, 0, step, true);
  ops_->step_launched(step.seq);  // the step's work now ends after these samples
}

void model_runner::compute_rows(const std::vector<logit_row>& logit_rows, int64_t batch_tokens,
                                launched_step& step, bool late) {
  const int64_t vocab = model_->config().vocab_size;
  std::vector<int32_t> rows;
  for (const logit_row& row : logit_rows) rows.push_back(row.token_row);
  for (size_t begin = 0; begin < rows.size(); begin += logits_chunk_rows) {
    const int64_t n = std::min<int64_t>(logits_chunk_rows, static_cast<int64_t>(rows.size() - begin));
    // A decode step's rows are the tokens themselves (0 .. n - 1): the
    // logits' product reads them in place, with no upload and no gather.
    bool identity = begin == 0 && n <= batch_tokens;
    for (int64_t i = 0; i < n && identity; ++i) identity = rows[static_cast<size_t>(i)] == i;
    if (identity) {
      model_->compute_logits(nullptr, n, logits_);
    } else {
      ops_->upload_ints(rows.data() + begin, logit_rows_dev_, n);
      model_->compute_logits(logit_rows_dev_, n, logits_);
    }
    if (!prompt_logits_tap_ && sample_chunk_async(logit_rows, begin, n, step, late)) continue;
    TROUPE_CHECK_MSG(!late, "rows sampled late need the device sampler");
    ops_->download(logits_.row_slice(0, n), logits_host_.data());
    for (int64_t i = 0; i < n; ++i) {
      const logit_row& row = logit_rows[begin + static_cast<size_t>(i)];
      request_state& r = requests_.at(step.order[row.batch_index]);
      handle_row(r, row, logits_host_.data() + i * vocab, step.out.outputs[row.batch_index]);
    }
  }
}

}  // namespace troupe
