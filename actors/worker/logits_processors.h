// logits_processors: a request's logits processors (sampling_params'
// logit_bias, min_tokens, bad_words_ids and allowed_token_ids, as vLLM
// defines them) turned into what the sampler applies at one position
// (sampler_row's allowed_mask and sorted biases). Plain functions, no
// state beyond the caller's storage; the worker's thread.
//
// At a position whose output index is i, after output tokens `output`:
//   - logit_bias: each (token, bias) added;
//   - min_tokens: while i < min_tokens, the stop tokens (the model's EOS
//     unless ignore_eos, and stop_token_ids) are banned;
//   - bad_words_ids: a one-token word is always banned; a longer word's
//     last token is banned where the output ends with the rest of it;
//   - allowed_token_ids: every other token is banned (the mask, made once a
//     request).
// A ban is a bias of -inf and overrides logit_bias for its token.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/sampling_params.h"
#include "kernels/cpu/sampler.h"

namespace troupe {

// One position's biases, sorted by token, each token once.
struct position_biases {
  std::vector<int32_t> ids;
  std::vector<float> values;
};

// The biases at output index `index` after `num_output` output tokens
// (output[0 .. num_output)); `eos_ids`: the model's.
void position_biases_for(const sampling_params& p, const std::vector<int64_t>& eos_ids,
                         int64_t index, const int32_t* output, int64_t num_output,
                         position_biases& out);

// The mask of allowed_token_ids over a vocabulary: bit t % 32 of word t / 32.
std::vector<uint32_t> allowed_token_mask(const std::vector<int32_t>& allowed, int64_t vocab);

// Points row at the mask (null: none) and the biases (which must outlive
// the row's use).
void attach_processors(sampler_row& row, const std::vector<uint32_t>& mask,
                       const position_biases& biases);

}  // namespace troupe
