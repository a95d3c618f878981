#include "kubeproxy-http/request_filter.h"

#include <algorithm>

namespace konn::kubeproxy {
RequestFilter::Pattern::Pattern(const std::string& text) {
  std::string_view t = text;
  bool ok = true;
  if (!t.empty() && t.front() == '^') {
    anchored_start = true;
    t.remove_prefix(1);
  }
  if (!t.empty() && t.back() == '$' && (t.size() < 2 || t[t.size() - 2] != '\\')) {
    anchored_end = true;
    t.remove_suffix(1);
  }
  std::string lit;
  for (size_t i = 0; i < t.size() && ok; ++i) {
    char c = t[i];
    if (c == '.' && i + 1 < t.size() && t[i + 1] == '*') {
      literals.push_back(lit);
      lit.clear();
      ++i;
    } else if (c == '\\' && i + 1 < t.size() &&
               std::string_view(".[]()*+?{}|^$\\/-").find(t[i + 1]) != std::string_view::npos) {
      lit.push_back(t[++i]);
    } else if (std::string_view(".[]()*+?{}|^$\\").find(c) != std::string_view::npos) {
      ok = false;
    } else {
      lit.push_back(c);
    }
  }
  literals.push_back(lit);
  simple = ok;
  if (!simple) {
    literals.clear();
    re = std::regex(text, std::regex::ECMAScript | std::regex::optimize);
  }
}

bool RequestFilter::Pattern::search(std::string_view text) const {
  if (!simple) return std::regex_search(text.begin(), text.end(), re);
  // literals[0] .* literals[1] .* ... literals[n-1]
  size_t n = literals.size();
  size_t pos = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::string& lit = literals[i];
    bool first = i == 0;
    bool last = i == n - 1;
    if (first && anchored_start) {
      if (text.substr(0, lit.size()) != lit) return false;
      if (last && anchored_end) return text.size() == lit.size();
      pos = lit.size();
      continue;
    }
    if (last && anchored_end) {
      return text.size() >= pos + lit.size() && text.substr(text.size() - lit.size()) == lit;
    }
    size_t at = text.find(lit, pos);
    if (at == std::string_view::npos) return false;
    pos = at + lit.size();
  }
  return true;
}

std::vector<RequestFilter::Pattern> RequestFilter::compile(
    const std::vector<std::string>& patterns) {
  std::vector<Pattern> out;
  out.reserve(patterns.size());
  for (const auto& p : patterns) out.emplace_back(p);
  return out;
}

RequestFilter::RequestFilter(const std::vector<std::string>& accept_paths,
                             const std::vector<std::string>& reject_paths,
                             const std::vector<std::string>& accept_hosts,
                             const std::vector<std::string>& reject_methods)
    : accept_paths_(compile(accept_paths)),
      reject_paths_(compile(reject_paths)),
      accept_hosts_(compile(accept_hosts)),
      reject_methods_(compile(reject_methods)) {}

bool RequestFilter::any(const std::vector<Pattern>& list, std::string_view text) {
  for (const auto& p : list) {
    if (p.search(text)) return true;
  }
  return false;
}

