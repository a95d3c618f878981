#include "test-client/client_app.h"

#include <cerrno>
#include <iostream>
#include <poll.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "test-client/channel.h"
#include "test-client/http_get.h"
#include "test-client/tunnel.h"

namespace konn::testclient {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

constexpr char kProgram[] = "proxy-test-client: ";

bool write_all(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int ClientApp::run() { return options_.pipe ? pipe() : fetch(); }

int ClientApp::fetch() {
  std::unique_ptr<Tunnel> tunnel;
  try {
    ChannelConfig cc{options_.proxy_uds, options_.proxy_host,  options_.proxy_port,
                     options_.ca_cert,   options_.client_cert, options_.client_key};
    auto dial = Tunnel::dial(make_channel(cc), options_.request_address(),
                             duration_cast<milliseconds>(options_.dial_timeout));
    if (!dial.tunnel) {
      std::cerr << kProgram << "dial " << options_.request_address() << " failed: " << dial.error
                << "\n";
      return 1;
    }
    tunnel = std::move(dial.tunnel);
  } catch (const std::exception& e) {
    std::cerr << kProgram << e.what() << "\n";
    return 1;
  }

  HttpGetResult r = http_get(*tunnel, options_.request_address(), options_.request_path,
                             duration_cast<milliseconds>(options_.request_timeout));
  tunnel->close(std::chrono::seconds(5));
  if (!r.error.empty()) {
    std::cerr << kProgram << "GET " << options_.request_path << " failed: " << r.error << "\n";
    return 1;
  }
  if (!write_all(1, r.body)) {
    std::cerr << kProgram << "cannot write to stdout\n";
    return 1;
  }
  if (r.code < 200 || r.code > 299) {
    std::cerr << kProgram << "GET " << options_.request_path << ": HTTP " << r.code << "\n";
    return 1;
  }
  return 0;
}

int ClientApp::pipe() {
  std::unique_ptr<Tunnel> tunnel;
  try {
    ChannelConfig cc{options_.proxy_uds, options_.proxy_host,  options_.proxy_port,
                     options_.ca_cert,   options_.client_cert, options_.client_key};
    auto dial = Tunnel::dial(make_channel(cc), options_.request_address(),
                             duration_cast<milliseconds>(options_.dial_timeout));
    if (!dial.tunnel) {
      std::cerr << kProgram << "dial " << options_.request_address() << " failed: " << dial.error
                << "\n";
      return 1;
    }
    tunnel = std::move(dial.tunnel);
  } catch (const std::exception& e) {
    std::cerr << kProgram << e.what() << "\n";
    return 1;
  }

  // The protocol has no half-close: stdin's EOF only stops our sending; the tunnel ends when the
  // destination closes (CLOSE_RSP). A self-pipe stops the stdin thread once the tunnel ended.
  int stop[2];
  if (::pipe(stop) != 0) {
    std::cerr << kProgram << "pipe() failed\n";
    return 1;
  }
  std::thread in([&] {
    std::vector<char> buf(Tunnel::kMaxChunk);
    pollfd fds[2] = {{0, POLLIN, 0}, {stop[0], POLLIN, 0}};
    for (;;) {
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents != 0) return;
      ssize_t n = ::read(0, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      if (!tunnel->write(std::string_view(buf.data(), static_cast<size_t>(n)))) return;
    }
  });

  bool out_ok = true;
  while (auto chunk = tunnel->read()) {
    if (!write_all(1, *chunk)) {
      out_ok = false;
      break;
    }
  }
  std::string reason = tunnel->end_reason();
  bool ended = tunnel->ended();
  (void)!::write(stop[1], "x", 1);
  // close() cancels the stream if needed, which also releases a write blocked in the thread.
  std::string close_result = tunnel->close(std::chrono::seconds(5));
  in.join();
  ::close(stop[0]);
  ::close(stop[1]);
  if (!out_ok) {
    std::cerr << kProgram << "cannot write to stdout\n";
    return 1;
  }
  if (ended && !reason.empty()) {
    std::cerr << kProgram << "tunnel ended: " << reason << "\n";
    return 1;
  }
  return 0;
}

}  // namespace konn::testclient
