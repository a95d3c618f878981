#include "test-client/connect_stream.h"

#include <thread>

#include <catch2/catch.hpp>

#include "test-client/fake_connect_server.h"
#include "test-client/http_get.h"
#include "tests/support/sanitizers.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

using namespace konn::testclient;
using namespace std::chrono_literals;
using konn::testsupport::kSlowFactor;
using konn::testsupport::TempDir;

namespace {

struct ConnectFixture {
  explicit ConnectFixture(bool tls = false) {
    if (tls) {
      const auto& c = konn::testsupport::test_certs();
      FakeConnectServer::Tls t{c.server_crt, c.server_key, c.ca_crt};
      fake = std::make_unique<FakeConnectServer>(sock, &t);
    } else {
      fake = std::make_unique<FakeConnectServer>(sock);
    }
  }
  ChannelConfig unix_frontend() const { return ChannelConfig{sock, "", 0, "", "", ""}; }
  ChannelConfig tls_frontend() const {
    const auto& c = konn::testsupport::test_certs();
    return ChannelConfig{"", "127.0.0.1", fake->tls_port(), c.ca_crt, c.client_crt, c.client_key};
  }
  TempDir dir{"konn-tc"};
  std::string sock = dir.file("connect.sock");
  std::unique_ptr<FakeConnectServer> fake;
};

// Everything until `n` bytes arrived or the stream ended.
std::string read_up_to(ByteStream& s, size_t n) {
  std::string got;
  while (got.size() < n) {
    std::string chunk;
    if (s.read_for(&chunk, 5s * kSlowFactor) != ByteStream::ReadStatus::Data) break;
    got += chunk;
  }
  return got;
}

std::string read_to_end(ByteStream& s) {
  std::string got;
  while (auto chunk = s.read()) got += *chunk;
  return got;
}

}  // namespace

TEST_CASE("connect stream: CONNECT with Host, 200, then the bytes go both ways", "[testclient]") {
  ConnectFixture f;
  auto d = ConnectStream::dial(f.unix_frontend(), "echo:80", 5s * kSlowFactor);
  REQUIRE(d.error.empty());
  REQUIRE(d.stream);
  CHECK(d.status == 200);
  CHECK_FALSE(d.stream->tls());
  auto reqs = f.fake->requests();
  REQUIRE(reqs.size() == 1);
  CHECK(reqs[0].method == "CONNECT");
  CHECK(reqs[0].target == "echo:80");
  CHECK(reqs[0].host == "echo:80");

  std::string data(300 * 1024, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + i / 13);
  std::thread writer([&] { CHECK(d.stream->write(data)); });
  std::string back = read_up_to(*d.stream, data.size());
  writer.join();
  CHECK((back == data));
  CHECK(d.stream->close(1s).empty());
  CHECK_FALSE(d.stream->write("late"));
}

TEST_CASE("connect stream: bytes right after the 200 head belong to the destination",
          "[testclient]") {
  ConnectFixture f;
  SECTION("in the same write as the head") {
    auto d = ConnectStream::dial(f.unix_frontend(), "early:80", 5s * kSlowFactor);
    REQUIRE(d.stream);
    CHECK(read_up_to(*d.stream, 5) == "early");
  }
  SECTION("a head split into single bytes") {
    auto d = ConnectStream::dial(f.unix_frontend(), "trickle:80", 5s * kSlowFactor);
    REQUIRE(d.stream);
    CHECK(read_up_to(*d.stream, 5) == "after");
  }
}

TEST_CASE("connect stream: a refused CONNECT fails with the status line and body", "[testclient]") {
  ConnectFixture f;
  auto d = ConnectStream::dial(f.unix_frontend(), "refuse:9", 5s * kSlowFactor);
  CHECK_FALSE(d.stream);
  CHECK(d.status == 502);
  CHECK(d.error == "HTTP/1.1 502 Bad Gateway: dial tcp 127.0.0.1:9: connect: connection refused");
}

TEST_CASE("connect stream: a reply that is not HTTP fails the dial", "[testclient]") {
  ConnectFixture f;
  auto d = ConnectStream::dial(f.unix_frontend(), "garbage:80", 5s * kSlowFactor);
  CHECK_FALSE(d.stream);
  CHECK(d.status == 0);
  CHECK(d.error.rfind("bad reply to CONNECT: ", 0) == 0);
}

TEST_CASE("connect stream: no reply within the dial timeout", "[testclient]") {
  ConnectFixture f;
  auto d = ConnectStream::dial(f.unix_frontend(), "silent:80", 300ms);
  CHECK_FALSE(d.stream);
  CHECK(d.error == "no reply to CONNECT within 300ms");
}

