// The ShareGPT dataset (see datasets.h): a JSON array of entries with
// "conversations": [{"from": "human", "value": ...}, {"from": "gpt",
// "value": ...}, ...], as vLLM's benchmarks read it.
#pragma once

#include <vector>

#include "cli/bench/datasets.h"

namespace troupe::bench {

// Errors name the file and the problem (unreadable, not JSON, no usable
// conversation, token ids asked for without a tokenizer).
result<std::vector<sample_request>> load_sharegpt(const dataset_options& opts,
                                                  const token_source& src, bench_rng& rng);

}  // namespace troupe::bench
