#include "core/admin/admin_server.h"

#include <system_error>

#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

using konn::core::admin::AdminServer;
using konn::core::admin::Check;
using konn::core::admin::Response;

namespace {

std::string get(uint16_t port, const std::string& request) {
  asio::io_context ctx;
  asio::ip::tcp::socket s(ctx);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  asio::write(s, asio::buffer(request));
  std::string out;
  std::error_code ec;
  char buf[4096];
  for (;;) {
    size_t n = s.read_some(asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
  }
  return out;
}

}  // namespace

TEST_CASE("admin server answers health, readiness and 404 over real HTTP", "[admin]") {
  bool ready = false;
  AdminServer server("health", "127.0.0.1", 0);
  server.route("/healthz", [](const std::string&) { return Response{200, "text/plain", "ok", {}}; });
  server.route("/readyz", [&](const std::string& q) {
    std::vector<Check> checks{
        {"ping", [] { return std::optional<std::string>(); }},
        {"backends", [&]() -> std::optional<std::string> {
           if (ready) return std::nullopt;
           return "no connection to any proxy agent";
         }}};
    return konn::core::admin::readiness(checks, q.find("verbose") != std::string::npos);
  });
  server.start();
  auto port = server.port();
  auto close = "Connection: close\r\n\r\n";

  auto h = get(port, std::string("GET /healthz HTTP/1.1\r\nHost: x\r\n") + close);
  CHECK(h.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(h.substr(h.size() - 2) == "ok");

  auto r = get(port, std::string("GET /readyz HTTP/1.1\r\nHost: x\r\n") + close);
  CHECK(r.rfind("HTTP/1.1 503 ", 0) == 0);
  CHECK(r.find("[-]backends failed: no connection to any proxy agent") != std::string::npos);
  CHECK(r.find("[+]ping ok") != std::string::npos);

  ready = true;
  auto ok = get(port, std::string("GET /readyz HTTP/1.1\r\nHost: x\r\n") + close);
  CHECK(ok.rfind("HTTP/1.1 200 OK", 0) == 0);
  auto verbose = get(port, std::string("GET /readyz?verbose HTTP/1.1\r\nHost: x\r\n") + close);
  CHECK(verbose.find("readyz check passed") != std::string::npos);

  auto missing = get(port, std::string("GET /nope HTTP/1.1\r\nHost: x\r\n") + close);
  CHECK(missing.rfind("HTTP/1.1 404 ", 0) == 0);
  auto post = get(port, std::string("POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n") +
                            close);
  CHECK(post.rfind("HTTP/1.1 405 ", 0) == 0);
  auto garbage = get(port, "\x16\x03\x01 not http\r\n\r\n");
  CHECK(garbage.rfind("HTTP/1.1 400 ", 0) == 0);
  server.stop();
}

TEST_CASE("a taken default port is skipped with a warning, a taken given port still throws",
          "[admin]") {
  using konn::core::admin::AdminServer;
  AdminServer first("health", "127.0.0.1", 0);
  first.start();
  AdminServer by_default("health", "127.0.0.1", first.port());
  CHECK_FALSE(by_default.start_unless_default_taken(false));
  AdminServer given("health", "127.0.0.1", first.port());
  CHECK_THROWS_AS(given.start_unless_default_taken(true), std::system_error);
  AdminServer free_port("health", "127.0.0.1", 0);
  CHECK(free_port.start_unless_default_taken(false));
  CHECK(free_port.port() != 0);
  free_port.stop();
  first.stop();
}
