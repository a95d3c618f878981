#include "core/log/logger.h"

#include <charconv>
#include <mutex>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace konn::core::log {
namespace {

struct State {
  std::mutex mu;
  spdlog::level::level_enum level = spdlog::level::info;
  spdlog::sink_ptr sink;
};

State& state() {
  static State* s = [] {
    auto* st = new State();  // Exception: leaked on purpose so logging works during exit.
    st->sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    return st;
  }();
  return *s;
}

}  // namespace

bool set_level(std::string_view level) {
  spdlog::level::level_enum lvl{};
  int v = 0;
  auto [ptr, ec] = std::from_chars(level.data(), level.data() + level.size(), v);
  if (ec == std::errc() && ptr == level.data() + level.size()) {
    if (v < 0) return false;
    lvl = v <= 1 ? spdlog::level::info : v <= 4 ? spdlog::level::debug : spdlog::level::trace;
  } else {
    lvl = spdlog::level::from_str(std::string(level));
    if (lvl == spdlog::level::off && level != "off") return false;
  }
  auto& s = state();
  std::lock_guard lock(s.mu);
  s.level = lvl;
  spdlog::apply_all([lvl](const std::shared_ptr<spdlog::logger>& l) { l->set_level(lvl); });
  return true;
}

void set_file(const std::string& path) {
  auto& s = state();
  std::lock_guard lock(s.mu);
  s.sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path);
}

std::shared_ptr<spdlog::logger> get(const std::string& component) {
  auto& s = state();
  std::lock_guard lock(s.mu);
  if (auto existing = spdlog::get(component)) return existing;
  auto logger = std::make_shared<spdlog::logger>(component, s.sink);
  logger->set_level(s.level);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %L %n: %v", spdlog::pattern_time_type::utc);
  logger->flush_on(spdlog::level::warn);
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace konn::core::log
