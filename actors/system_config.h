// The CAF actor system configuration of every troupe process: troupe's
// message types (actors/messages.h), CAF's own logger quiet, and with
// `network` CAF's network layer (the middleman: pipeline stages in several
// processes, docs/parallelism.md) with a heartbeat every second, so that a
// peer that stops answering is noticed within seconds.
#pragma once

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <chrono>

#include "actors/messages.h"

namespace troupe {

class troupe_system_config : public caf::actor_system_config {
 public:
  explicit troupe_system_config(bool network = false) {
    add_message_types<caf::id_block::troupe>();
    set("logger.verbosity", caf::atom("quiet"));
    if (network) {
      load<caf::io::middleman>();
      set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
      set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(5)});
    }
  }
};

}  // namespace troupe
