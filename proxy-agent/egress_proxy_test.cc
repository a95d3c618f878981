#include "proxy-agent/egress_proxy.h"

#include <catch2/catch.hpp>

using konn::agent::EgressProxyConfig;
using konn::agent::NoProxyList;
using konn::agent::parse_proxy_url;
using konn::agent::ProxyEnvironment;

namespace {

std::string parse_error(const std::string& url) {
  std::string error;
  auto p = parse_proxy_url(url, &error);
  return p ? std::string("(accepted)") : error;
}

}  // namespace

TEST_CASE("parse_proxy_url: host, port, credentials", "[agent][egress-proxy]") {
  std::string error;
  auto p = parse_proxy_url("http://proxy.corp:3128", &error);
  REQUIRE(p);
  CHECK(p->host == "proxy.corp");
  CHECK(p->port == 3128);
  CHECK_FALSE(p->has_credentials);
  CHECK(p->authorization().empty());
  CHECK(p->address() == "proxy.corp:3128");

  SECTION("no port: 80, as Go's net/http") {
    auto q = parse_proxy_url("http://proxy.corp", &error);
    REQUIRE(q);
    CHECK(q->port == 80);
    auto r = parse_proxy_url("http://proxy.corp:/", &error);
    REQUIRE(r);
    CHECK(r->port == 80);
  }
  SECTION("no scheme: http://, as Go does for the environment") {
    auto q = parse_proxy_url("10.0.0.1:3128", &error);
    REQUIRE(q);
    CHECK(q->host == "10.0.0.1");
    CHECK(q->port == 3128);
  }
  SECTION("IPv6 in brackets") {
    auto q = parse_proxy_url("HTTP://[fd00::1]:8080/", &error);
    REQUIRE(q);
    CHECK(q->host == "fd00::1");
    CHECK(q->address() == "[fd00::1]:8080");
  }
  SECTION("userinfo is split at the last @ and percent-decoded; the password is never shown") {
    auto q = parse_proxy_url("http://us%65r:p%40ss:w@rd@proxy:3128", &error);
    REQUIRE(q);
    CHECK(q->has_credentials);
    CHECK(q->username == "user");
    CHECK(q->password == "p@ss:w@rd");
    CHECK(q->host == "proxy");
    CHECK(q->redacted() == "http://user@proxy:3128");
    // base64("user:p@ss:w@rd")
    CHECK(q->authorization() == "Basic dXNlcjpwQHNzOndAcmQ=");
  }
  SECTION("a user without a password sends user:") {
    auto q = parse_proxy_url("http://alice@proxy:3128", &error);
    REQUIRE(q);
    CHECK(q->authorization() == "Basic YWxpY2U6");  // base64("alice:")
  }
}

TEST_CASE("parse_proxy_url refuses what it cannot use, saying why", "[agent][egress-proxy]") {
  CHECK(parse_error("https://proxy:3128").find("only http://") != std::string::npos);
  CHECK(parse_error("socks5://proxy:1080").find("\"socks5\"") != std::string::npos);
  CHECK(parse_error("").find("empty") != std::string::npos);
  CHECK(parse_error("http://:3128").find("no host") != std::string::npos);
  CHECK(parse_error("http://proxy:0").find("must be between 1 and 65535") != std::string::npos);
  CHECK(parse_error("http://proxy:65536").find("must be between 1 and 65535") != std::string::npos);
  CHECK(parse_error("http://proxy:http").find("must be between 1 and 65535") != std::string::npos);
  CHECK(parse_error("http://fd00::1:3128").find("brackets") != std::string::npos);
  CHECK(parse_error("http://[proxy]:3128").find("IPv6") != std::string::npos);
  CHECK(parse_error("http://u:p%zz@proxy:3128").find("percent") != std::string::npos);
  CHECK(parse_error("http://u:p%4@proxy:3128").find("percent") != std::string::npos);
  CHECK(parse_error("http://proxy:3128/path").find("no path") != std::string::npos);
  CHECK(parse_error("http://proxy:3128?x=1").find("no path") != std::string::npos);
}

