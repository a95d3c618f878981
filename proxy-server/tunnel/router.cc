#include "proxy-server/tunnel/router.h"

#include "core/log/log_macros.h"
#include "core/log/rate_limit.h"
#include "proxy-server/backend/backend.h"

namespace konn::server {
namespace {

std::shared_ptr<spdlog::logger> limits_log() {
  static const auto logger = core::log::get("server.limits");
  return logger;
}

// A flood of dials refused at one limit logs one line a second (the metric counts every one);
// each limit has its own allowance, so one being hit never hides another.
core::log::RateLimit& dial_refusal_log_limit(const char* limit) {
  static core::log::RateLimit tunnels_per_agent, pending, pending_per_agent, other;
  std::string_view l = limit != nullptr ? limit : "";
  if (l == "tunnels_per_agent") return tunnels_per_agent;
  if (l == "pending_dials") return pending;
  if (l == "pending_dials_per_agent") return pending_per_agent;
  return other;
}

// What a rate-limited line adds about the lines it stands for.
std::string held_back_note(uint64_t held) {
  return held > 0 ? " (" + std::to_string(held) + " more since the last such line)" : "";
}

std::vector<ProxyStrategy> strategies_of(const ServerOptions& o) {
  std::vector<ProxyStrategy> out;
  for (const auto& name : o.proxy_strategies) {
    if (auto s = parse_proxy_strategy(name)) out.push_back(*s);
  }
  return out;
}

}  // namespace

// How late a frontend's wait may end, so that waits ending close together share one wake-up.
constexpr std::chrono::milliseconds kDeadlineSlack{20};

Router::Router(const ServerOptions& options, asio::io_context& timers, ServerMetrics& metrics)
    : options_(options),
      backends_(strategies_of(options),
                parse_agent_choice(options.agent_choice).value_or(AgentChoice::LeastLoaded)),
      timers_(timers),
      deadlines_(timers.get_executor(), kDeadlineSlack),
      metrics_(metrics) {
  pending_.set_gauge(&metrics_.pending);
  for (auto s : strategies_of(options)) metrics_.set_ready(to_string(s), 0);
}

void Router::add_backend(const std::shared_ptr<Backend>& backend) {
  backends_.add(backend);
  update_ready_gauges();
  backends_changed();
}

void Router::remove_backend(const Backend* backend) {
  backends_.remove(backend);
  update_ready_gauges();
  backends_changed();
}

void Router::set_on_backends_changed(std::function<void()> hook) {
  std::lock_guard lock(hook_mu_);
  on_backends_changed_ = std::move(hook);
}

void Router::backends_changed() {
  std::lock_guard lock(hook_mu_);
  if (on_backends_changed_) on_backends_changed_();
}

bool Router::acquire_frontend(const std::string& peer) {
  auto limit = static_cast<int64_t>(options_.max_frontend_streams);
  int64_t now = frontends_.fetch_add(1) + 1;
  if (limit > 0 && now > limit) {
    frontends_.fetch_sub(1);
    metrics_.limit_hit("frontend_streams");
    // A client hammering the limit gets one line a second; the metric counts every refusal.
    static core::log::RateLimit refusals_logged;
    if (uint64_t held = 0; refusals_logged.allow(&held)) {
      KONN_LOG(limits_log(), warn,
               "frontend from {} refused: {} frontend streams open (--max-frontend-streams){}",
               peer, limit, held_back_note(held));
    }
    return false;
  }
  return true;
}

void Router::release_frontend() { frontends_.fetch_sub(1); }

void Router::dial_failed(const std::string& reason, Backend* backend,
                         const std::string& destination, const std::string& error) {
  metrics_.dial_failure(reason);
  std::string agent = backend != nullptr ? backend->agent_id() : std::string();
  if (backend != nullptr && !error.empty()) backend->set_last_error(error);
  dial_failures_.record({std::chrono::system_clock::now(), reason, std::move(agent), destination,
                         error});
}

std::optional<Router::DialRefusal> Router::add_pending(int64_t random,
                                                       std::weak_ptr<Frontend> frontend,
                                                       const Backend& backend) {
  auto refuse = [&](const char* limit, std::string error, int status) {
    if (limit != nullptr) metrics_.limit_hit(limit);
    dial_failures_.record({std::chrono::system_clock::now(),
                           std::string("limit:") + (limit != nullptr ? limit : "duplicate_dial_id"),
                           backend.agent_id(), {}, error});
    if (uint64_t held = 0; dial_refusal_log_limit(limit).allow(&held)) {
      KONN_LOG(limits_log(), warn, "[D{} A{}] dial refused: {}{}", random, backend.agent_id(),
               error, held_back_note(held));
    }
    return DialRefusal{std::move(error), status};
  };
  auto per_agent = static_cast<size_t>(options_.max_tunnels_per_agent);
  if (per_agent > 0 && backend.connection_count() + pending_.size_of(&backend) >= per_agent) {
    return refuse("tunnels_per_agent",
                  "agent " + backend.agent_id() + " carries too many tunnels (limit " +
                      std::to_string(per_agent) + ", --max-tunnels-per-agent)",
                  503);
  }
  switch (pending_.add(
      random, std::move(frontend), &backend, static_cast<size_t>(options_.max_pending_dials),
      static_cast<size_t>(options_.max_pending_dials_per_agent), backend.pending_dials())) {
    case PendingDialTable::AddResult::Added:
      return std::nullopt;
    case PendingDialTable::AddResult::Duplicate:
      return refuse(nullptr, "dial id " + std::to_string(random) + " is already pending", 502);
    case PendingDialTable::AddResult::TooMany:
      return refuse("pending_dials",
                    "too many pending dials (limit " + std::to_string(options_.max_pending_dials) +
                        ", --max-pending-dials)",
                    503);
    case PendingDialTable::AddResult::TooManyForAgent:
      return refuse("pending_dials_per_agent",
                    "too many pending dials to agent " + backend.agent_id() + " (limit " +
                        std::to_string(options_.max_pending_dials_per_agent) +
                        ", --max-pending-dials-per-agent)",
                    503);
  }
  return std::nullopt;
}

void Router::update_ready_gauges() {
  for (auto s : strategies_of(options_)) {
    metrics_.set_ready(to_string(s), static_cast<double>(backends_.usable_by(s)));
  }
  metrics_.ready_backend_connections.Add({}).Set(static_cast<double>(backends_.agent_count()));
}

}  // namespace konn::server