TEST_CASE("connect stream: nobody on the socket", "[testclient]") {
  TempDir dir{"konn-tc"};
  auto d = ConnectStream::dial(ChannelConfig{dir.file("none.sock"), "", 0, "", "", ""}, "echo:80",
                               5s * kSlowFactor);
  CHECK_FALSE(d.stream);
  CHECK(d.error.rfind("connect unix " + dir.file("none.sock") + ": ", 0) == 0);
}

TEST_CASE("connect stream: close_write half-closes the unix socket and reading goes on",
          "[testclient]") {
  ConnectFixture f;
  auto d = ConnectStream::dial(f.unix_frontend(), "sink:80", 5s * kSlowFactor);
  REQUIRE(d.stream);
  std::string data(100000, 'x');
  REQUIRE(d.stream->write(data));
  CHECK(d.stream->close_write());
  CHECK_FALSE(d.stream->write("after the half-close"));
  // The fake answers only after it saw our EOF, so this proves the half-close arrived.
  CHECK(read_to_end(*d.stream) == "100000");
  CHECK(d.stream->ended());
  CHECK(d.stream->end_reason().empty());
  CHECK(f.fake->half_closes() == 1);
}

TEST_CASE("connect stream: a slow reader gets every byte in order", "[testclient]") {
  ConnectFixture f;
  const size_t n = 3 * ConnectStream::kInboxLimit;
  auto d = ConnectStream::dial(f.unix_frontend(), "flood:" + std::to_string(n), 5s * kSlowFactor);
  REQUIRE(d.stream);
  std::this_thread::sleep_for(200ms);  // let the inbox fill up to its limit
  std::string got = read_to_end(*d.stream);
  REQUIRE(got.size() == n);
  bool in_order = true;
  for (size_t i = 0; i < n && in_order; ++i) in_order = got[i] == static_cast<char>(i % 251);
  CHECK(in_order);
  CHECK(d.stream->end_reason().empty());
}

TEST_CASE("connect stream: http_get runs over a CONNECT stream", "[testclient]") {
  ConnectFixture f;
  auto d = ConnectStream::dial(f.unix_frontend(), "http:80", 5s * kSlowFactor);
  REQUIRE(d.stream);
  auto r = http_get(*d.stream, "http:80", "/x", 5s * kSlowFactor);
  CHECK(r.error.empty());
  CHECK(r.code == 200);
  CHECK(r.body == "hello via connect");
}

TEST_CASE("connect stream: TCP with mutual TLS", "[testclient]") {
  ConnectFixture f(true);
  auto d = ConnectStream::dial(f.tls_frontend(), "echo:443", 5s * kSlowFactor);
  REQUIRE(d.error.empty());
  REQUIRE(d.stream);
  CHECK(d.stream->tls());
  REQUIRE(d.stream->write("over tls"));
  CHECK(read_up_to(*d.stream, 8) == "over tls");
  CHECK_FALSE(d.stream->close_write());  // TLS keeps the write side open
  REQUIRE(d.stream->write(" still"));
  CHECK(read_up_to(*d.stream, 6) == " still");
  CHECK(d.stream->close(1s).empty());
  CHECK(f.fake->half_closes() == 0);

  SECTION("a refusal arrives over TLS too") {
    auto r = ConnectStream::dial(f.tls_frontend(), "refuse:1", 5s * kSlowFactor);
    CHECK(r.error == "HTTP/1.1 502 Bad Gateway: dial tcp 127.0.0.1:1: connect: connection refused");
  }
  SECTION("a server certificate from another CA is rejected") {
    TempDir other{"konn-tc-ca"};
    auto certs = konn::testsupport::generate_certs(other.path());
    ChannelConfig fe = f.tls_frontend();
    fe.ca_cert = certs.ca_crt;
    auto r = ConnectStream::dial(fe, "echo:443", 5s * kSlowFactor);
    CHECK_FALSE(r.stream);
    CHECK(r.error.rfind("TLS handshake with 127.0.0.1:" + std::to_string(f.fake->tls_port()), 0) ==
          0);
  }
  SECTION("an unreadable certificate file is named") {
    ChannelConfig fe = f.tls_frontend();
    fe.client_cert = f.dir.file("missing.crt");
    auto r = ConnectStream::dial(fe, "echo:443", 5s * kSlowFactor);
    CHECK_FALSE(r.stream);
    CHECK(r.error == "cannot read --client-cert " + f.dir.file("missing.crt"));
  }
}
