#include "kubeproxy-http/request_filter.h"

namespace konn::kubeproxy {
namespace {

std::vector<std::regex> compile(const std::vector<std::string>& patterns) {
  std::vector<std::regex> out;
  out.reserve(patterns.size());
  for (const auto& p : patterns) out.emplace_back(p, std::regex::ECMAScript | std::regex::optimize);
  return out;
}

}  // namespace

RequestFilter::RequestFilter(const std::vector<std::string>& accept_paths,
                             const std::vector<std::string>& reject_paths,
                             const std::vector<std::string>& accept_hosts,
                             const std::vector<std::string>& reject_methods)
    : accept_paths_(compile(accept_paths)),
      reject_paths_(compile(reject_paths)),
      accept_hosts_(compile(accept_hosts)),
      reject_methods_(compile(reject_methods)) {}

bool RequestFilter::any(const std::vector<std::regex>& list, std::string_view text) {
  for (const auto& re : list) {
    if (std::regex_search(text.begin(), text.end(), re)) return true;
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
