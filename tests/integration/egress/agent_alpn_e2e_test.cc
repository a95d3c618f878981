// The agent's --alpn-proto: the ids a TLS listener sees offered by the built proxy-agent, and an
// agent offering extra ids still connects to a proxy-server (which picks h2).
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl.hpp>
#include <catch2/catch.hpp>
#include <openssl/ssl.h>

#include "core/tls/tls_context.h"
#include "tests/integration/tunnel/e2e_macros.h"
#include "tests/integration/tunnel/tunnel_stack.h"
#include "tests/support/process_runner.h"
#include "tests/support/test_certs.h"

using namespace std::chrono_literals;
using konn::testsupport::eventually;

namespace {

// A TLS listener on 127.0.0.1 (the test server certificate) that records the ALPN list of the
// first client hello it gets, picks h2, and closes each connection after its handshake.
class AlpnRecorder {
 public:
  AlpnRecorder() {
    const auto& certs = konn::testsupport::test_certs();
    konn::core::tls::ServerTlsConfig config;
    config.cert_file = certs.server_crt;
    config.key_file = certs.server_key;
    ctx_ = konn::core::tls::make_server_context(config);
    SSL_CTX_set_alpn_select_cb(ctx_->native_handle(), &AlpnRecorder::select, this);
    acceptor_.open(asio::ip::tcp::v4());
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    thread_ = std::thread([this] { serve(); });
  }
  ~AlpnRecorder() {
    stop_ = true;
    std::error_code ignored;
    // Wakes the blocking accept.
    asio::ip::tcp::socket poke(io_);
    poke.connect(acceptor_.local_endpoint(), ignored);
    thread_.join();
  }
  AlpnRecorder(const AlpnRecorder&) = delete;
  AlpnRecorder& operator=(const AlpnRecorder&) = delete;

  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  // The first client's ALPN ids, comma-separated ("" until a hello arrived).
  std::string offered() const {
    std::lock_guard lock(mu_);
    return offered_;
  }

 private:
  static int select(SSL* /*ssl*/, const unsigned char** out, unsigned char* outlen,
                    const unsigned char* in, unsigned int inlen, void* arg) {
    auto* self = static_cast<AlpnRecorder*>(arg);
    std::string list;
    for (unsigned int i = 0; i < inlen;) {
      const unsigned int n = in[i];
      if (!list.empty()) list += ',';
      list.append(reinterpret_cast<const char*>(in + i + 1), n);  // NOLINT
      i += 1 + n;
    }
    {
      std::lock_guard lock(self->mu_);
      if (self->offered_.empty()) self->offered_ = list.empty() ? "(none)" : list;
    }
    static const unsigned char kH2[] = {2, 'h', '2'};
    unsigned char* chosen = nullptr;
    if (SSL_select_next_proto(&chosen, outlen, kH2, sizeof(kH2), in, inlen) !=
        OPENSSL_NPN_NEGOTIATED) {
      return SSL_TLSEXT_ERR_ALERT_FATAL;
    }
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
  }

  void serve() {
    while (!stop_) {
      asio::ssl::stream<asio::ip::tcp::socket> tls(io_, *ctx_);
      std::error_code ec;
      acceptor_.accept(tls.next_layer(), ec);
      if (ec || stop_) return;
      tls.handshake(asio::ssl::stream_base::server, ec);
      tls.next_layer().close(ec);
    }
  }

  asio::io_context io_;
  std::shared_ptr<asio::ssl::context> ctx_;
  asio::ip::tcp::acceptor acceptor_{io_};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::string offered_;
};

// The ALPN list the built agent offers with `args`.
std::string offered_by_agent(const std::vector<std::string>& args) {
  const auto& certs = konn::testsupport::test_certs();
  AlpnRecorder recorder;
  konn::testsupport::ProcessOptions o;
  o.binary = "proxy-agent";
  o.args = {
      "--proxy-server-host=127.0.0.1",  "--proxy-server-port=" + std::to_string(recorder.port()),
      "--ca-cert=" + certs.ca_crt,      "--agent-cert=" + certs.agent_crt,
      "--agent-key=" + certs.agent_key, "--health-server-port=0",
      "--admin-server-port=0",          "--sync-interval=100ms",
      "--sync-interval-cap=1s"};
  o.args.insert(o.args.end(), args.begin(), args.end());
  konn::testsupport::Process agent(std::move(o));
  const bool seen = eventually([&] { return !recorder.offered().empty(); }, 20s);
  INFO(agent.log());
  REQUIRE(seen);
  return recorder.offered();
}

}  // namespace

TEST_CASE("agent --alpn-proto: the ids offered to the server, h2 added as gRPC-Go does",
          "[e2e][tls]") {
  KONN_REQUIRE_DAEMONS();
  CHECK(offered_by_agent({}) == "h2");
  CHECK(offered_by_agent({"--alpn-proto=konnectivity,x-test"}) == "konnectivity,x-test,h2");
  // h2 already in the list keeps its place and is not offered twice.
  CHECK(offered_by_agent({"--alpn-proto=h2,konnectivity"}) == "h2,konnectivity");
}

TEST_CASE("agent --alpn-proto: an agent offering extra ids connects to a proxy-server",
          "[e2e][tls]") {
  KONN_REQUIRE_DAEMONS();
  konn::e2e::AgentSpec agent;
  agent.extra_args = {"--alpn-proto=konnectivity"};
  // Throws unless the server logged the agent connected (its stream open, over h2).
  konn::e2e::TunnelStack stack({}, agent);
  CHECK(stack.agent->count_in_log("ALPN offered to the proxy-servers: konnectivity,h2") == 1);
}
