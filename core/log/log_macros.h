#pragma once

#include "core/log/logger.h"

// KONN_LOG(logger, level, fmt, ...): formats only when `level` is enabled, so a disabled debug
// line costs one comparison. `level` is a spdlog level name without prefix: trace, debug, info,
// warn, err, critical.
#define KONN_LOG(logger, lvl, ...)                             \
  do {                                                         \
    if ((logger)->should_log(spdlog::level::lvl)) {            \
      (logger)->log(spdlog::level::lvl, __VA_ARGS__);          \
    }                                                          \
  } while (0)

// KONN_CONN_LOG(logger, level, conn, fmt, ...): a line about one connection, prefixed with its
// ids. `conn` is anything with `log_prefix()` returning a string such as "[C12 D77 Aagent-1] ".
#define KONN_CONN_LOG(logger, lvl, conn, fmt, ...)                                       \
  do {                                                                                   \
    if ((logger)->should_log(spdlog::level::lvl)) {                                      \
      (logger)->log(spdlog::level::lvl, "{}" fmt, (conn).log_prefix(), ##__VA_ARGS__);   \
    }                                                                                    \
  } while (0)