namespace {

// Decodings of a path the filter follows before it gives up (see the class comment).
constexpr int kMaxDecodings = 3;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool RequestFilter::reading_ok(std::string_view path) const {
  if (any(reject_paths_, path) || !any(accept_paths_, path)) return false;
  std::string_view trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.remove_suffix(1);
  if (trimmed.size() == path.size()) return true;
  return !any(reject_paths_, trimmed) && any(accept_paths_, trimmed);
}

bool RequestFilter::path_ok(std::string_view path) const {
  if (path.find('%') == std::string_view::npos) {
    // The common case: one reading (two with a trailing slash). Dot and empty segments are
    // answered with a redirect by the forwarder, as kubectl's ServeMux does, so the cleaned
    // reading is built only when the caller did not.
    if (!reading_ok(path)) return false;
    return is_clean(path) || reading_ok(clean_path(path));
  }
  std::string cur = percent_decode(path);
  for (int decodings = 1;; ++decodings) {
    if (!reading_ok(cur)) return false;
    if (!is_clean(cur) && !reading_ok(clean_path(cur))) return false;
    if (!has_escape(cur)) return true;
    if (decodings == kMaxDecodings) return false;
    cur = percent_decode(cur);
  }
}

bool RequestFilter::host_ok(std::string_view host) const {
  if (any(accept_hosts_, host)) return true;
  // An IPv6 literal is tried with and without its brackets: kubectl's default "^\[::1\]$" means
  // the bracketed form, while kubectl itself matches the bare one when a port follows (Go's
  // SplitHostPort drops the brackets), so patterns written for either form keep working.
  return host.size() > 2 && host.front() == '[' && host.back() == ']' &&
         any(accept_hosts_, host.substr(1, host.size() - 2));
}

bool RequestFilter::accept(std::string_view method, std::string_view path,
                           std::string_view host) const {
  if (any(reject_methods_, method)) return false;
  return path_ok(path) && host_ok(host);
}

std::string_view RequestFilter::strip_port(std::string_view host) {
  auto has = [](std::string_view s, char c) { return s.find(c) != std::string_view::npos; };
  if (!host.empty() && host.front() == '[') {
    size_t close = host.find(']');
    if (close == std::string_view::npos || close + 1 >= host.size() || host[close + 1] != ':') {
      return host;
    }
    std::string_view port = host.substr(close + 2);
    if (has(port, ':') || has(port, '[') || has(port, ']') || has(host.substr(1, close - 1), '[')) {
      return host;
    }
    return host.substr(0, close + 1);
  }
  size_t colon = host.rfind(':');
  if (colon == std::string_view::npos) return host;
  std::string_view name = host.substr(0, colon);
  std::string_view port = host.substr(colon + 1);
  if (has(name, ':') || has(name, '[') || has(name, ']') || has(port, '[') || has(port, ']')) {
    return host;
  }
  return name;
}

bool RequestFilter::valid_host(std::string_view host) {
  static constexpr std::string_view kPunct = "!$%&'()*+,-.:;=[]_~";
  for (char c : host) {
    bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              kPunct.find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

bool RequestFilter::valid_escapes(std::string_view path) {
  for (size_t i = path.find('%'); i != std::string_view::npos; i = path.find('%', i + 1)) {
    if (i + 2 >= path.size() || hex_value(path[i + 1]) < 0 || hex_value(path[i + 2]) < 0) {
      return false;
    }
  }
  return true;
}

bool RequestFilter::has_escape(std::string_view path) {
  for (size_t i = path.find('%'); i != std::string_view::npos; i = path.find('%', i + 1)) {
    if (i + 2 < path.size() && hex_value(path[i + 1]) >= 0 && hex_value(path[i + 2]) >= 0) {
      return true;
    }
  }
  return false;
}

std::string RequestFilter::percent_decode(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 2 < path.size() && hex_value(path[i + 1]) >= 0 &&
        hex_value(path[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex_value(path[i + 1]) * 16 + hex_value(path[i + 2])));
      i += 2;
    } else {
      out.push_back(path[i]);
    }
  }
  return out;
}

bool RequestFilter::is_clean(std::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  // Every segment after the leading '/' must be non-empty and neither "." nor ".."; only the
  // last may be empty (a trailing slash).
  size_t start = 1;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view seg = path.substr(start, end - start);
    if (seg == "." || seg == "..") return false;
    if (seg.empty()) return false;  // "//" (a trailing slash ends the loop before this)
    start = end + 1;
  }
  return true;
}

std::string RequestFilter::clean_path(std::string_view path) {
  if (path.empty()) return "/";
  // path.Clean on a rooted path: drop empty and "." segments, let ".." remove the segment
  // before it, never climbing above the root.
  std::string out = "/";
  out.reserve(path.size() + 1);
  size_t i = 0;
  const size_t n = path.size();
  while (i < n) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    size_t end = path.find('/', i);
    if (end == std::string_view::npos) end = n;
    std::string_view seg = path.substr(i, end - i);
    i = end;
    if (seg == ".") continue;
    if (seg == "..") {
      if (out.size() > 1) out.resize(std::max<size_t>(out.rfind('/'), 1));
      continue;
    }
    if (out.size() > 1) out.push_back('/');
    out.append(seg);
  }
  // ServeMux keeps a trailing slash.
  if (path.back() == '/' && out.size() > 1) out.push_back('/');
  return out;
}

}  // namespace konn::kubeproxy
