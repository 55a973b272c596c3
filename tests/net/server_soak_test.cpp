// A bounded soak of `troupe serve` on the default CPU model (seeded): several
// client threads send a mix of streamed and plain chats and completions (n up
// to 8, stop strings), disconnect at random points, send bad requests and
// read slowly, for SOAK_SECONDS (60 by default; the 30-minute run in
// docs/reliability.md set it to 1800). Every response that completes must be
// well-formed (JSON with its choices and usage, or SSE events ending in
// [DONE], or a 4xx with OpenAI's error envelope); afterwards nothing runs or
// waits, no KV block is used, the server holds the file descriptors it held
// before, and its resident memory grew by less than the stated bound: the
// CPU KV cache is mapped lazily (calloc) and the block pool hands out blocks
// never used before first, so up to the whole cache (0.25 GiB here) may
// become resident, plus 128 MiB. RSS is printed every minute.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>

#include "tests/net/raw_client.h"
#include "tests/net/server_harness.h"

namespace troupe::testing {
namespace {

constexpr int64_t kv_cache_kib = 256 * 1024;  // --cpu-kvcache-space 0.25
constexpr int64_t rss_growth_bound_kib = kv_cache_kib + 128 * 1024;

int64_t open_fds(pid_t pid) {
  int64_t n = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    ++n;
  }
  return n;
}

int64_t rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

enum kind { chat, chat_stream, completion, completion_stream, disconnect, bad, slow, num_kinds };
const char* kind_names[] = {"chat", "chat_stream", "completion", "completion_stream",
                            "disconnect", "bad_request", "slow_reader"};

struct tally {
  std::mutex mu;
  int64_t sent[num_kinds] = {};
  int64_t ok[num_kinds] = {};
  int64_t overloaded = 0;  // 503
  std::vector<std::string> failures;  // the first 20
};

// Non-streamed success: JSON with `choices` choices, each finished, and usage.
bool well_formed_json(const std::string& body, size_t choices) {
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  simdjson::dom::array list;
  if (p.parse(body).get(doc) || doc["choices"].get(list) || list.size() != choices) return false;
  for (simdjson::dom::element c : list) {
    std::string_view finish;
    if (c["finish_reason"].get(finish) || (finish != "stop" && finish != "length")) return false;
  }
  int64_t tokens = 0;
  return !doc["usage"]["completion_tokens"].get(tokens) && tokens >= 0;
}

// Streamed success: JSON events, every choice finished, then [DONE].
bool well_formed_sse(const std::string& body, size_t choices) {
  const auto events = sse_events(body);
  if (!events || events->empty() || events->back() != "[DONE]") return false;
  std::vector<bool> finished(choices, false);
  simdjson::dom::parser p;
  for (size_t i = 0; i + 1 < events->size(); ++i) {
    simdjson::dom::element doc;
    if (p.parse((*events)[i]).get(doc)) return false;
    simdjson::dom::array list;
    if (doc["choices"].get(list)) return false;
    for (simdjson::dom::element c : list) {
      int64_t index = -1;
      simdjson::dom::element finish;
      if (c["index"].get(index) || index < 0 || static_cast<size_t>(index) >= choices) return false;
      if (!c["finish_reason"].get(finish) && !finish.is_null()) finished[static_cast<size_t>(index)] = true;
    }
  }
  return std::all_of(finished.begin(), finished.end(), [](bool b) { return b; });
}

bool error_envelope(const raw_response& r) {
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  std::string_view message;
  int64_t code = 0;
  return r.status >= 400 && r.status < 500 && !p.parse(r.body).get(doc) &&
         !doc["error"]["message"].get(message) && !doc["error"]["code"].get(code) &&
         code == r.status;
}

std::string pick_stop(std::mt19937_64& rng) {
  static const char* stops[] = {"", R"(,"stop":["a"])", R"(,"stop":["\n","the"])", R"(,"stop":"e")"};
  return stops[rng() % 4];
}

// One request of kind k, its outcome counted in t (a failure with what came back).
void one_request(int port, kind k, std::mt19937_64& rng, tally& t) {
  const int n = 1 + static_cast<int>(rng() % 8);
  const int max_tokens = 1 + static_cast<int>(rng() % 24);
  const bool is_chat = rng() % 2 == 0;
  const bool stream = k == chat_stream || k == completion_stream || k == disconnect || k == slow;
  const std::string common = R"("n":)" + std::to_string(n) + R"(,"max_tokens":)" +
                             std::to_string(max_tokens) + pick_stop(rng) +
                             (stream ? R"(,"stream":true)" : "");
  const bool two_prompts = !is_chat && rng() % 3 == 0;
  // The kind names the route; disconnects and slow readers take the coin's.
  const bool chat_route = k == chat || k == chat_stream ||
                          (is_chat && k != completion && k != completion_stream);
  const int num_prompts = !chat_route && two_prompts && k != completion_stream ? 2 : 1;
  std::string target = chat_route ? "/v1/chat/completions" : "/v1/completions";
  std::string body = chat_route
      ? R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me about soak tests )" +
            std::to_string(rng() % 1000) + R"("}],)" + common + "}"
      : std::string(R"({"prompt":)") + (num_prompts == 2 ? R"(["Once upon a time","The end"])" : R"("Once upon a time")") +
            "," + common + "}";
  const size_t choices = static_cast<size_t>(n * num_prompts);
  raw_options o;
  if (k == disconnect) o.disconnect_after = static_cast<int64_t>(rng() % 3000);
  if (k == slow) o.slow_read_ms = 5 + static_cast<int>(rng() % 20);
  if (k == bad) {
    static const std::pair<const char*, const char*> bad_requests[] = {
        {"/v1/completions", R"({"prompt":"hi","max_tokens":)"},
        {"/v1/completions", R"({"prompt":"hi","n":0})"},
        {"/v1/completions", R"({"prompt":"hi","n":100000})"},
        {"/v1/completions", R"({"prompt":"hi","max_tokens":9223372036854775807})"},
        {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":-1})"},
        {"/v1/chat/completions", R"({"messages":"not a list"})"},
        {"/v1/nothing", R"({})"},
        {"/v1/completions", R"({"prompt":[999999999]})"},
        {"/v1/completions", R"([1,2,3])"},
        {"/v1/completions", "\xff\xfe not json"},
    };
    const auto& [path, text] = bad_requests[rng() % std::size(bad_requests)];
    target = path;
    body = text;
  }
  const raw_response r = raw_exchange(port, http_request("POST", target, body), o);
  bool good = false;
  if (k == disconnect) {
    good = true;  // anything goes; what matters is the server afterwards
  } else if (r.status == 503) {
    std::lock_guard<std::mutex> lock(t.mu);
    ++t.overloaded;
    return;
  } else if (k == bad) {
    good = r.complete && error_envelope(r);
  } else if (r.status == 200 && r.complete) {
    good = stream ? well_formed_sse(r.body, choices) : well_formed_json(r.body, choices);
  }
  std::lock_guard<std::mutex> lock(t.mu);
  if (good) ++t.ok[k];
  else if (t.failures.size() < 20)
    t.failures.push_back(std::string(kind_names[k]) + " " + target + " " + body + " -> " +
                         std::to_string(r.status) + (r.complete ? "" : " (incomplete) ") +
                         r.body.substr(0, 300));
}

