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
//
// The path patterns are matched on the path as kube-apiserver routes it, never on the bytes the
// client sent: kube-apiserver percent-decodes the path before routing, so `.../pods/x/%65xec`
// and `.../pods/x%2Fexec` reach `exec`. A request path has several readings, and the filter
// must hold for every one of them (a path is rejected when any reading matches reject-paths,
// and accepted only when every reading matches accept-paths):
//   - the path percent-decoded once (what kubectl matches, and what kube-apiserver routes);
//   - that path cleaned as Go's path.Clean does (`/./`, `/../`, `//`), for any server or proxy
//     in between that normalises paths;
//   - each of those without its trailing slashes (kube-apiserver routes `.../secrets/` as
//     `.../secrets`);
//   - the same again after a second and a third decoding, when the decoded path still holds an
//     escape (`%2565xec` -> `%65xec` -> `exec`): a path whose meaning depends on how often it is
//     decoded must pass in every reading. A path still holding an escape after three decodings
//     is refused.
// A path without '%' and without dot or empty segments (the common case) has one reading, two
// when it ends with '/': the check stays a plain pattern match.
class RequestFilter {
 public:
  // Throws std::regex_error for a pattern that does not compile; `what` names the flag.
  RequestFilter(const std::vector<std::string>& accept_paths,
                const std::vector<std::string>& reject_paths,
                const std::vector<std::string>& accept_hosts,
                const std::vector<std::string>& reject_methods);

  // `path`: the request path as sent (escaped, without the query), whose escapes are valid
  // (valid_escapes()). `host`: the host as strip_port() gives it.
  bool accept(std::string_view method, std::string_view path, std::string_view host) const;

  // The host part of a Host header value, as Go's net.SplitHostPort reads it, with the brackets
  // of an IPv6 literal kept: "localhost:8001" -> "localhost", "[::1]:80" -> "[::1]". A value
  // SplitHostPort refuses (no port, too many colons, junk after "]") is returned whole, as
  // kubectl does: "localhost" -> "localhost", "[::1]" -> "[::1]", "[::1]x:80" -> "[::1]x:80".
  static std::string_view strip_port(std::string_view host);

  // Go's httpguts.ValidHostHeader: letters, digits and !$%&'()*+,-.:;=[]_~ only (Go answers
  // anything else 400 before a handler runs).
  static bool valid_host(std::string_view host);
  // Go's url.PathUnescape: true when every '%' starts a two-hex-digit escape.
  static bool valid_escapes(std::string_view path);
  // Decodes every valid %XX escape; a '%' that starts none stays as it is.
  static std::string percent_decode(std::string_view path);
  // True when `path` holds at least one valid %XX escape.
  static bool has_escape(std::string_view path);
  // Go's ServeMux cleanPath: path.Clean (no empty, "." or ".." segments), keeping a trailing
  // slash, rooted ("" -> "/").
  static std::string clean_path(std::string_view path);
  // clean_path(path) == path, without building it.
  static bool is_clean(std::string_view path);

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

  // One reading of the path: not rejected and accepted, with and without trailing slashes.
  bool reading_ok(std::string_view path) const;
  bool path_ok(std::string_view path) const;
  bool host_ok(std::string_view host) const;

  std::vector<Pattern> accept_paths_, reject_paths_, accept_hosts_, reject_methods_;
};

}  // namespace konn::kubeproxy
