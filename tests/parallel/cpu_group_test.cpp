// cpu_group (parallel/cpu_group.h), the CPU backend's communicator: with 1-4
// ranks on threads, all_reduce_sum gives every rank the parts' sum in rank
// order, bit for bit, over many rounds of changing sizes; all_gather_cols
// lays the ranks' columns side by side; sends arrive in order per pair and
// never wait; and a lost rank (abort, or a rank that never comes) ends the
// waits of all the others with the reason, within the group's timeout.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "parallel/cpu_group.h"

namespace troupe {
namespace {

// Runs body(rank, communicator) on `size` threads and joins them.
void on_ranks(cpu_group& g, const std::function<void(int, communicator&)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < g.size(); ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<communicator> c = g.member(r);
      body(r, *c);
    });
  }
  for (std::thread& t : threads) t.join();
}

tensor view(std::vector<float>& v, int64_t rows, int64_t cols) {
  return tensor{v.data(), dtype::f32, rows, cols};
}

// Rank r's part of round k: values whose float sums depend on the order.
std::vector<float> part(int rank, int round, int64_t n) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * round + rank));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng) * (rank % 2 == 0 ? 1e4f : 1e-3f);
  return v;
}

TEST(cpu_group, all_reduce_sums_in_rank_order_on_every_rank) {
  for (int size : {1, 2, 3, 4}) {
    cpu_group g(size);
    const int rounds = 200;
    std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(size));
    on_ranks(g, [&](int rank, communicator& c) {
      EXPECT_EQ(c.rank(), rank);
      EXPECT_EQ(c.size(), size);
      for (int k = 0; k < rounds; ++k) {
        const int64_t n = 1 + (k * 37) % 300;
        std::vector<float> x = part(rank, k, n);
        c.all_reduce_sum(view(x, 1, n));
        got[static_cast<size_t>(rank)].push_back(std::move(x));
      }
    });
    for (int k = 0; k < rounds; ++k) {
      const int64_t n = 1 + (k * 37) % 300;
      std::vector<float> want(static_cast<size_t>(n), 0.0f);
      for (int r = 0; r < size; ++r) {
        const std::vector<float> p = part(r, k, n);
        for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] += p[static_cast<size_t>(i)];
      }
      for (int r = 0; r < size; ++r) {
        ASSERT_EQ(got[static_cast<size_t>(r)][static_cast<size_t>(k)], want)
            << "size " << size << " rank " << r << " round " << k;
      }
    }
  }
}

TEST(cpu_group, all_gather_lays_the_columns_side_by_side) {
  const int size = 3;
  const int64_t rows = 4, cols = 5;
  cpu_group g(size);
  std::vector<std::vector<float>> out(size, std::vector<float>(rows * cols * size, -1.0f));
  on_ranks(g, [&](int rank, communicator& c) {
    for (int k = 0; k < 20; ++k) {
      std::vector<float> x(rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i) x[i] = static_cast<float>(1000 * k + 100 * rank + i);
      c.all_gather_cols(view(x, rows, cols), view(out[rank], rows, cols * size));
      x.assign(x.size(), -7.0f);  // the next round may overwrite x at once
    }
  });
  for (int rank = 0; rank < size; ++rank) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int r = 0; r < size; ++r) {
        for (int64_t j = 0; j < cols; ++j) {
          EXPECT_EQ(out[rank][i * cols * size + r * cols + j], static_cast<float>(19000 + 100 * r + i * cols + j));
        }
      }
    }
  }
}

TEST(cpu_group, sends_arrive_in_order_and_do_not_wait) {
  cpu_group g(2);
  std::vector<float> received;
  on_ranks(g, [&](int rank, communicator& c) {
    if (rank == 0) {
      // Every send before any receive: none of them waits for rank 1.
      for (int k = 0; k < 50; ++k) {
        std::vector<float> x(8, static_cast<float>(k));
        c.send(view(x, 2, 4), 1);
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (int k = 0; k < 50; ++k) {
        std::vector<float> x(8, -1.0f);
        c.recv(view(x, 2, 4), 0);
        received.push_back(x[7]);
      }
    }
  });
  ASSERT_EQ(received.size(), 50u);
  for (int k = 0; k < 50; ++k) EXPECT_EQ(received[k], static_cast<float>(k));
}

TEST(cpu_group, an_abort_ends_every_wait_with_the_reason) {
  cpu_group g(3, std::chrono::seconds(30));
  std::atomic<int> aborted{0};
  const auto start = std::chrono::steady_clock::now();
  on_ranks(g, [&](int rank, communicator& c) {
    std::vector<float> x(4, 1.0f);
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      c.abort("rank 2 lost its device");
      return;
    }
    try {
      c.all_reduce_sum(view(x, 1, 4));
      ADD_FAILURE() << "rank " << rank << " went on";
    } catch (const communicator_aborted& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2 lost its device"), std::string::npos) << e.what();
      ++aborted;
    }
    // Later calls fail at once too, sends and receives included.
    EXPECT_THROW(c.all_reduce_sum(view(x, 1, 4)), communicator_aborted);
    EXPECT_THROW(c.send(view(x, 1, 4), 2), communicator_aborted);
    EXPECT_THROW(c.recv(view(x, 1, 4), 2), communicator_aborted);
  });
  EXPECT_EQ(aborted.load(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(cpu_group, a_rank_that_never_comes_times_the_others_out) {
  cpu_group g(3, std::chrono::milliseconds(200));
  std::vector<std::string> errors(3);
  on_ranks(g, [&](int rank, communicator& c) {
    if (rank == 1) return;  // hung or dead: never arrives
    std::vector<float> x(4, 1.0f);
    try {
      if (rank == 0) c.all_reduce_sum(view(x, 1, 4));
      else c.recv(view(x, 1, 4), 1);
    } catch (const communicator_aborted& e) {
      errors[rank] = e.what();
    }
  });
  // The first to time out names what it waited for; the other gets the same reason.
  for (int r : {0, 2}) {
    EXPECT_NE(errors[r].find("waited 200 ms"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("rank 1"), std::string::npos) << errors[r];
  }
  EXPECT_EQ(errors[0], errors[2]);
}

}  // namespace
}  // namespace troupe
