// http_server: the OpenAI-compatible server's lifecycle. Binds the listener,
// runs the io_context on a few I/O threads (each connection on its own
// strand), and on SIGINT/SIGTERM shuts down gracefully: stop accepting,
// close idle connections, let in-flight generations finish for up to
// drain_timeout, then abort the rest and stop. Timeouts and the number of
// I/O threads come from the config's server section.
//
// run() blocks the calling thread until shutdown is complete. The engine
// must outlive the server.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "actors/engine.h"
#include "common/result.h"
#include "config/engine_config.h"

namespace troupe {

class http_server {
 public:
  http_server(engine& eng, const engine_config& config);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  // Binds host:port (errors name the address). REQUIRES: called once.
  status listen(const std::string& host, int64_t port);
  // Serves on the config's num_io_threads until SIGINT/SIGTERM, then drains
  // (drain_timeout). Returns the exit status (0).
  int run();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// min(4, hardware threads), at least 1.
int default_io_threads();

}  // namespace troupe
