#pragma once

#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace konn::kubeproxy {

// kubectl proxy's request filter (FilterServer): a request passes when its path matches no
// reject-paths pattern, its method matches no reject-methods pattern, its path matches an
// accept-paths pattern and its host (the Host header without port) matches an accept-hosts
// pattern. Patterns match anywhere in the text (Go's MatchString), so anchors are the user's.
class RequestFilter {
 public:
  // Throws std::regex_error for a pattern that does not compile; `what` names the flag.
  RequestFilter(const std::vector<std::string>& accept_paths,
                const std::vector<std::string>& reject_paths,
                const std::vector<std::string>& accept_hosts,
                const std::vector<std::string>& reject_methods);

  bool accept(std::string_view method, std::string_view path, std::string_view host) const;

  // "localhost:8001" -> "localhost", "[::1]:80" -> "[::1]", "example" -> "example".
  static std::string_view strip_port(std::string_view host);

 private:
  // A pattern made only of literals, ".*" and the anchors ^ and $ (every kubectl default) is
  // matched by substring search, which is far cheaper per request than std::regex; anything else
  // goes to std::regex. Both give Go's MatchString answer.
  struct Pattern {
    bool simple = false;
    bool anchored_start = false;
    bool anchored_end = false;
    std::vector<std::string> literals;  // separated by ".*"
    std::regex re;
    explicit Pattern(const std::string& text);
    bool search(std::string_view text) const;
  };
  static std::vector<Pattern> compile(const std::vector<std::string>& patterns);
  static bool any(const std::vector<Pattern>& list, std::string_view text);

  std::vector<Pattern> accept_paths_, reject_paths_, accept_hosts_, reject_methods_;
};

}  // namespace konn::kubeproxy
