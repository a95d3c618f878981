#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl/context.hpp>

namespace konn::e2e {

// A TLS apiserver stand-in answering authentication.k8s.io/v1 TokenReviews, for the agent
// authentication tests. Each token maps to a behaviour; the server checks its own caller's bearer
// token (the proxy-server's kubeconfig credential) and counts reviews.
class FakeApiserver {
 public:
  enum class Answer {
    Authenticated,  // authenticated as `username`
    Unauthenticated,
    ServerError,  // HTTP 500
    Slow,         // answers only after `slow_delay`
  };
  struct TokenRule {
    Answer answer = Answer::Unauthenticated;
    std::string username;
  };

  FakeApiserver(const std::string& cert_file, const std::string& key_file,
                std::string caller_token);
  ~FakeApiserver();

  void set_token(const std::string& token, TokenRule rule);
  uint16_t port() const { return port_; }
  int reviews() const { return reviews_.load(); }
  // Reviews whose caller did not present `caller_token`.
  int unauthorized_callers() const { return unauthorized_.load(); }
  // Writes a kubeconfig for this server (CA file, bearer token) and returns its path.
  std::string write_kubeconfig(const std::string& dir, const std::string& ca_file) const;

  std::chrono::milliseconds slow_delay{30000};

 private:
  void serve(asio::ip::tcp::socket s);

  std::string caller_token_;
  asio::io_context ctx_;
  asio::ssl::context tls_{asio::ssl::context::tls_server};
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::mutex mu_;
  std::map<std::string, TokenRule> tokens_;
  std::atomic<int> reviews_{0};
  std::atomic<int> unauthorized_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace konn::e2e
