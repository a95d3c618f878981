#include "tests/support/tcp_balancer.h"

#include <array>
#include <memory>

#include <asio.hpp>

namespace konn::testsupport {
namespace {

using asio::ip::tcp;

// Copies one direction; EOF becomes a half-close of the other side, an error closes both.
void pump(std::shared_ptr<tcp::socket> from, std::shared_ptr<tcp::socket> to) {
  auto buf = std::make_shared<std::array<char, 64 * 1024>>();
  from->async_read_some(asio::buffer(*buf), [from, to, buf](std::error_code ec, size_t n) {
    if (ec) {
      std::error_code ignored;
      if (ec == asio::error::eof) {
        to->shutdown(tcp::socket::shutdown_send, ignored);
      } else {
        from->close(ignored);
        to->close(ignored);
      }
      return;
    }
    asio::async_write(*to, asio::buffer(buf->data(), n),
                      [from, to, buf](std::error_code wec, size_t) {
                        if (wec) {
                          std::error_code ignored;
                          from->close(ignored);
                          to->close(ignored);
                          return;
                        }
                        pump(from, to);
                      });
  });
}

// Tries `order` one after the other; relays with the first that accepts.
void connect_backend(std::shared_ptr<tcp::socket> client, std::vector<uint16_t> order, size_t index,
                     std::atomic<int>* connections) {
  if (index >= order.size()) {
    std::error_code ignored;
    client->close(ignored);
    return;
  }
  auto backend = std::make_shared<tcp::socket>(client->get_executor());
  tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), order[index]);
  backend->async_connect(ep, [client, backend, order = std::move(order), index,
                              connections](std::error_code ec) mutable {
    if (ec) {
      connect_backend(client, std::move(order), index + 1, connections);
      return;
    }
    ++*connections;
    std::error_code ignored;
    client->set_option(tcp::no_delay(true), ignored);
    backend->set_option(tcp::no_delay(true), ignored);
    pump(client, backend);
    pump(backend, client);
  });
}

}  // namespace

TcpBalancer::TcpBalancer() : acceptor_(ctx_, {asio::ip::make_address("127.0.0.1"), 0}) {
  port_ = acceptor_.local_endpoint().port();
  accept();
  thread_ = std::thread([this] { ctx_.run(); });
}

TcpBalancer::~TcpBalancer() {
  ctx_.stop();
  thread_.join();
}

void TcpBalancer::set_backends(std::vector<uint16_t> ports) {
  std::lock_guard lock(mu_);
  backends_ = std::move(ports);
}

std::vector<uint16_t> TcpBalancer::next_order() {
  std::lock_guard lock(mu_);
  std::vector<uint16_t> order;
  for (size_t i = 0; i < backends_.size(); ++i) {
    order.push_back(backends_[(next_ + i) % backends_.size()]);
  }
  ++next_;
  return order;
}

void TcpBalancer::accept() {
  acceptor_.async_accept([this](std::error_code ec, tcp::socket s) {
    if (ec) return;
    connect_backend(std::make_shared<tcp::socket>(std::move(s)), next_order(), 0, &connections_);
    accept();
  });
}

}  // namespace konn::testsupport
