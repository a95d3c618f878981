#include "tests/integration/server/fake_apiserver.h"

#include <fstream>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <nlohmann/json.hpp>

namespace konn::e2e {

FakeApiserver::FakeApiserver(const std::string& cert_file, const std::string& key_file,
                             std::string caller_token)
    : caller_token_(std::move(caller_token)),
      acceptor_(ctx_, {asio::ip::make_address("127.0.0.1"), 0}) {
  tls_.use_certificate_chain_file(cert_file);
  tls_.use_private_key_file(key_file, asio::ssl::context::pem);
  port_ = acceptor_.local_endpoint().port();
  thread_ = std::thread([this] {
    for (;;) {
      std::error_code ec;
      asio::ip::tcp::socket s(ctx_);
      acceptor_.accept(s, ec);
      if (ec || stop_) return;
      std::thread([this, s = std::move(s)]() mutable { serve(std::move(s)); }).detach();
    }
  });
}

FakeApiserver::~FakeApiserver() {
  stop_ = true;
  std::error_code ec;
  asio::ip::tcp::socket poke(ctx_);
  poke.connect(acceptor_.local_endpoint(), ec);
  thread_.join();
}

void FakeApiserver::set_token(const std::string& token, TokenRule rule) {
  std::lock_guard lock(mu_);
  tokens_[token] = std::move(rule);
}

std::string FakeApiserver::write_kubeconfig(const std::string& dir,
                                            const std::string& ca_file) const {
  std::string path = dir + "/apiserver.kubeconfig";
  std::ofstream f(path);
  f << "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n"
    << "    server: https://127.0.0.1:" << port_ << "\n"
    << "    certificate-authority: " << ca_file << "\n"
    << "users:\n- name: konnectivity-server\n  user:\n    token: " << caller_token_ << "\n"
    << "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: konnectivity-server\n"
    << "current-context: fake\n";
  return path;
}

void FakeApiserver::serve(asio::ip::tcp::socket socket) {
  asio::ssl::stream<asio::ip::tcp::socket> s(std::move(socket), tls_);
  std::error_code ec;
  s.handshake(asio::ssl::stream_base::server, ec);
  if (ec) return;
  asio::streambuf in;
  size_t head_len = asio::read_until(s, in, "\r\n\r\n", ec);
  if (ec) return;
  std::string head(asio::buffers_begin(in.data()), asio::buffers_begin(in.data()) + head_len);
  in.consume(head_len);
  size_t length = 0;
  std::string lower = head;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (auto p = lower.find("content-length:"); p != std::string::npos) {
    length = std::stoul(lower.substr(p + 15));
  }
  std::string body(asio::buffers_begin(in.data()), asio::buffers_end(in.data()));
  if (body.size() < length) {
    std::string rest(length - body.size(), '\0');
    asio::read(s, asio::buffer(rest), ec);
    body += rest;
  }
  auto reply = [&](int status, const std::string& json) {
    std::string rsp = "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json"
                      "\r\nContent-Length: " + std::to_string(json.size()) +
                      "\r\nConnection: close\r\n\r\n" + json;
    asio::write(s, asio::buffer(rsp), ec);
    s.shutdown(ec);
  };
  if (head.rfind("POST /apis/authentication.k8s.io/v1/tokenreviews ", 0) != 0) {
    reply(404, R"({"kind":"Status","code":404})");
    return;
  }
  ++reviews_;
  if (head.find("Authorization: Bearer " + caller_token_ + "\r\n") == std::string::npos) {
    ++unauthorized_;
    reply(401, R"({"kind":"Status","code":401})");
    return;
  }
  auto doc = nlohmann::json::parse(body, nullptr, false);
  std::string token = doc.is_discarded() ? "" : doc["spec"].value("token", std::string());
  TokenRule rule;
  {
    std::lock_guard lock(mu_);
    if (auto it = tokens_.find(token); it != tokens_.end()) rule = it->second;
  }
  nlohmann::json status;
  switch (rule.answer) {
    case Answer::ServerError:
      reply(500, R"({"kind":"Status","code":500,"message":"etcd is on fire"})");
      return;
    case Answer::Slow:
      std::this_thread::sleep_for(slow_delay);
      [[fallthrough]];
    case Answer::Authenticated:
      status = {{"authenticated", true}, {"user", {{"username", rule.username}}}};
      break;
    case Answer::Unauthenticated:
      status = {{"authenticated", false}, {"error", "token is not valid"}};
      break;
  }
  nlohmann::json out = {{"apiVersion", "authentication.k8s.io/v1"},
                        {"kind", "TokenReview"},
                        {"status", status}};
  reply(201, out.dump());
}

}  // namespace konn::e2e
