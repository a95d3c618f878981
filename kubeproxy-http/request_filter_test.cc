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
  // Values Go's net.SplitHostPort refuses are matched whole, as kubectl does.
  CHECK(RequestFilter::strip_port("[::1]x:80") == "[::1]x:80");
  CHECK(RequestFilter::strip_port("[::1]:80:81") == "[::1]:80:81");
  CHECK(RequestFilter::strip_port("localhost:1:2") == "localhost:1:2");
  CHECK(RequestFilter::strip_port("::1") == "::1");
  CHECK(RequestFilter::strip_port("local]host:80") == "local]host:80");
  CHECK(RequestFilter::strip_port(":8001").empty());
}

TEST_CASE("hosts: compared as sent, an IPv6 literal with or without brackets", "[filter]") {
  auto f = defaults();
  auto host_ok = [&](std::string_view header) {
    return f.accept("GET", "/api", RequestFilter::strip_port(header));
  };
  CHECK(host_ok("[::1]:8001"));  // kubectl: 403 (it matches "::1"); see README
  CHECK(host_ok("[::1]"));
  CHECK(host_ok("localhost:8001"));
  CHECK(host_ok("127.0.0.1:8001"));
  // No case folding, no trailing-dot removal, no decoding: only the exact forms pass.
  CHECK_FALSE(host_ok("LOCALHOST:8001"));
  CHECK_FALSE(host_ok("localhost.:8001"));
  CHECK_FALSE(host_ok("local%68ost:8001"));
  CHECK_FALSE(host_ok("::1"));
  CHECK_FALSE(host_ok("[::1]x:8001"));
  CHECK_FALSE(host_ok("[::2]:8001"));
  CHECK_FALSE(host_ok("localhost:1:2"));
  // A pattern written for kubectl's bare form keeps working.
  RequestFilter bare({"^.*"}, {}, {"^::1$"}, {});
  CHECK(bare.accept("GET", "/api", RequestFilter::strip_port("[::1]:8001")));
  CHECK(bare.accept("GET", "/api", RequestFilter::strip_port("[::1]")));
}

TEST_CASE("Host header characters Go accepts", "[filter]") {
  CHECK(RequestFilter::valid_host("localhost:8001"));
  CHECK(RequestFilter::valid_host("[fe80::1%25eth0]:80"));
  CHECK(RequestFilter::valid_host(""));
  CHECK_FALSE(RequestFilter::valid_host("local host"));
  CHECK_FALSE(RequestFilter::valid_host("evil.com/x"));
  CHECK_FALSE(RequestFilter::valid_host("a@b"));
  CHECK_FALSE(RequestFilter::valid_host(std::string_view("a\0b", 3)));
  CHECK_FALSE(RequestFilter::valid_host("caf\xc3\xa9"));
}

TEST_CASE("percent-decoding helpers", "[filter]") {
  CHECK(RequestFilter::valid_escapes("/api/v1/%65xec%2F%2f"));
  CHECK(RequestFilter::valid_escapes("/plain"));
  CHECK_FALSE(RequestFilter::valid_escapes("/x/%zz"));
  CHECK_FALSE(RequestFilter::valid_escapes("/x/%6"));
  CHECK_FALSE(RequestFilter::valid_escapes("/x/%"));
  CHECK_FALSE(RequestFilter::valid_escapes("/x/%g0"));
  CHECK(RequestFilter::percent_decode("/x/%65%78%65%63") == "/x/exec");
  CHECK(RequestFilter::percent_decode("/x/%45%58ec") == "/x/EXec");
  CHECK(RequestFilter::percent_decode("/a%2Fb%2fc") == "/a/b/c");
  CHECK(RequestFilter::percent_decode("/%2565xec") == "/%65xec");
  CHECK(RequestFilter::percent_decode("/100%") == "/100%");  // not an escape: kept
  CHECK(RequestFilter::percent_decode("/a%00b") == std::string("/a\0b", 4));
  CHECK(RequestFilter::percent_decode("/a+b") == "/a+b");  // '+' is not a space in a path
  CHECK(RequestFilter::has_escape("/%2565"));
  CHECK(RequestFilter::has_escape("/%65"));
  CHECK_FALSE(RequestFilter::has_escape("/100%"));
  CHECK_FALSE(RequestFilter::has_escape("/%6"));
}

