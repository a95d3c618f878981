#include "core/tunnel/credit.h"

#include <thread>
#include <vector>

#include <catch2/catch.hpp>

using konn::core::tunnel::CreditReturn;
using konn::core::tunnel::kWindowUpdateThreshold;

TEST_CASE("credit goes back once a threshold of bytes was written and not per packet", "[tunnel]") {
  CreditReturn credit;
  const size_t packet = 256 * 1024;
  int64_t returned = 0;
  size_t packets = 0;
  while (returned == 0) {
    returned = credit.written(packet);
    ++packets;
  }
  // The batch holds every byte counted so far, and no earlier packet returned anything.
  CHECK(returned == static_cast<int64_t>(packets * packet));
  CHECK(returned >= kWindowUpdateThreshold);
  CHECK(returned - static_cast<int64_t>(packet) < kWindowUpdateThreshold);
  // The count starts again from zero.
  CHECK(credit.written(1) == 0);
  CHECK(credit.written(static_cast<size_t>(kWindowUpdateThreshold) - 1) == kWindowUpdateThreshold);
}

TEST_CASE("credit counted from two threads is returned exactly once", "[tunnel]") {
  CreditReturn credit;
  const int kPerThread = 20000;
  const size_t kBytes = 4096;
  std::vector<int64_t> sums(2, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) sums[t] += credit.written(kBytes);
    });
  }
  for (auto& th : threads) th.join();
  const int64_t total = 2LL * kPerThread * static_cast<int64_t>(kBytes);
  // What was not handed back yet is below one threshold; nothing was lost or returned twice.
  int64_t rest = credit.written(static_cast<size_t>(kWindowUpdateThreshold));
  CHECK(sums[0] + sums[1] + rest == total + kWindowUpdateThreshold);
  CHECK(rest >= kWindowUpdateThreshold);
  CHECK(rest < 2 * kWindowUpdateThreshold);
}
