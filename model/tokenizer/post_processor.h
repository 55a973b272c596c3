// post_processor: what encode(add_special_tokens=true) adds around the ids
// of a single sequence, from tokenizers' post-processors: TemplateProcessing
// (its "single" template), ByteLevel (adds nothing to ids) and Sequence.
// Immutable after parse; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/result.h"
#include "model/tokenizer/json_util.h"

namespace troupe::tok {

class post_processor {
 public:
  // The "post_processor" member of tokenizer.json (REQUIRES: not null).
  static result<std::unique_ptr<post_processor>> parse(json spec);

  // Applies every template to `ids` in place.
  void process(std::vector<int32_t>& ids) const;

 private:
  // A template: the ids to put before and after the sequence. (Templates
  // name the sequence once; anything else is a load error.)
  struct single_template {
    std::vector<int32_t> before;
    std::vector<int32_t> after;
  };
  status add(json spec);
  status add_template(json spec);

  std::vector<single_template> templates_;
};

}  // namespace troupe::tok