TEST_CASE("path cleaning follows Go's ServeMux cleanPath", "[filter]") {
  const std::pair<const char*, const char*> cases[] = {
      {"", "/"},
      {"/", "/"},
      {"//", "/"},
      {"/api", "/api"},
      {"/api/", "/api/"},
      {"//api//v1", "/api/v1"},
      {"/a/./b", "/a/b"},
      {"/a/b/..", "/a"},
      {"/a/b/../", "/a/"},
      {"/a/b/.", "/a/b"},
      {"/../a", "/a"},
      {"/a/../../b", "/b"},
      {"/a/..", "/"},
      {"/..", "/"},
      {"/.", "/"},
      {"/a/...", "/a/..."},
      {"/a/.b/..c", "/a/.b/..c"},
      {"/pods/y/../x/exec", "/pods/x/exec"},
      {"api", "/api"},
  };
  for (auto [in, want] : cases) {
    INFO(in);
    CHECK(RequestFilter::clean_path(in) == want);
    CHECK(RequestFilter::is_clean(in) == (std::string(in) == want));
  }
}

// Every form of the issue 23 report, and the neighbours of each: the default filter must refuse
// them all, for exec and attach alike.
TEST_CASE("default filter refuses every encoded or unclean form of exec and attach", "[filter]") {
  auto f = defaults();
  const char* forms[] = {
      "/api/v1/namespaces/default/pods/x/SUB",
      "/api/v1/namespaces/default/pods/x/%SUB1",  // first letter encoded
      "/api/v1/namespaces/default/pods/x/%SUBALL",
      "/api/v1/namespaces/default/pods/x%2FSUB",
      "/api/v1/namespaces/default/pods/x%2fSUB",
      "/api/v1/namespaces/default/pods%2Fx%2FSUB",
      "/api/v1/namespaces/default%2Fpods%2Fx%2FSUB",
      "/%61pi/v1/namespaces/default/pods/x/SUB",
      "/%61%70%69/v1/namespaces/default/pods/x/SUB",
      "/api/v1/namespaces/default/%70ods/x/SUB",
      "/api/v1/namespaces/default/%70%6F%64%73/x/SUB",  // upper-case hex digits
      "/api/v1/namespaces/default/%70%6f%64%73/x/SUB",  // lower-case hex digits
      "/api/v1/namespaces/default/pods/x/%25SUB1",      // double-encoded
      "/api/v1/namespaces/default/pods/x/%2525SUB1",    // triple-encoded
      "/api/v1/namespaces/default/pods/x%252FSUB",
      "/api/v1/namespaces/default/pods/x/SUB/",
      "/api/v1/namespaces/default/pods/x/SUB;a=b",
      "/api/v1/namespaces/default/pods/x;a=b/SUB",
      "/api/v1/namespaces/default/pods/x/SUB#frag",
      "/api/v1/namespaces/default/pods/x/SUB%3Fa=b",
      "/api/v1/namespaces/default/pods/x/SUB%23frag",
      "/api/v1/namespaces/default/pods/y/%2E%2E/x/SUB",
      "/api/v1/namespaces/default/pods/y%2F..%2Fx%2FSUB",
      "//api/v1/namespaces/default/pods/x/SUB",
      "/api/v1/namespaces/default/pods/./x/SUB",
      "/api/v1/namespaces/default/pods/y/../x/SUB",
  };
  for (std::string sub : {"exec", "attach"}) {
    std::string enc_all, enc1 = "%" + std::string(sub == "exec" ? "65" : "61") + sub.substr(1);
    for (char c : sub) {
      static const char* hex = "0123456789ABCDEF";
      enc_all += '%';
      enc_all += hex[static_cast<unsigned char>(c) >> 4];
      enc_all += hex[c & 15];
    }
    for (std::string form : forms) {
      auto put = [&](const std::string& key, const std::string& value) {
        if (auto at = form.find(key); at != std::string::npos) form.replace(at, key.size(), value);
      };
      put("%25SUB1", "%25" + enc1.substr(1));
      put("%2525SUB1", "%2525" + enc1.substr(1));
      put("%SUBALL", enc_all);
      put("%SUB1", enc1);
      put("SUB", sub);
      for (const char* method : {"GET", "POST"}) {
        INFO(method << " " << form);
        CHECK_FALSE(f.accept(method, form, "localhost"));
      }
    }
  }
  // Neighbours that name other resources stay allowed.
  CHECK(f.accept("GET", "/api/v1/namespaces/default/pods/x/log", "localhost"));
  CHECK(f.accept("GET", "/api/v1/namespaces/default/%70ods", "localhost"));
  CHECK(f.accept("GET", "/api/v1/namespaces/default/pods/x/ex%20ec", "localhost"));
  CHECK(f.accept("GET", "/api/v1/namespaces/default/pods/x/portforward", "localhost"));
  CHECK(f.accept("GET", "/api/v1/namespaces/default/services/s/proxy/100%", "localhost"));
}

