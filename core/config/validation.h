#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace konn::core::config {

// The one wording of a range error in every daemon:
//   "--port: must be between 0 and 65535, got 70000"
// `flag` is written as the user writes it ("--port"); `what` optionally narrows the rule
// ("for a TCP frontend"). Appends to `errors` and returns false when `value` is outside
// [lo, hi].
inline bool check_range(std::vector<std::string>& errors, std::string_view flag, int64_t value,
                        int64_t lo, int64_t hi, std::string_view what = {}) {
  if (value >= lo && value <= hi) return true;
  std::string e(flag);
  e += ": must be between " + std::to_string(lo) + " and " + std::to_string(hi);
  if (!what.empty()) {
    e += ' ';
    e += what;
  }
  e += ", got " + std::to_string(value);
  errors.push_back(std::move(e));
  return false;
}

// The same words for a value that is not a number (a port inside a URL, say).
inline std::string range_error_text(std::string_view value, int64_t lo, int64_t hi) {
  return "\"" + std::string(value) + "\" must be between " + std::to_string(lo) + " and " +
         std::to_string(hi);
}

}  // namespace konn::core::config