TEST_CASE("NoProxyList matches as golang.org/x/net/http/httpproxy", "[agent][egress-proxy]") {
  SECTION("domains: the host and its subdomains; a leading dot or *. only subdomains") {
    NoProxyList l("example.com, .corp.net,*.svc.local");
    CHECK(l.matches("example.com", 443));
    CHECK(l.matches("EXAMPLE.com", 443));
    CHECK(l.matches("api.example.com", 443));
    CHECK_FALSE(l.matches("notexample.com", 443));
    CHECK_FALSE(l.matches("corp.net", 443));
    CHECK(l.matches("a.corp.net", 443));
    CHECK_FALSE(l.matches("svc.local", 443));
    CHECK(l.matches("konn.svc.local", 443));
    CHECK_FALSE(l.matches("example.org", 443));
  }
  SECTION("a port restricts an entry") {
    NoProxyList l("example.com:8091,10.0.0.1:443,[fd00::1]:8091");
    CHECK(l.matches("example.com", 8091));
    CHECK_FALSE(l.matches("example.com", 443));
    CHECK(l.matches("10.0.0.1", 443));
    CHECK_FALSE(l.matches("10.0.0.1", 8091));
    CHECK(l.matches("fd00::1", 8091));
    CHECK_FALSE(l.matches("fd00::1", 443));
  }
  SECTION("addresses and CIDRs") {
    NoProxyList l("10.0.0.0/8, 192.168.1.7, fd00::/8, ::ffff:172.16.0.0/108");
    CHECK(l.matches("10.1.2.3", 8091));
    CHECK(l.matches("::ffff:10.1.2.3", 8091));  // IPv4-mapped is IPv4
    CHECK_FALSE(l.matches("11.1.2.3", 8091));
    CHECK(l.matches("192.168.1.7", 1));
    CHECK_FALSE(l.matches("192.168.1.8", 1));
    CHECK(l.matches("fd12::5", 8091));
    CHECK_FALSE(l.matches("fe80::1", 8091));
    CHECK(l.matches("172.16.3.4", 8091));
    CHECK_FALSE(l.matches("172.32.3.4", 8091));
    // A CIDR never matches a name, even one that resolves inside it.
    CHECK_FALSE(l.matches("ten.example", 8091));
  }
  SECTION("* matches everything; empty entries and :port alone are ignored") {
    CHECK(NoProxyList("foo, *").matches("anything", 1));
    NoProxyList l(" , :443,,");
    CHECK_FALSE(l.matches("anything", 443));
    CHECK_FALSE(NoProxyList("").matches("anything", 443));
  }
  SECTION("domain entries compare as strings, also against addresses") {
    // Go keeps "0.0.1" as a domain entry (".0.0.1"), which is a suffix of "10.0.0.1".
    CHECK(NoProxyList("0.0.1").matches("10.0.0.1", 443));
  }
}

