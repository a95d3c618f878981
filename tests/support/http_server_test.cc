#include "tests/support/http_server.h"

#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

using namespace konn::testsupport;

namespace {

std::string fetch_all(uint16_t port, const std::string& request) {
  asio::io_context ctx;
  asio::ip::tcp::socket s(ctx);
  s.connect({asio::ip::address_v4::loopback(), port});
  asio::write(s, asio::buffer(request));
  std::string out;
  std::error_code ec;
  asio::read(s, asio::dynamic_buffer(out), ec);
  return out;
}

}  // namespace

TEST_CASE("http server: pages, /bytes/N and 404", "[support]") {
  HttpServer http;
  http.add_page("/hello", "hello world\n");

  std::string page =
      fetch_all(http.port(), "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(page.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(page.find("Content-Length: 12\r\n") != std::string::npos);
  CHECK(page.substr(page.size() - 12) == "hello world\n");

  const size_t n = 1000000;
  std::string bytes = fetch_all(http.port(), "GET /bytes/1000000 HTTP/1.0\r\n\r\n");
  auto body_at = bytes.find("\r\n\r\n");
  REQUIRE(body_at != std::string::npos);
  CHECK(bytes.substr(body_at + 4) == HttpServer::pattern(0, n));

  std::string missing = fetch_all(http.port(), "GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n");
  CHECK(missing.rfind("HTTP/1.1 404", 0) == 0);
  CHECK(http.requests() == 3);
}

TEST_CASE("http server: keep-alive serves requests in order", "[support]") {
  HttpServer http;
  http.add_page("/a", "A");
  http.add_page("/b", "BB");
  std::string out =
      fetch_all(http.port(), "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\nConnection: close\r\n\r\n");
  auto a = out.find("\r\n\r\nA");
  auto b = out.find("\r\n\r\nBB");
  CHECK(a != std::string::npos);
  CHECK(b != std::string::npos);
  CHECK(a < b);
}

TEST_CASE("http server: pattern slices agree", "[support]") {
  std::string whole = HttpServer::pattern(0, 1000);
  CHECK(HttpServer::pattern(300, 200) == whole.substr(300, 200));
  CHECK(static_cast<unsigned char>(whole[251]) == 0);
  CHECK(static_cast<unsigned char>(whole[250]) == 250);
}

TEST_CASE("http server: a request body is skipped and the next request on the connection served",
          "[support]") {
  HttpServer http;
  http.add_page("/a", "A");
  std::string out = fetch_all(http.port(),
                              // The 12-byte body looks like the start of a request line.
                              "POST /a HTTP/1.1\r\nContent-Length: 12\r\n\r\nGET /b HTTP/"
                              "GET /a HTTP/1.1\r\nConnection: close\r\n\r\n");
  CHECK(out.rfind("HTTP/1.1 405", 0) == 0);
  CHECK(out.find("\r\n\r\nA") != std::string::npos);
  CHECK(http.requests() == 2);
}