TEST_CASE("anchored patterns hold for every reading of the path", "[filter]") {
  RequestFilter f({"^/api/v1/namespaces/default/"}, {"^/api/v1/namespaces/default/secrets$"},
                  {"^localhost$"}, {});
  CHECK(f.accept("GET", "/api/v1/namespaces/default/pods", "localhost"));
  CHECK_FALSE(f.accept("GET", "/api/v1/namespaces/default/secrets", "localhost"));
  // kube-apiserver routes a trailing slash to the same resource: kubectl lets it through.
  CHECK_FALSE(f.accept("GET", "/api/v1/namespaces/default/secrets/", "localhost"));
  CHECK_FALSE(f.accept("GET", "/api/v1/namespaces/default/secrets//", "localhost"));
  CHECK_FALSE(f.accept("GET", "/api/v1/namespaces/default/secret%73", "localhost"));
  CHECK_FALSE(f.accept("GET", "/api/v1/namespaces/default/secret%2573", "localhost"));
  CHECK_FALSE(f.accept("GET", "/api/v1/namespaces/default/x%2F..%2Fsecrets", "localhost"));
  // Outside the accepted namespace in some reading: refused.
  CHECK_FALSE(
      f.accept("GET", "/api/v1/namespaces/default%2F..%2Fkube-system/secrets", "localhost"));
  CHECK_FALSE(
      f.accept("GET", "/api/v1/namespaces/default/..%2Fkube-system%2Fsecrets", "localhost"));
  CHECK_FALSE(
      f.accept("GET", "/api/v1/namespaces/default/%252E%252E/kube-system/secrets", "localhost"));
  // The namespace object itself is reached by ".../default/" and ".../default" alike: the
  // slashless reading does not match this accept pattern.
  CHECK_FALSE(f.accept("GET", "/api/v1/namespaces/default/", "localhost"));
  // A path still escaped after three decodings is refused outright.
  CHECK(f.accept("GET", "/api/v1/namespaces/default/pods/a%252525", "localhost"));
  CHECK_FALSE(f.accept("GET", "/api/v1/namespaces/default/pods/a%25252541", "localhost"));
}

TEST_CASE("fast pattern matching agrees with std::regex", "[filter]") {
  const char* patterns[] = {"^.*",         "^/api/.*/pods/.*/exec",
                            "^localhost$", "^127\\.0\\.0\\.1$",
                            "^\\[::1\\]$", "^$",
                            "POST",        "exec$",
                            "^/api",       "a.*b.*c",
                            "^/x(y|z)",    "[0-9]+"};
  const char* texts[] = {"",
                         "/api/v1/namespaces/d/pods/p/exec",
                         "/api/v1/pods",
                         "localhost",
                         "localhost.evil",
                         "127.0.0.1",
                         "127x0x0x1",
                         "[::1]",
                         "POST",
                         "XPOSTY",
                         "abc",
                         "acb",
                         "/xy",
                         "/x",
                         "v1"};
  for (const char* p : patterns) {
    // As a reject-methods pattern: methods are matched as sent, with no other reading.
    RequestFilter f({"^.*"}, {}, {"^.*"}, {p});
    std::regex re(p);
    for (const char* t : texts) {
      INFO(p << " on " << t);
      CHECK(f.accept(t, "/", "h") == !std::regex_search(t, re));
    }
  }
}