TEST_CASE("EgressProxyConfig: the flag wins, else HTTPS_PROXY with NO_PROXY",
          "[agent][egress-proxy]") {
  std::string error;
  SECTION("no flag, no environment: direct") {
    auto c = EgressProxyConfig::resolve("", {}, &error);
    REQUIRE(c);
    CHECK_FALSE(c->proxy_for("server.example", 8091));
    CHECK(c->describe() == "none");
  }
  SECTION("--proxy-url takes every server, loopback and NO_PROXY-listed ones too") {
    ProxyEnvironment env{"http://other:1", "HTTPS_PROXY", "*"};
    auto c = EgressProxyConfig::resolve("http://u:secret@proxy:3128", env, &error);
    REQUIRE(c);
    for (const char* host : {"server.example", "127.0.0.1", "localhost", "::1"}) {
      auto p = c->proxy_for(host, 8091);
      REQUIRE(p);
      CHECK(p->address() == "proxy:3128");
      CHECK(p->source == "--proxy-url");
    }
    CHECK(c->describe().find("secret") == std::string::npos);
  }
  SECTION("HTTPS_PROXY, except NO_PROXY, localhost and loopback") {
    ProxyEnvironment env{"proxy.corp:3128", "https_proxy", "internal.corp,10.0.0.0/8"};
    auto c = EgressProxyConfig::resolve("", env, &error);
    REQUIRE(c);
    auto p = c->proxy_for("konn.example.com", 8091);
    REQUIRE(p);
    CHECK(p->source == "https_proxy");
    CHECK(p->address() == "proxy.corp:3128");
    CHECK_FALSE(c->proxy_for("konn.internal.corp", 8091));
    CHECK_FALSE(c->proxy_for("10.2.3.4", 8091));
    CHECK_FALSE(c->proxy_for("localhost", 8091));
    CHECK_FALSE(c->proxy_for("127.0.0.2", 8091));
    CHECK_FALSE(c->proxy_for("::1", 8091));
    CHECK(c->proxy_for("localhost.example", 8091));  // only the name localhost itself
  }
  SECTION("a bad URL names its source") {
    CHECK_FALSE(EgressProxyConfig::resolve("https://proxy:3128", {}, &error));
    CHECK(error.rfind("--proxy-url: ", 0) == 0);
    ProxyEnvironment env{"socks5://proxy:1080", "HTTPS_PROXY", ""};
    CHECK_FALSE(EgressProxyConfig::resolve("", env, &error));
    CHECK(error.rfind("$HTTPS_PROXY: ", 0) == 0);
  }
}

TEST_CASE("ProxyFailure classifies a proxy's answer, absence and silence in plain words",
          "[agent][egress-proxy]") {
  using konn::agent::ProxyFailure;
  std::string error;
  auto with = *parse_proxy_url("http://u:p@proxy:3128", &error);
  auto without = *parse_proxy_url("http://proxy:3128", &error);
  CHECK(ProxyFailure::for_status(with, 407).reason == ProxyFailure::Auth);
  CHECK(ProxyFailure::for_status(with, 407).text ==
        "the proxy refused the user and password (407 Proxy Authentication Required)");
  CHECK(ProxyFailure::for_status(without, 407).text ==
        "the proxy requires a user and password (407 Proxy Authentication Required)");
  CHECK(ProxyFailure::for_status(with, 401).reason == ProxyFailure::Auth);
  CHECK(ProxyFailure::for_status(with, 401).text ==
        "the proxy refused the user and password (HTTP 401 Unauthorized)");
  for (int code : {502, 503, 504}) {
    CHECK(ProxyFailure::for_status(with, code).reason == ProxyFailure::ServerUnreachable);
  }
  CHECK(ProxyFailure::for_status(with, 503).text ==
        "the proxy could not reach the proxy-server (HTTP 503)");
  for (int code : {400, 403, 405, 500, 302}) {
    CHECK(ProxyFailure::for_status(with, code).reason == ProxyFailure::Refused);
  }
  CHECK(ProxyFailure::for_status(with, 403).text == "the proxy refused the CONNECT (HTTP 403)");
  CHECK(ProxyFailure::unreachable(false).reason == ProxyFailure::ProxyUnreachable);
  CHECK(ProxyFailure::unreachable(false).text == "the proxy is unreachable");
  CHECK(ProxyFailure::unreachable(true).text == "the proxy's name does not resolve");
  CHECK(ProxyFailure::timed_out("300ms").reason == ProxyFailure::Timeout);
  CHECK(ProxyFailure::timed_out("300ms").text ==
        "no tunnel within --server-connect-timeout (300ms): the proxy did not answer the "
        "CONNECT, or the server did not finish TLS");
}
