#include "core/admin/status_page.h"

#include <asio/connect.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

using konn::core::admin::AdminServer;

namespace {

std::string fetch_status(uint16_t port, const std::string& target) {
  asio::io_context ctx;
  asio::ip::tcp::socket s(ctx);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  asio::write(s, asio::buffer("GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
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

TEST_CASE("status page: queries, loopback binds, and a body reused for a second", "[admin]") {
  using namespace konn::core::admin;
  auto q = parse_query("agents_offset=20&agents_limit=abc&x&tunnels=500");
  CHECK(query_int(q, "agents_offset", 0, 0, 1000) == 20);
  CHECK(query_int(q, "agents_limit", 100, 1, 1000) == 100);  // not a number: the default
  CHECK(query_int(q, "tunnels", 20, 0, 200) == 200);         // clamped
  CHECK(query_int(q, "missing", 7, 0, 10) == 7);
  CHECK(q.count("x") == 1);

  CHECK(is_loopback_bind("127.0.0.1"));
  CHECK(is_loopback_bind("127.3.0.1"));
  CHECK(is_loopback_bind("::1"));
  CHECK(is_loopback_bind("[::1]"));
  CHECK(is_loopback_bind("localhost"));
  CHECK_FALSE(is_loopback_bind(""));
  CHECK_FALSE(is_loopback_bind("0.0.0.0"));
  CHECK_FALSE(is_loopback_bind("10.1.2.3"));

  int builds = 0;
  AdminServer server("admin", "127.0.0.1", 0);
  route_status(server, "konn <test>", "127.0.0.1", false, "--x", [&](const std::string& query) {
    ++builds;
    return nlohmann::ordered_json{{"query", query}, {"evil", "</script><b>x</b>"}, {"n", builds}};
  });
  server.start();
  auto json = fetch_status(server.port(), "/status.json?a=1");
  CHECK(json.find("200 OK") != std::string::npos);
  CHECK(json.find("Content-Type: application/json") != std::string::npos);
  CHECK(json.find("\"query\": \"a=1\"") != std::string::npos);
  auto html = fetch_status(server.port(), "/status?a=1");
  CHECK(html.find("text/html") != std::string::npos);
  CHECK(html.find("<title>konn &lt;test&gt;</title>") != std::string::npos);
  // The data cannot end the script element it sits in.
  CHECK(html.find("</script><b>") == std::string::npos);
  CHECK(html.find("\\u003c/script>\\u003cb>") != std::string::npos);
  CHECK(builds == 1);  // the same query within a second: the same body
  fetch_status(server.port(), "/status.json?a=2");
  CHECK(builds == 2);
  server.stop();

  // Beyond loopback, without its flag: refused, saying which flag turns it on.
  AdminServer open("admin", "127.0.0.1", 0);
  route_status(open, "t", "0.0.0.0", false, "--status-page-off-loopback",
               [](const std::string&) { return nlohmann::ordered_json::object(); });
  open.start();
  auto refused = fetch_status(open.port(), "/status.json");
  CHECK(refused.find("403 Forbidden") != std::string::npos);
  CHECK(refused.find("--status-page-off-loopback") != std::string::npos);
  open.stop();
}
