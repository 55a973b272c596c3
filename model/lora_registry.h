// lora_registry: the adapters an engine serves, by name and by id, and the
// host cache of their weights. Shared by the edges (a request's `model` or
// `lora` name -> id), the scheduler (is an adapter's copy in host memory?),
// the worker (id -> weights, to copy into a device slot) and /v1/models.
// Thread-safe. Ids start at 1 (0 is the base model) and are never reused,
// so a request that holds an id never meets another adapter under it.
//
// Requests hold the adapter they run with (acquire at submission, release
// at their end): removing an adapter takes its name away at once (new
// requests cannot find it, /v1/models stops listing it) and frees its
// weights when the last request holding it ends.
//
// Host cache (vLLM's max_cpu_loras): at most `max_cpu_loras` adapters keep
// their weights in host memory, the least recently used dropped first but
// never one of the `protect`ed ones (the running requests' adapters, at
// most max_loras <= max_cpu_loras of them; the cache holds more only while
// protection leaves nothing to drop, and trims when it is lifted). A dropped adapter is read
// again from its path on the registry's loader thread when `prefetch`
// asks for it, so that a step never waits on a disk read: the scheduler
// admits a request only when its adapter is ready, and the loader calls
// `on_loaded` when a read ends (the scheduler's wake-up).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "model/lora_adapter.h"
#include "model/model_config.h"

namespace troupe {

class lora_registry {
 public:
  // max_cpu_loras: adapters whose weights stay in host memory; 0: all.
  lora_registry(model_config base, int64_t max_lora_rank, int64_t max_cpu_loras = 0);
  ~lora_registry();  // stops the loader (a read in progress ends first)
  lora_registry(const lora_registry&) = delete;
  lora_registry& operator=(const lora_registry&) = delete;

  struct entry {
    int64_t id = 0;
    std::string name;
    std::filesystem::path path;
    std::shared_ptr<const lora_adapter> adapter;  // null while not in host memory
    bool removed = false;  // its name is gone; kept while users > 0
    int64_t users = 0;     // requests holding it
    uint64_t last_used = 0;  // host cache recency
    bool loading = false;    // queued or being read on the loader thread
    std::string load_error;  // the last background read's failure
  };

  // Reads and checks the adapter at `path` (load_lora_adapter) and serves it
  // as `name`; its id. Error: the adapter's problems, or the name is taken.
  result<int64_t> add(const std::string& name, const std::filesystem::path& path);
  // add() on the loader thread, `done` called there with its result (the
  // runtime load route: no HTTP thread waits on the disk). Adds run in the
  // order asked; one still queued when the registry stops gets an error.
  void add_async(std::string name, std::filesystem::path path,
                 std::function<void(result<int64_t>)> done);
  // Stops serving `name` (runtime unloading); its weights go when no
  // request holds it. Error: no adapter has this name (vLLM's message).
  status remove(const std::string& name);
  // 0 when no adapter has this name.
  int64_t id_of(const std::string& name) const;

  // Whether an adapter's weights are in host memory. `prefetch` answers
  // ready (and marks them used and protected until the next `protect`,
  // which says whether the caller admitted a request with them); loading while a read on the loader thread
  // is queued or running (queued now when `start_read`, once); absent when
  // neither (only without `start_read`); failed when the last read failed
  // (the reason in `error`; the adapter stays failed until unloaded and
  // loaded again). Unknown ids are failed.
  enum class residency { ready, loading, absent, failed };
  residency prefetch(int64_t id, std::string& error, bool start_read = true);
  // Called on the loader thread after each background read (success or not).
  void set_on_loaded(std::function<void()> fn);
  // The adapters whose weights must stay (the running requests' adapters);
  // replaces the previous set.
  void protect(std::vector<int64_t> ids);
  // The weights of a served id, or of a removed one that requests still
  // hold, read now when not in host memory (counted in reads_on_step: the
  // scheduler's prefetch should have made that rare, and `read_now` then
  // says what happened); null for an unknown id or a failed read.
  std::shared_ptr<const lora_adapter> weights(int64_t id, std::string* read_now = nullptr);

  // A request starts (false: the id is not served, e.g. removed since its
  // name was looked up) or ends running with adapter `id`.
  bool acquire(int64_t id);
  void release(int64_t id);
  // The served adapters, in id order.
  std::vector<entry> list() const;
  size_t size() const;
  // The served adapters and the removed ones requests still hold.
  std::vector<entry> all() const;

  struct cache_counts {
    int64_t capacity = 0;        // max_cpu_loras (0: unbounded)
    int64_t resident = 0;        // adapters in host memory now
    int64_t max_resident = 0;    // the most at once
    int64_t reads = 0;           // background reads (the loader)
    int64_t reads_on_step = 0;   // reads by weights() (a step waited on the disk)
    int64_t evictions = 0;
  };
  cache_counts counts() const;

 private:
  void loader_loop();
  // Under mu_: keeps e's weights (and marks them used), then trims.
  void keep_locked(entry& e, std::shared_ptr<const lora_adapter> adapter);
  // Under mu_: drops the least recently used unprotected weights (never
  // keep_id's) while more than the capacity are in host memory.
  void trim_locked(int64_t keep_id);

  const model_config base_;
  const int64_t max_lora_rank_;
  const int64_t capacity_;
  mutable std::mutex mu_;
  int64_t next_id_ = 1;
  uint64_t clock_ = 0;
  std::map<int64_t, entry> by_id_;
  std::map<std::string, int64_t> by_name_;
  std::vector<int64_t> protected_;
  cache_counts counts_;
  // The loader thread (started by the first prefetch that queues a read, or
  // the first add_async).
  struct add_job {
    std::string name;
    std::filesystem::path path;
    std::function<void(result<int64_t>)> done;
  };
  void start_loader_locked();
  std::deque<add_job> adds_;
  std::deque<int64_t> queue_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread loader_;
  std::mutex callback_mu_;  // held while on_loaded_ runs or changes
  std::function<void()> on_loaded_;
};

}  // namespace troupe
