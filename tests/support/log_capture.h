#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <spdlog/sinks/ringbuffer_sink.h>

#include "core/log/logger.h"

namespace konn::testsupport {

// Keeps the last lines one of the daemons' loggers (core::log::get(name)) writes while it lives,
// with that logger's level lowered to `level`; the logger's sinks and level are restored after.
// For tests of what is logged at which level.
class LogCapture {
 public:
  explicit LogCapture(const std::string& logger_name,
                      spdlog::level::level_enum level = spdlog::level::debug, size_t lines = 64)
      : log_(core::log::get(logger_name)),
        ring_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(lines)),
        saved_level_(log_->level()) {
    log_->sinks().push_back(ring_);
    log_->set_level(level);
  }
  ~LogCapture() {
    log_->sinks().pop_back();
    log_->set_level(saved_level_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // The level of the last captured line that contains `text`, if one does.
  std::optional<spdlog::level::level_enum> level_of(std::string_view text) const {
    std::optional<spdlog::level::level_enum> found;
    for (const auto& m : ring_->last_raw()) {
      if (std::string_view(m.payload.data(), m.payload.size()).find(text) != std::string::npos) {
        found = m.level;
      }
    }
    return found;
  }
  // True when a captured line at `level` contains `text`.
  bool has(spdlog::level::level_enum level, std::string_view text) const {
    for (const auto& m : ring_->last_raw()) {
      if (m.level == level &&
          std::string_view(m.payload.data(), m.payload.size()).find(text) != std::string::npos) {
        return true;
      }
    }
    return false;
  }

 private:
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> ring_;
  spdlog::level::level_enum saved_level_;
};

}  // namespace konn::testsupport
