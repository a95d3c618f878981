#include "test-client/test_client_options.h"

#include <catch2/catch.hpp>

#include "core/config/flag_parser.h"

using konn::core::config::FlagParser;
using konn::testclient::TestClientOptions;

namespace {

std::vector<std::string> parse(TestClientOptions& o, std::vector<const char*> args) {
  FlagParser flags("proxy-test-client", "test");
  o.register_flags(flags);
  args.insert(args.begin(), "proxy-test-client");
  auto r = flags.parse(static_cast<int>(args.size()), args.data());
  auto errors = r.errors;
  for (auto& e : o.validate()) errors.push_back(e);
  return errors;
}

bool mentions(const std::vector<std::string>& errors, const std::string& text) {
  for (const auto& e : errors) {
    if (e.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("options: defaults and a unix-socket fetch", "[testclient]") {
  TestClientOptions o;
  auto errors = parse(o, {"--proxy-uds=/tmp/x.sock", "--request-host=10.0.0.1",
                          "--request-port=10250", "--request-path=/healthz"});
  CHECK(errors.empty());
  CHECK(o.proxy_uds == "/tmp/x.sock");
  CHECK(o.request_address() == "10.0.0.1:10250");
  CHECK(o.request_path == "/healthz");
  CHECK_FALSE(o.pipe);
}

TEST_CASE("options: every problem is reported with its flag", "[testclient]") {
  TestClientOptions o;
  auto errors = parse(o, {"--request-port=0", "--proxy-port=99999", "--client-cert=a.crt", "--pipe",
                          "--request-path=/x", "--dial-timeout=soon"});
  CHECK(mentions(errors, "--request-port"));
  CHECK(mentions(errors, "--proxy-port"));
  CHECK(mentions(errors, "--client-cert/--client-key"));
  CHECK(mentions(errors, "--pipe"));
  CHECK(mentions(errors, "--dial-timeout"));
}

TEST_CASE("options: IPv6 destination is bracketed", "[testclient]") {
  TestClientOptions o;
  CHECK(parse(o, {"--proxy-uds=s", "--request-host=::1", "--request-port=80", "--pipe"}).empty());
  CHECK(o.request_address() == "[::1]:80");
}

TEST_CASE("options: unknown flag is an error", "[testclient]") {
  TestClientOptions o;
  CHECK(mentions(parse(o, {"--no-such-flag=1"}), "no-such-flag"));
}

TEST_CASE("options: --mode is grpc by default, http-connect on request, nothing else", "[testclient]") {
  TestClientOptions def;
  CHECK(parse(def, {"--proxy-uds=/tmp/x.sock"}).empty());
  CHECK(def.mode == "grpc");
  CHECK_FALSE(def.http_connect());

  TestClientOptions hc;
  CHECK(parse(hc, {"--mode=http-connect", "--proxy-host=127.0.0.1", "--proxy-port=8131",
                   "--client-cert=c.crt", "--client-key=c.key", "--pipe"})
            .empty());
  CHECK(hc.http_connect());

  TestClientOptions bad;
  auto errors = parse(bad, {"--proxy-uds=/tmp/x.sock", "--mode=socks5"});
  CHECK(mentions(errors, "--mode"));
  CHECK(mentions(errors, "socks5"));
}