TEST(server_soak, mixed_clients_leave_the_server_as_they_found_it) {
  const char* env = std::getenv("SOAK_SECONDS");
  const int seconds = env != nullptr ? std::atoi(env) : 60;
  server_process server(default_cpu_args({"--cpu-kvcache-space", "0.25"}));
  ASSERT_NE(server.port(), 0) << server.log();
  const int port = server.port();
  // Warm up (first allocations, thread pools), then take the baseline.
  for (int i = 0; i < 4; ++i) {
    raw_exchange(port, http_request("POST", "/v1/completions", R"({"prompt":"hi","n":8,"max_tokens":8})"));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int64_t fds_before = open_fds(server.pid());
  const int64_t rss_before = rss_kib(server.pid());
  tally t;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(1900 + static_cast<uint64_t>(c));
      while (std::chrono::steady_clock::now() < end) {
        const auto k = static_cast<kind>(rng() % num_kinds);
        {
          std::lock_guard<std::mutex> lock(t.mu);
          ++t.sent[k];
        }
        one_request(port, k, rng, t);
      }
    });
  }
  while (std::chrono::steady_clock::now() + std::chrono::seconds(60) < end) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::lock_guard<std::mutex> lock(t.mu);
    int64_t sent = 0;
    for (int64_t n : t.sent) sent += n;
    std::printf("soak: %lld requests sent, RSS %lld KiB, fds %lld\n", static_cast<long long>(sent),
                static_cast<long long>(rss_kib(server.pid())), static_cast<long long>(open_fds(server.pid())));
    std::fflush(stdout);
  }
  for (std::thread& c : clients) c.join();
  // Disconnected clients' requests end within a step; sockets close soon after.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int64_t fds_after = -1;
  while (std::chrono::steady_clock::now() < deadline) {
    fds_after = open_fds(server.pid());
    if (fds_after <= fds_before && metric_value(port, "num_requests_running") == 0.0 &&
        metric_value(port, "num_requests_waiting") == 0.0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int64_t rss_after = rss_kib(server.pid());
  int64_t total = 0, good = 0;
  std::string by_kind;
  for (int k = 0; k < num_kinds; ++k) {
    total += t.sent[k];
    good += t.ok[k];
    by_kind += std::string(" ") + kind_names[k] + "=" + std::to_string(t.ok[k]) + "/" + std::to_string(t.sent[k]);
  }
  std::printf("soak %d s: %lld requests (ok/sent:%s), 503s %lld, malformed %zu; fds %lld -> %lld; "
              "RSS %lld -> %lld KiB\n",
              seconds, static_cast<long long>(total), by_kind.c_str(), static_cast<long long>(t.overloaded),
              t.failures.size(), static_cast<long long>(fds_before), static_cast<long long>(fds_after),
              static_cast<long long>(rss_before), static_cast<long long>(rss_after));
  for (const std::string& f : t.failures) ADD_FAILURE() << f;
  EXPECT_GT(good, 6 * seconds / 10) << "the soak did too little to mean anything";
  EXPECT_EQ(metric_value(port, "num_requests_running"), 0.0);
  EXPECT_EQ(metric_value(port, "num_requests_waiting"), 0.0);
  EXPECT_EQ(metric_value(port, "kv_cache_usage_perc"), 0.0);
  EXPECT_LE(fds_after, fds_before) << "file descriptors leaked";
  EXPECT_LT(rss_after - rss_before, rss_growth_bound_kib) << "resident memory grew";
  EXPECT_EQ(http_call(port, "GET", "/health").status, 200);
  EXPECT_EQ(server.stop(SIGTERM, std::chrono::seconds(30)), 0) << server.log().substr(0, 2000);
}

}  // namespace
}  // namespace troupe::testing
