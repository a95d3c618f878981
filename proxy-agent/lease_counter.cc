#include "proxy-agent/lease_counter.h"

#include <algorithm>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/post.hpp>

#include "core/log/log_macros.h"
#include "core/log/logger.h"

namespace konn::agent {
namespace {

using namespace asio::experimental::awaitable_operators;
using core::kube::LeaseEvent;

spdlog::logger& lease_logger() {
  static const auto log = core::log::get("agent.lease");
  return *log;
}

constexpr std::chrono::milliseconds kLeaseFirstBackoff{1000};

// When the lease stops being valid: its renew time (else acquire time) plus its duration.
std::optional<core::kube::SystemTime> lease_expiry(const core::kube::Lease& lease) {
  auto last = lease.renew_time ? lease.renew_time : lease.acquire_time;
  if (!last || !lease.lease_duration_seconds) return std::nullopt;
  return *last + std::chrono::seconds(*lease.lease_duration_seconds);
}

std::string lease_answer_text(const core::kube::ApiResponse& r, const std::string& reason) {
  if (r.status == 0) return r.error;
  return "HTTP " + std::to_string(r.status) + (reason.empty() ? "" : " " + reason) +
         (r.error.empty() ? std::string() : ": " + r.error);
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
  stop_timer_ = std::make_unique<asio::steady_timer>(ctx_, asio::steady_timer::time_point::max());
  pause_timer_ = std::make_unique<asio::steady_timer>(ctx_);
  expiry_timer_ = std::make_unique<asio::steady_timer>(ctx_, asio::steady_timer::time_point::max());
  asio::co_spawn(ctx_, run(), asio::detached);
  asio::co_spawn(ctx_, expiry_loop(), asio::detached);
  thread_ = std::thread([this] { ctx_.run(); });
}

void LeaseCounter::stop() {
  if (!thread_.joinable()) return;
  asio::post(ctx_, [this] {
    stopping_ = true;
    stop_timer_->cancel();
    pause_timer_->cancel();
    expiry_timer_->cancel();
    guard_.reset();
  });
  thread_.join();
}

core::io::Awaitable<void> LeaseCounter::run() {
  auto backoff = kLeaseFirstBackoff;
  const auto cap = std::max(settings_.poll_interval, kLeaseFirstBackoff);
  try {
    while (!stopping_) {
      WatchOutcome outcome = WatchOutcome::Broken;  // a failed list waits as a broken watch
      if (co_await list()) {
        do {
          outcome = co_await watch();
          if (watch_answered_)
            backoff = kLeaseFirstBackoff;  // it ran: a break is news, not a habit
        } while (outcome == WatchOutcome::Ended && !stopping_);
      }
      // Expired: the version is too old for a watch; list again at once.
      if (outcome == WatchOutcome::Broken) {
        co_await pause(backoff);
        backoff = std::min(backoff * 2, cap);
      }
    }
  } catch (const std::exception& e) {
    if (!stopping_) {
      KONN_LOG((&lease_logger()), err, "lease counting stopped: {}; the last count stays",
               e.what());
    }
  }
}

core::io::Awaitable<void> LeaseCounter::pause(std::chrono::milliseconds d) {
  if (stopping_) co_return;
  pause_timer_->expires_after(d);
  co_await pause_timer_->async_wait(core::io::use_nothrow);
}

core::io::Awaitable<bool> LeaseCounter::list() {
  if (stopping_) co_return false;
  auto ex = ctx_.get_executor();
  // From the watch cache (resourceVersion=0), as client-go's reflector lists: cheap on big
  // clusters, and the watch that follows catches up from the version it answers with.
  auto raced = co_await (client_.list(ex, settings_.selector, true) ||
                         stop_timer_->async_wait(core::io::use_nothrow));
  if (raced.index() == 1 || stopping_) co_return false;
  auto r = std::get<0>(std::move(raced));
  // As upstream: only the apiserver's answers are counted (a transport failure has no code).
  if (r.response.status != 0) {
    metrics_.lease_list(r.response.status, r.reason, r.latency.count());
  }
  if (r.response.status != 200 || !r.response.error.empty()) {
    if (!failing_) {
      KONN_LOG((&lease_logger()), warn,
               "cannot list server leases ({}); keeping the last count {}, retrying for up to "
               "every {} ms",
               lease_answer_text(r.response, r.reason),
               last_ ? std::to_string(*last_) : std::string("(none yet)"),
               std::max(settings_.poll_interval, kLeaseFirstBackoff).count());
    }
    failing_ = true;
    co_return false;
  }
  if (failing_) KONN_LOG((&lease_logger()), info, "server leases listed again");
  failing_ = false;
  leases_.clear();
  for (auto& lease : r.items) {
    std::string name = lease.name;
    leases_.emplace(std::move(name), std::move(lease));
  }
  resource_version_ = r.resource_version;
  recount("list");
  co_return true;
}

core::io::Awaitable<LeaseCounter::WatchOutcome> LeaseCounter::watch() {
  if (stopping_) co_return WatchOutcome::Stopped;
  auto ex = ctx_.get_executor();
  auto base = static_cast<int>(settings_.watch_timeout.count());
  int timeout_seconds = std::max(1, base + std::uniform_int_distribution<int>(0, base)(rng_));
  int status = 0;
  bool expired = false;
  std::string error_event;
  watch_answered_ = false;
  auto on_answer = [&](int s) {
    status = s;
    watch_answered_ = s == 200;
    if (s == 200 && watch_failing_) {
      KONN_LOG((&lease_logger()), info, "lease watch runs again");
      watch_failing_ = false;
    }
    if (s == 200) {
      watching_ = true;
      recount("watch");  // arms the expiry timer again
    }
    // A refusal is counted at the end, with the reason its body gives.
    if (s == 200) metrics_.lease_watch(200, "");
  };
  auto on_event = [&](const LeaseEvent& e) {
    if (e.type != LeaseEvent::Type::Error) {
      apply(e);
      return true;
    }
    if (e.code == 410) {
      expired = true;
    } else {
      error_event = "ERROR event " + std::to_string(e.code) + " " + e.reason + ": " + e.message;
    }
    return false;  // the apiserver ends the stream after an error anyway
  };
  auto raced = co_await (client_.watch(ex, settings_.selector, resource_version_, timeout_seconds,
                                       on_answer, on_event) ||
                         stop_timer_->async_wait(core::io::use_nothrow));
  // Without a watch the leases are not current: no expiry by the clock until one runs again.
  watching_ = false;
  expiry_timer_->expires_at(asio::steady_timer::time_point::max());
  if (raced.index() == 1 || stopping_) co_return WatchOutcome::Stopped;
  auto end = std::get<0>(std::move(raced));
  std::string reason = status != 200 ? core::kube::status_reason(end.body) : std::string();
  if (status != 0 && status != 200) metrics_.lease_watch(status, reason);
  if (expired || status == 410) {
    KONN_LOG((&lease_logger()), info,
             "lease watch from resourceVersion {} is too old (410 Gone): listing again",
             resource_version_);
    co_return WatchOutcome::Expired;
  }
  if (status == 200 && end.error.empty()) {
    KONN_LOG((&lease_logger()), debug, "lease watch ended by the apiserver; watching again from {}",
             resource_version_);
    co_return WatchOutcome::Ended;
  }
  std::string why;
  if (!error_event.empty()) {
    why = error_event;
  } else if (status != 0 && status != 200) {
    why = "HTTP " + std::to_string(status) + (reason.empty() ? "" : " " + reason);
  } else {
    why = end.error;
  }
  // Once until a watch runs again: a refused watch (RBAC without `watch`) repeats every poll.
  if (!watch_failing_) {
    KONN_LOG((&lease_logger()), warn,
             "lease watch broke ({}); listing instead, for up to every {} ms, until a watch "
             "runs again (the last count {} stays)",
             why, std::max(settings_.poll_interval, kLeaseFirstBackoff).count(),
             last_ ? std::to_string(*last_) : std::string("(none yet)"));
  } else {
    KONN_LOG((&lease_logger()), debug, "lease watch broke again ({})", why);
  }
  watch_failing_ = true;
  co_return WatchOutcome::Broken;
}

void LeaseCounter::apply(const LeaseEvent& e) {
  if (!e.resource_version.empty()) resource_version_ = e.resource_version;
  switch (e.type) {
    case LeaseEvent::Type::Added:
    case LeaseEvent::Type::Modified:
      leases_[e.lease->name] = *e.lease;
      break;
    case LeaseEvent::Type::Deleted:
      leases_.erase(e.lease->name);
      break;
    case LeaseEvent::Type::Bookmark:
    case LeaseEvent::Type::Error:
      return;  // nothing changed
  }
  recount("watch");
}

core::io::Awaitable<void> LeaseCounter::expiry_loop() {
  while (!stopping_) {
    co_await expiry_timer_->async_wait(core::io::use_nothrow);
    if (stopping_) break;
    // A wait also ends when recount() moves the timer: count only when the expiry came.
    if (expiry_timer_->expiry() <= asio::steady_timer::clock_type::now()) recount("expiry");
  }
}

void LeaseCounter::recount(const char* why) {
  auto now = std::chrono::system_clock::now();
  int64_t valid = 0;
  std::optional<core::kube::SystemTime> earliest;
  for (const auto& [name, lease] : leases_) {
    if (!core::kube::lease_valid(lease, now)) continue;
    ++valid;
    auto expiry = lease_expiry(lease);
    if (expiry && (!earliest || *expiry < *earliest)) earliest = expiry;
  }
  if (earliest && watching_) {
    // One millisecond late, so that the lease is past its time when the timer fires.
    auto in = std::chrono::duration_cast<asio::steady_timer::duration>(*earliest - now) +
              std::chrono::milliseconds(1);
    expiry_timer_->expires_after(in);
  } else {
    expiry_timer_->expires_at(asio::steady_timer::time_point::max());
  }
  if (last_ == valid) return;
  KONN_LOG((&lease_logger()), info, "{} valid server lease(s) of {} matching {} in {} (by {})",
           valid, leases_.size(), settings_.selector, settings_.lease_namespace, why);
  last_ = valid;
  on_count_(valid);
}

}  // namespace konn::agent
