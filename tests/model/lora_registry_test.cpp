// lora_registry: names and ids, unloading while requests hold an adapter,
// and the host cache bounded by max_cpu_loras (LRU, protected adapters,
// background reads, a read that fails).
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/lora_registry.h"
#include "tests/model/lora_fixtures.h"

namespace troupe {
namespace {

using testing::base;
using testing::copy_adapter;
using testing::data;
namespace fs = std::filesystem;

TEST(lora_registry, ids_names_and_duplicates) {
  lora_registry reg(base("tiny-llama"), 16);
  auto sql = reg.add("sql", data("lora/tiny-llama-lora-sql"));
  auto poet = reg.add("poet", data("lora/tiny-llama-lora-poet"));
  ASSERT_TRUE(sql.ok() && poet.ok());
  EXPECT_EQ(*sql, 1);
  EXPECT_EQ(*poet, 2);
  EXPECT_EQ(reg.id_of("poet"), 2);
  EXPECT_EQ(reg.id_of("nope"), 0);
  EXPECT_EQ(reg.weights(1)->name, "sql");
  EXPECT_EQ(reg.weights(3), nullptr);
  auto again = reg.add("sql", data("lora/tiny-llama-lora-poet"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error_message(), "LoRA adapter 'sql' is already loaded");
  EXPECT_EQ(reg.size(), 2u);
  const auto list = reg.list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1].name, "poet");
}

// Runtime loads on the loader thread: results in the order asked, a
// taken name and an unreadable path as errors; the caller's thread never
// reads the adapter.
TEST(lora_registry, add_async_reports_each_load_on_the_loader_thread) {
  lora_registry reg(base("tiny-llama"), 16);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> results;
  auto record = [&](result<int64_t> r) {
    std::lock_guard<std::mutex> lock(mu);
    results.push_back(r ? "id " + std::to_string(*r) : r.error_message());
    cv.notify_all();
  };
  const auto caller = std::this_thread::get_id();
  bool off_thread = true;
  reg.add_async("sql", data("lora/tiny-llama-lora-sql"), [&](result<int64_t> r) {
    off_thread = std::this_thread::get_id() != caller;
    record(std::move(r));
  });
  reg.add_async("sql", data("lora/tiny-llama-lora-poet"), record);
  reg.add_async("nowhere", "/nonexistent/adapter", record);
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return results.size() == 3; }));
  EXPECT_TRUE(off_thread);
  EXPECT_EQ(results[0], "id 1");
  EXPECT_EQ(results[1], "LoRA adapter 'sql' is already loaded");
  EXPECT_NE(results[2].find("/nonexistent/adapter"), std::string::npos) << results[2];
  EXPECT_EQ(reg.id_of("sql"), 1);
  EXPECT_EQ(reg.id_of("nowhere"), 0);
}

// Unloading: the name goes at once; the weights stay while a request
// holds the id, and go with its release; a removed id cannot be acquired.
TEST(lora_registry, remove_waits_for_the_last_user) {
  lora_registry reg(base("tiny-llama"), 16);
  const int64_t id = reg.add("sql", data("lora/tiny-llama-lora-sql")).value();
  EXPECT_TRUE(reg.acquire(id));
  ASSERT_TRUE(reg.remove("sql").ok());
  EXPECT_EQ(reg.id_of("sql"), 0);
  EXPECT_TRUE(reg.list().empty());
  ASSERT_EQ(reg.all().size(), 1u);  // still held
  EXPECT_NE(reg.weights(id), nullptr);
  EXPECT_FALSE(reg.acquire(id));
  reg.release(id);
  EXPECT_EQ(reg.weights(id), nullptr);
  EXPECT_TRUE(reg.all().empty());
  auto again = reg.remove("sql");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error_message(), "The lora adapter 'sql' cannot be found.");
  const int64_t id2 = reg.add("sql", data("lora/tiny-llama-lora-sql")).value();
  EXPECT_NE(id2, id);  // ids are never reused
  ASSERT_TRUE(reg.remove("sql").ok());  // unused: gone at once
  EXPECT_EQ(reg.weights(id2), nullptr);
}

// Counts the loader's wake-ups; wait_for(n) blocks until n reads ended.
class read_waiter {
 public:
  explicit read_waiter(lora_registry& reg) : reg_(reg) {
    reg.set_on_loaded([this] {
      std::lock_guard<std::mutex> lock(mu_);
      ++reads_;
      cv_.notify_all();
    });
  }
  ~read_waiter() { reg_.set_on_loaded(nullptr); }
  void wait_for(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(30), [&] { return reads_ >= n; }));
  }

 private:
  lora_registry& reg_;
  std::mutex mu_;
  std::condition_variable cv_;
  int reads_ = 0;
};

using residency = lora_registry::residency;

