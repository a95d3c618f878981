#include "kubeproxy-http/request_filter.h"

#include <catch2/catch.hpp>

#include "kubeproxy-http/kubeproxy_options.h"

using konn::kubeproxy::KubeproxyOptions;
using konn::kubeproxy::RequestFilter;

namespace {
RequestFilter defaults() {
  KubeproxyOptions o;
  return RequestFilter(o.accept_paths, o.reject_paths, o.accept_hosts, o.reject_methods);
}
}  // namespace

TEST_CASE("kubectl default filter: localhost hosts only, exec and attach rejected", "[filter]") {
  auto f = defaults();
  CHECK(f.accept("GET", "/api/v1/pods", "localhost"));
  CHECK(f.accept("GET", "/api/v1/pods", "127.0.0.1"));
  CHECK(f.accept("GET", "/api/v1/pods", "[::1]"));
  CHECK_FALSE(f.accept("GET", "/api/v1/pods", "evil.example.com"));
  CHECK_FALSE(f.accept("GET", "/api/v1/pods", "127.0.0.1.evil.com"));
  CHECK_FALSE(f.accept("GET", "/api/v1/pods", ""));
  CHECK_FALSE(f.accept("POST", "/api/v1/namespaces/default/pods/p/exec", "localhost"));
  CHECK_FALSE(f.accept("GET", "/api/v1/namespaces/default/pods/p/attach?stdin=1", "localhost"));
  // port-forward is not blocked by kubectl's defaults.
  CHECK(f.accept("POST", "/api/v1/namespaces/default/pods/p/portforward", "localhost"));
}

TEST_CASE("custom patterns: reject-methods and accept-paths", "[filter]") {
  RequestFilter f({"^/api/v1/namespaces/default/"}, {}, {"^localhost$"}, {"POST", "PUT"});
  CHECK(f.accept("GET", "/api/v1/namespaces/default/pods", "localhost"));
  CHECK_FALSE(f.accept("GET", "/api/v1/namespaces/kube-system/pods", "localhost"));
  CHECK_FALSE(f.accept("POST", "/api/v1/namespaces/default/pods", "localhost"));
  CHECK_FALSE(f.accept("PUT", "/api/v1/namespaces/default/pods", "localhost"));
}

TEST_CASE("host port stripping", "[filter]") {
  CHECK(RequestFilter::strip_port("localhost:8001") == "localhost");
  CHECK(RequestFilter::strip_port("[::1]:8001") == "[::1]");
  CHECK(RequestFilter::strip_port("[::1]") == "[::1]");
  CHECK(RequestFilter::strip_port("localhost") == "localhost");
}

TEST_CASE("fast pattern matching agrees with std::regex", "[filter]") {
  const char* patterns[] = {"^.*", "^/api/.*/pods/.*/exec", "^localhost$", "^127\\.0\\.0\\.1$",
                            "^\\[::1\\]$", "^$", "POST", "exec$", "^/api", "a.*b.*c",
                            "^/x(y|z)", "[0-9]+"};
  const char* texts[] = {"", "/api/v1/namespaces/d/pods/p/exec", "/api/v1/pods", "localhost",
                         "localhost.evil", "127.0.0.1", "127x0x0x1", "[::1]", "POST", "XPOSTY",
                         "abc", "acb", "/xy", "/x", "v1"};
  for (const char* p : patterns) {
    RequestFilter f({p}, {}, {"^.*"}, {});
    std::regex re(p);
    for (const char* t : texts) {
      INFO(p << " on " << t);
      CHECK(f.accept("GET", t, "h") == std::regex_search(t, re));
    }
  }
}
