#include "proxy-server/lease_controller.h"

#include <algorithm>
#include <cmath>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>

#include "core/log/log_macros.h"
#include "core/log/logger.h"

namespace konn::server {

using core::io::use_nothrow;
using core::kube::Lease;
using core::kube::LeaseClient;

namespace {

bool answered(const LeaseClient::Result& r) { return r.response.status != 0; }

std::string describe(const LeaseClient::Result& r) {
  if (!answered(r)) return r.response.error;
  std::string out = "HTTP " + std::to_string(r.response.status);
  if (!r.reason.empty()) out += " " + r.reason;
  if (!r.response.error.empty()) out += ": " + r.response.error;
  return out;
}

}  // namespace

LeaseController::LeaseController(core::kube::ApiTarget target, Settings settings,
                                 ServerMetrics& metrics)
    : guard_(ctx_.get_executor()),
      client_(std::move(target), settings.lease_namespace, settings.request_timeout),
      settings_(std::move(settings)),
      name_(lease_name(settings_.server_id)),
      selector_(core::kube::format_label_set(settings_.labels)),
      metrics_(metrics),
      log_(core::log::get("server.lease")) {}

LeaseController::~LeaseController() { stop(); }

void LeaseController::start() {
  renew_timer_ = std::make_unique<asio::steady_timer>(ctx_);
  gc_timer_ = std::make_unique<asio::steady_timer>(ctx_);
  stopped_ = std::make_unique<asio::steady_timer>(ctx_);
  loops_ = 2;
  asio::co_spawn(ctx_, renew_loop(), asio::detached);
  asio::co_spawn(ctx_, gc_loop(), asio::detached);
  thread_ = std::thread([this] { ctx_.run(); });
  KONN_LOG(log_, info, "lease {}/{} labelled {}: renewed every {} ms, expired ones collected",
           settings_.lease_namespace, name_, selector_, settings_.renew_interval.count());
}

void LeaseController::stop() {
  if (!thread_.joinable()) return;
  asio::co_spawn(
      ctx_,
      [this]() -> core::io::Awaitable<void> {
        stopping_ = true;
        renew_timer_->cancel();
        gc_timer_->cancel();
        // Wait for a call in flight (bounded by its timeout) so nothing renews after the delete.
        while (loops_ > 0) {
          stopped_->expires_at(asio::steady_timer::time_point::max());
          co_await stopped_->async_wait(use_nothrow);
        }
        co_await release();
        guard_.reset();
      },
      asio::detached);
  thread_.join();
}

core::kube::Lease LeaseController::renewed(Lease base) const {
  base.name = name_;
  base.labels = settings_.labels;
  base.holder_identity = settings_.server_id;
  auto seconds = std::chrono::duration<double>(settings_.renew_interval).count() * 2;
  base.lease_duration_seconds = std::max(1, static_cast<int>(std::lround(seconds)));
  base.renew_time = std::chrono::system_clock::now();
  return base;
}

core::io::Awaitable<void> LeaseController::renew_loop() {
  while (!stopping_) {
    co_await renew_once();
    if (stopping_) break;
    renew_timer_->expires_after(settings_.renew_interval);
    co_await renew_timer_->async_wait(use_nothrow);
  }
  if (--loops_ == 0) stopped_->cancel();
}

core::io::Awaitable<void> LeaseController::gc_loop() {
  while (!stopping_) {
    co_await collect_once();
    if (stopping_) break;
    gc_timer_->expires_after(settings_.renew_interval);
    co_await gc_timer_->async_wait(use_nothrow);
  }
  if (--loops_ == 0) stopped_->cancel();
}

core::io::Awaitable<void> LeaseController::renew_once() {
  auto ex = ctx_.get_executor();
  std::string failure;
  // Two rounds: a stale resourceVersion (409) or a lease deleted under us (404) is read again.
  for (int round = 0; round < 2 && failure.empty(); ++round) {
    if (!own_) {
      auto got = co_await client_.get(ex, name_);
      if (got.response.status == 404) {
        Lease fresh = renewed(Lease{});
        auto made = co_await client_.create(ex, fresh);
        if ((made.response.status == 200 || made.response.status == 201) && made.lease) {
          own_ = std::move(made.lease);
          KONN_LOG(log_, info, "created lease {}/{}", settings_.lease_namespace, name_);
          break;
        }
        if (made.response.status == 409) continue;  // another writer created it: read it
        failure = "create: " + describe(made);
        break;
      }
      if (got.response.status != 200 || !got.lease) {
        failure = "get: " + describe(got);
        break;
      }
      own_ = std::move(got.lease);
    }
    Lease next = renewed(*own_);
    auto put = co_await client_.update(ex, next);
    if (put.response.status == 200 && put.lease) {
      own_ = std::move(put.lease);
      break;
    }
    if (put.response.status == 409 || put.response.status == 404) {
      own_.reset();  // stale or gone: read it again
      if (round == 1) failure = "update: " + describe(put);
      continue;
    }
    failure = "update: " + describe(put);
  }
  if (!failure.empty()) {
    if (!renew_failing_) {
      KONN_LOG(log_, warn, "cannot renew lease {}/{} (retrying every {} ms): {}",
               settings_.lease_namespace, name_, settings_.renew_interval.count(), failure);
    }
    renew_failing_ = true;
  } else if (renew_failing_) {
    renew_failing_ = false;
    KONN_LOG(log_, info, "lease {}/{} renewed again", settings_.lease_namespace, name_);
  }
}

core::io::Awaitable<void> LeaseController::collect_once() {
  auto ex = ctx_.get_executor();
  auto listed = co_await client_.list(ex, selector_);
  observe_list(listed);
  if (listed.response.status != 200 || !listed.response.error.empty()) {
    KONN_LOG(log_, warn, "cannot list leases {} to collect expired ones: {}", selector_,
             describe(listed));
    co_return;
  }
  auto now = std::chrono::system_clock::now();
  for (const Lease& lease : listed.items) {
    if (core::kube::lease_valid(lease, now) || stopping_) continue;
    auto gone = co_await client_.remove(ex, lease.name, lease.resource_version);
    observe_delete(gone);
    int status = gone.response.status;
    if (status == 200 || status == 202) {
      metrics_.culled_leases_count.Add({}).Increment();
      KONN_LOG(log_, info, "deleted expired lease {}/{} (holder {})", settings_.lease_namespace,
               lease.name, lease.holder_identity);
    } else if (status == 404) {
      KONN_LOG(log_, debug, "expired lease {} was already deleted", lease.name);
    } else if (status == 409) {
      KONN_LOG(log_, debug, "expired lease {} changed meanwhile: kept", lease.name);
    } else {
      KONN_LOG(log_, warn, "cannot delete expired lease {}: {}", lease.name, describe(gone));
    }
  }
}

core::io::Awaitable<void> LeaseController::release() {
  auto ex = ctx_.get_executor();
  // By name, without a resourceVersion precondition: the name carries this server's id, and the
  // last renewal may have been applied without its answer reaching us.
  std::string any_version;
  auto gone = co_await client_.remove(ex, name_, any_version);
  observe_delete(gone);
  if (gone.response.status == 200 || gone.response.status == 202) {
    KONN_LOG(log_, info, "deleted own lease {}/{}", settings_.lease_namespace, name_);
  } else if (gone.response.status == 404) {
    KONN_LOG(log_, info, "own lease {}/{} already gone", settings_.lease_namespace, name_);
  } else {
    KONN_LOG(log_, warn, "cannot delete own lease {}/{} (it expires by itself): {}",
             settings_.lease_namespace, name_, describe(gone));
  }
  own_.reset();
}

void LeaseController::observe_list(const LeaseClient::Result& r) {
  // As upstream: only answers of the apiserver are counted (a transport failure has no code).
  if (!answered(r)) return;
  metrics_.lease_list(r.response.status, r.reason, r.latency.count());
}

void LeaseController::observe_delete(const LeaseClient::Result& r) {
  if (!answered(r)) return;
  metrics_.lease_delete(r.response.status, r.reason, r.latency.count());
}

}  // namespace konn::server
