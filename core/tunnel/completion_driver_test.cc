#include "core/tunnel/completion_driver.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>

#include <catch2/catch.hpp>
#include <grpcpp/alarm.h>

using namespace konn::core::tunnel;

namespace {

// Records each completion: its `ok` and whether it ran on the driver's thread.
class Recorder {
 public:
  explicit Recorder(CompletionDriver& driver) : driver_(driver) {}
  void on_alarm(bool ok) {
    std::lock_guard lock(mu_);
    oks.push_back(ok);
    on_driver.push_back(driver_.on_driver_thread());
  }
  size_t count() {
    std::lock_guard lock(mu_);
    return oks.size();
  }

  std::mutex mu_;
  std::vector<bool> oks;
  std::vector<bool> on_driver;

 private:
  CompletionDriver& driver_;
};

auto in(std::chrono::milliseconds ms) { return std::chrono::system_clock::now() + ms; }

}  // namespace

TEST_CASE("a completion driver runs every completion on its one thread with gRPC's ok",
          "[completion_driver]") {
  CompletionDriver driver("test-cq");
  Recorder rec(driver);
  MemberTag<Recorder, &Recorder::on_alarm> fired(&rec);
  MemberTag<Recorder, &Recorder::on_alarm> cancelled(&rec);
  grpc::Alarm a;
  grpc::Alarm b;
  a.Set(driver.cq(), in(std::chrono::milliseconds(1)), hand_over(&fired));
  b.Set(driver.cq(), in(std::chrono::hours(1)), hand_over(&cancelled));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (rec.count() < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  b.Cancel();
  while (rec.count() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::lock_guard lock(rec.mu_);
  REQUIRE(rec.oks == std::vector<bool>{true, false});
  REQUIRE(rec.on_driver == std::vector<bool>{true, true});
  REQUIRE_FALSE(driver.on_driver_thread());
  REQUIRE(driver.server_cq() == nullptr);
}

TEST_CASE("destroying a completion driver waits for the completions still due",
          "[completion_driver]") {
  std::atomic<int> done{0};
  struct Counter {
    std::atomic<int>* done;
    void on_alarm(bool ok) {
      if (ok) ++*done;
    }
  } counter{&done};
  MemberTag<Counter, &Counter::on_alarm> tag(&counter);
  grpc::Alarm alarm;
  {
    CompletionDriver driver("test-cq");
    alarm.Set(driver.cq(), in(std::chrono::milliseconds(200)), hand_over(&tag));
  }
  REQUIRE(done == 1);
}
