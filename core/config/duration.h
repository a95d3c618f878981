#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace konn::core::config {

using Duration = std::chrono::nanoseconds;

// Parses Go's time.ParseDuration syntax: "300ms", "1.5h", "2h45m", "-1s", "0". Units ns, us
// (or µs), ms, s, m, h; every number but a lone "0" needs a unit. nullopt on bad syntax or
// overflow.
std::optional<Duration> parse_go_duration(std::string_view text);

// Formats like Go's Duration.String(): "1h0m0s", "1.5s", "300ms", "0s".
std::string format_go_duration(Duration d);

}  // namespace konn::core::config
