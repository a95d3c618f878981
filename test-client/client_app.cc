#include "test-client/client_app.h"

#include <cerrno>
#include <iostream>
#include <poll.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "test-client/channel.h"
#include "test-client/connect_stream.h"
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

int ClientApp::run() {
  std::unique_ptr<ByteStream> stream = dial();
  if (!stream) return 1;
  return options_.pipe ? pipe(*stream) : fetch(*stream);
}

std::unique_ptr<ByteStream> ClientApp::dial() {
  ChannelConfig frontend{options_.proxy_uds, options_.proxy_host,  options_.proxy_port,
                         options_.ca_cert,   options_.client_cert, options_.client_key};
  auto timeout = duration_cast<milliseconds>(options_.dial_timeout);
  std::string error;
  try {
    if (options_.http_connect()) {
      auto d = ConnectStream::dial(frontend, options_.request_address(), timeout);
      if (d.stream) return std::move(d.stream);
      error = std::move(d.error);
    } else {
      auto d = Tunnel::dial(make_channel(frontend), options_.request_address(), timeout);
      if (d.tunnel) return std::move(d.tunnel);
      error = std::move(d.error);
    }
  } catch (const std::exception& e) {
    std::cerr << kProgram << e.what() << "\n";
    return nullptr;
  }
  std::cerr << kProgram << "dial " << options_.request_address() << " failed: " << error << "\n";
  return nullptr;
}

int ClientApp::fetch(ByteStream& stream) {
  HttpGetResult r = http_get(stream, options_.request_address(), options_.request_path,
                             duration_cast<milliseconds>(options_.request_timeout));
  stream.close(std::chrono::seconds(5));
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

int ClientApp::pipe(ByteStream& stream) {
  // stdin's EOF becomes a half-close where the stream can carry one (CONNECT over the unix
  // socket); otherwise it only stops our sending. Either way the stream ends when the destination
  // closes. A self-pipe stops the stdin thread once the stream ended.
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
      if (n == 0) stream.close_write();
      if (n <= 0) return;
      if (!stream.write(std::string_view(buf.data(), static_cast<size_t>(n)))) return;
    }
  });

  bool out_ok = true;
  while (auto chunk = stream.read()) {
    if (!write_all(1, *chunk)) {
      out_ok = false;
      break;
    }
  }
  std::string reason = stream.end_reason();
  bool ended = stream.ended();
  (void)!::write(stop[1], "x", 1);
  // close() ends the stream if needed, which also releases a write blocked in the thread.
  stream.close(std::chrono::seconds(5));
  in.join();
  ::close(stop[0]);
  ::close(stop[1]);
  if (!out_ok) {
    std::cerr << kProgram << "cannot write to stdout\n";
    return 1;
  }
  if (ended && !reason.empty()) {
    std::cerr << kProgram << "stream ended: " << reason << "\n";
    return 1;
  }
  return 0;
}

}  // namespace konn::testclient
