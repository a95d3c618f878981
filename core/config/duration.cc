#include "core/config/duration.h"

#include <cstdint>
#include <limits>

namespace konn::core::config {
namespace {

struct Unit {
  std::string_view name;
  int64_t nanos;
};
constexpr Unit kUnits[] = {{"ns", 1},           {"us", 1000},          {"\xC2\xB5s", 1000},
                           {"\xCE\xBCs", 1000}, {"ms", 1000000},       {"s", 1000000000},
                           {"m", 60000000000},  {"h", 3600000000000}};

}  // namespace

std::optional<Duration> parse_go_duration(std::string_view s) {
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s == "0") return Duration{0};
  if (s.empty()) return std::nullopt;
  long double total = 0;
  while (!s.empty()) {
    size_t i = 0;
    long double value = 0;
    bool digits = false;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      value = value * 10 + (s[i] - '0');
      ++i;
      digits = true;
    }
    if (i < s.size() && s[i] == '.') {
      ++i;
      long double scale = 0.1L;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        value += (s[i] - '0') * scale;
        scale /= 10;
        ++i;
        digits = true;
      }
    }
    if (!digits) return std::nullopt;
    s.remove_prefix(i);
    const Unit* unit = nullptr;
    size_t best = 0;
    for (const auto& u : kUnits) {
      if (s.substr(0, u.name.size()) == u.name && u.name.size() > best) {
        unit = &u;
        best = u.name.size();
      }
    }
    if (unit == nullptr) return std::nullopt;
    s.remove_prefix(best);
    total += value * static_cast<long double>(unit->nanos);
  }
  if (total > static_cast<long double>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  auto n = static_cast<int64_t>(total + 0.5L);
  return Duration{negative ? -n : n};
}

std::string format_go_duration(Duration d) {
  int64_t n = d.count();
  if (n == 0) return "0s";
  std::string sign = n < 0 ? "-" : "";
  uint64_t u = n < 0 ? static_cast<uint64_t>(-(n + 1)) + 1 : static_cast<uint64_t>(n);
  auto frac = [](uint64_t v, uint64_t unit) {
    std::string out = std::to_string(v / unit);
    uint64_t rest = v % unit;
    if (rest != 0) {
      std::string digits = std::to_string(rest);
      std::string pad(std::to_string(unit).size() - 1 - digits.size(), '0');
      digits = pad + digits;
      while (!digits.empty() && digits.back() == '0') digits.pop_back();
      out += "." + digits;
    }
    return out;
  };
  if (u < 1000) return sign + std::to_string(u) + "ns";
  if (u < 1000000) return sign + frac(u, 1000) + "\xC2\xB5s";
  if (u < 1000000000) return sign + frac(u, 1000000) + "ms";
  uint64_t secs = u / 1000000000;
  std::string out = sign;
  if (secs >= 3600) out += std::to_string(secs / 3600) + "h";
  if (secs >= 60) out += std::to_string((secs / 60) % 60) + "m";
  out += frac(u % 60000000000, 1000000000) + "s";
  return out;
}

}  // namespace konn::core::config
