#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

namespace konn::core::log {

// Sets the level of every component logger, present and future. Accepts spdlog names
// ("trace", "debug", "info", "warn", "error", "off") and klog verbosity numbers ("0".."10"):
// 0-1 info, 2-4 debug, 5+ trace. Returns false for anything else.
bool set_level(std::string_view level);

// Makes every logger write to `path` (appending) instead of stderr. Call before get().
void set_file(const std::string& path);

// The logger of one component ("server.frontend", "agent.stream", "relay", ...), created on first
// use. Thread-safe; cache the result, lookups take a lock.
std::shared_ptr<spdlog::logger> get(const std::string& component);

}  // namespace konn::core::log
