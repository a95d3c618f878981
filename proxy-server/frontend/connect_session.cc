#include "proxy-server/frontend/connect_session.h"

#include <random>

#include "core/http/http1_writer.h"

namespace konn::server::http_connect {

std::string error_response(int status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " " +
         std::string(core::http::reason_phrase(status)) +
         "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

int status_for_agent_error(const std::string& error) {
  if (error.find("timeout") != std::string::npos ||
      error.find("deadline exceeded") != std::string::npos) {
    return 504;
  }
  if (error.find("too many open files") != std::string::npos) return 503;
  // konn's agent: a destination outside its --allowed-destinations, or its connection limit.
  if (error.find("not allowed by the agent") != std::string::npos) return 403;
  if (error.find("too many endpoint connections") != std::string::npos) return 503;
  return 502;
}

// Looked up once: the registry's lookup takes two locks, too much for every connection.
const std::shared_ptr<spdlog::logger>& connect_logger() {
  static const std::shared_ptr<spdlog::logger> log = core::log::get("server.http-connect");
  return log;
}

int64_t random_dial_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return static_cast<int64_t>(rng() >> 1);  // non-negative, like Go's rand.Int63()
}

template class ConnectSession<asio::local::stream_protocol::socket>;
template class ConnectSession<asio::ssl::stream<asio::ip::tcp::socket>>;

}  // namespace konn::server::http_connect
