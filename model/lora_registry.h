// lora_registry: the adapters an engine serves, by name and by id. Shared
// by the edges (a request's `model` or `lora` name -> id), the worker (id ->
// weights, to copy into a device slot) and /v1/models. Thread-safe. Ids
// start at 1 (0 is the base model) and are never reused, so a request that
// holds an id never meets another adapter under it.
//
// Requests hold the adapter they run with (acquire at submission, release
// at their end): removing an adapter takes its name away at once (new
// requests cannot find it, /v1/models stops listing it) and frees its
// weights when the last request holding it ends.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/lora_adapter.h"
#include "model/model_config.h"

namespace troupe {

class lora_registry {
 public:
  lora_registry(model_config base, int64_t max_lora_rank);

  struct entry {
    int64_t id = 0;
    std::string name;
    std::filesystem::path path;
    std::shared_ptr<const lora_adapter> adapter;
    bool removed = false;  // its name is gone; kept while users > 0
    int64_t users = 0;     // requests holding it
  };

  // Reads and checks the adapter at `path` (load_lora_adapter) and serves it
  // as `name`; its id. Error: the adapter's problems, or the name is taken.
  result<int64_t> add(const std::string& name, const std::filesystem::path& path);
  // Stops serving `name` (runtime unloading); its weights go when no
  // request holds it. Error: no adapter has this name (vLLM's message).
  status remove(const std::string& name);
  // 0 when no adapter has this name.
  int64_t id_of(const std::string& name) const;
  // The adapter of a served id, or of a removed one that requests still
  // hold; null otherwise.
  std::shared_ptr<const lora_adapter> get(int64_t id) const;
  // A request starts (false: the id is not served, e.g. removed since its
  // name was looked up) or ends running with adapter `id`.
  bool acquire(int64_t id);
  void release(int64_t id);
  // The served adapters, in id order.
  std::vector<entry> list() const;
  size_t size() const;
  // The served adapters and the removed ones requests still hold.
  std::vector<entry> all() const;

 private:
  const model_config base_;
  const int64_t max_lora_rank_;
  mutable std::mutex mu_;
  int64_t next_id_ = 1;
  std::map<int64_t, entry> by_id_;
  std::map<std::string, int64_t> by_name_;
};

}  // namespace troupe
