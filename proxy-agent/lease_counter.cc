#include "proxy-agent/lease_counter.h"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>

#include "core/log/log_macros.h"
#include "core/log/logger.h"

namespace konn::agent {
namespace {

spdlog::logger& lease_logger() {
  static const auto log = core::log::get("agent.lease");
  return *log;
}

}  // namespace

LeaseCounter::LeaseCounter(core::kube::ApiTarget target, Settings settings, AgentMetrics& metrics,
                           std::function<void(int64_t)> on_count)
    : guard_(ctx_.get_executor()),
      client_(std::move(target), settings.lease_namespace, settings.request_timeout),
      settings_(std::move(settings)),
      metrics_(metrics),
      on_count_(std::move(on_count)) {}

LeaseCounter::~LeaseCounter() { stop(); }

void LeaseCounter::start() {
  timer_ = std::make_unique<asio::steady_timer>(ctx_);
  asio::co_spawn(ctx_, poll_loop(), asio::detached);
  thread_ = std::thread([this] { ctx_.run(); });
}

void LeaseCounter::stop() {
  if (!thread_.joinable()) return;
  asio::post(ctx_, [this] {
    stopping_ = true;
    timer_->cancel();
    guard_.reset();
  });
  thread_.join();
}

core::io::Awaitable<void> LeaseCounter::poll_loop() {
  auto ex = ctx_.get_executor();
  while (!stopping_) {
    // From the watch cache: one list per agent per interval must stay cheap on big clusters.
    auto r = co_await client_.list(ex, settings_.selector, true);
    // As upstream: only the apiserver's answers are counted (a transport failure has no code).
    if (r.response.status != 0) {
      metrics_.lease_list(r.response.status, r.reason, r.latency.count());
    }
    if (r.response.status == 200 && r.response.error.empty()) {
      auto now = std::chrono::system_clock::now();
      int64_t valid = 0;
      for (const auto& lease : r.items) {
        if (core::kube::lease_valid(lease, now)) ++valid;
      }
      if (failing_ || last_ != valid) {
        KONN_LOG((&lease_logger()), info, "{} valid server lease(s) of {} matching {} in {}", valid,
                 r.items.size(), settings_.selector, settings_.lease_namespace);
      }
      failing_ = false;
      last_ = valid;
      on_count_(valid);
    } else {
      std::string why =
          r.response.status == 0
              ? r.response.error
              : "HTTP " + std::to_string(r.response.status) +
                    (r.reason.empty() ? "" : " " + r.reason) +
                    (r.response.error.empty() ? std::string() : ": " + r.response.error);
      if (!failing_) {
        KONN_LOG((&lease_logger()), warn, "cannot list server leases ({}); keeping the last count {}",
                 why, last_ ? std::to_string(*last_) : std::string("(none yet)"));
      }
      failing_ = true;
    }
    if (stopping_) break;
    timer_->expires_after(settings_.poll_interval);
    co_await timer_->async_wait(core::io::use_nothrow);
  }
}

}  // namespace konn::agent