// Three adapters in a cache of two: the least recently used goes, a
// prefetch reads it back on the loader thread (not the caller's), and a
// protected adapter is never the one dropped.
TEST(lora_registry, host_cache_keeps_the_most_recently_used) {
  const auto third = copy_adapter("tiny-llama-lora-sql");
  lora_registry reg(base("tiny-llama"), 16, 2);
  read_waiter reads(reg);
  const int64_t sql = reg.add("sql", data("lora/tiny-llama-lora-sql")).value();
  const int64_t poet = reg.add("poet", data("lora/tiny-llama-lora-poet")).value();
  const int64_t copy = reg.add("copy", third->path()).value();
  lora_registry::cache_counts c = reg.counts();
  EXPECT_EQ(c.capacity, 2);
  EXPECT_EQ(c.resident, 2);
  EXPECT_EQ(c.evictions, 1);
  // As the scheduler: prefetches, then protect() with what it admitted
  // (a ready prefetch protects until then; here none was admitted, so
  // that whenever sql's read below ends, nothing else is protected).
  std::string error;
  EXPECT_EQ(reg.prefetch(poet, error), residency::ready);
  EXPECT_EQ(reg.prefetch(copy, error), residency::ready);
  reg.protect({});
  EXPECT_EQ(reg.prefetch(sql, error), residency::loading);  // the oldest went
  // Asked again while it is read: no second read (loading, or ready when
  // the background read has already ended: counts().reads says which).
  for (const bool start_read : {true, false}) {
    const residency again = reg.prefetch(sql, error, start_read);
    EXPECT_TRUE(again == residency::loading || again == residency::ready) << int(again);
  }
  reg.protect({});
  reads.wait_for(1);
  EXPECT_EQ(reg.prefetch(sql, error), residency::ready);
  c = reg.counts();
  EXPECT_EQ(c.reads, 1);
  EXPECT_EQ(c.resident, 2);
  EXPECT_EQ(c.max_resident, 2);
  // poet was the least recently used: it went for sql.
  EXPECT_EQ(reg.prefetch(poet, error, false), residency::absent);  // no read without start_read
  EXPECT_EQ(reg.prefetch(copy, error), residency::ready);
  reg.protect({sql});
  // copy is newer than sql, but sql is protected: reading poet drops copy.
  EXPECT_EQ(reg.prefetch(poet, error), residency::loading);
  reads.wait_for(2);
  EXPECT_EQ(reg.prefetch(sql, error), residency::ready);
  EXPECT_EQ(reg.prefetch(poet, error), residency::ready);
  reg.protect({});
  // A ready prefetch protects: nothing can be dropped for copy until the
  // next protect(), the cache holds three for a while.
  EXPECT_EQ(reg.prefetch(sql, error), residency::ready);
  EXPECT_EQ(reg.prefetch(poet, error), residency::ready);
  EXPECT_EQ(reg.prefetch(copy, error), residency::loading);
  reads.wait_for(3);
  EXPECT_EQ(reg.counts().resident, 3);
  reg.protect({});
  EXPECT_EQ(reg.prefetch(sql, error), residency::loading);  // the least recently used went
  reg.protect({});
  reads.wait_for(4);
  c = reg.counts();
  EXPECT_EQ(c.reads, 4);
  EXPECT_EQ(c.reads_on_step, 0);
  EXPECT_EQ(c.resident, 2);
  EXPECT_EQ(c.max_resident, 3);
  EXPECT_EQ(c.evictions, 5);
}

// weights() of an adapter out of host memory reads it at once (counted:
// the scheduler's prefetch is meant to make this rare) and says so.
TEST(lora_registry, weights_read_on_the_step_path_are_counted) {
  lora_registry reg(base("tiny-llama"), 16, 1);
  const int64_t sql = reg.add("sql", data("lora/tiny-llama-lora-sql")).value();
  const int64_t poet = reg.add("poet", data("lora/tiny-llama-lora-poet")).value();
  std::string read_now;
  const auto w = reg.weights(poet, &read_now);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->name, "poet");
  EXPECT_TRUE(read_now.empty());
  const auto s = reg.weights(sql, &read_now);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->name, "sql");
  EXPECT_NE(read_now.find("LoRA adapter 'sql' was not in host memory when a step needed it"),
            std::string::npos)
      << read_now;
  EXPECT_EQ(reg.counts().reads_on_step, 1);
  EXPECT_EQ(reg.counts().resident, 1);
  EXPECT_EQ(reg.weights(99), nullptr);
}

// An adapter whose files went away after it was served: the background
// read fails, prefetch says why from then on, and nothing else is harmed.
TEST(lora_registry, a_failed_read_is_reported_until_reloaded) {
  auto gone = copy_adapter("tiny-llama-lora-sql");
  lora_registry reg(base("tiny-llama"), 16, 1);
  read_waiter reads(reg);
  const int64_t id = reg.add("gone", gone->path()).value();
  const int64_t poet = reg.add("poet", data("lora/tiny-llama-lora-poet")).value();
  fs::remove(gone->path() / "adapter_model.safetensors");
  std::string error;
  EXPECT_EQ(reg.prefetch(id, error), residency::loading);
  reads.wait_for(1);
  EXPECT_EQ(reg.prefetch(id, error), residency::failed);
  EXPECT_NE(error.find("LoRA adapter 'gone' could not be read again from"), std::string::npos)
      << error;
  EXPECT_EQ(reg.prefetch(poet, error), residency::ready);
  EXPECT_EQ(reg.prefetch(12345, error), residency::failed);
  EXPECT_EQ(error, "LoRA adapter id 12345 is not served");
  // Unloaded and loaded again (from a good path): served under a new id.
  ASSERT_TRUE(reg.remove("gone").ok());
  const int64_t again = reg.add("gone", data("lora/tiny-llama-lora-sql")).value();
  EXPECT_EQ(reg.prefetch(again, error), residency::ready);
}

}  // namespace
}  // namespace troupe
