#include "kubeproxy-http/request_filter.h"

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

std::vector<RequestFilter::Pattern> RequestFilter::compile(const std::vector<std::string>& patterns) {
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

bool RequestFilter::accept(std::string_view method, std::string_view path,
                           std::string_view host) const {
  if (any(reject_paths_, path)) return false;
  if (any(reject_methods_, method)) return false;
  return any(accept_paths_, path) && any(accept_hosts_, host);
}

std::string_view RequestFilter::strip_port(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    size_t close = host.find(']');
    return close == std::string_view::npos ? host : host.substr(0, close + 1);
  }
  size_t colon = host.rfind(':');
  if (colon != std::string_view::npos && host.find(':') == colon) return host.substr(0, colon);
  return host;
}

}  // namespace konn::kubeproxy
