#include "actors/messages.h"

namespace troupe {

const char* finish_reason_name(finish_reason r) {
  switch (r) {
    case finish_reason::none: return "none";
    case finish_reason::stop: return "stop";
    case finish_reason::length: return "length";
    case finish_reason::abort: return "abort";
    case finish_reason::error: return "error";
  }
  return "unknown";
}

}  // namespace troupe
