#include "test-client/fake_proxy_service.h"

#include <charconv>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "core/tunnel/packet.h"
#include "test-client/grpc_credentials.h"

namespace konn::testclient {

using core::tunnel::make_close_response;
using core::tunnel::make_data;
using core::tunnel::make_dial_response;

class FakeProxyService::Impl final : public ProxyService::Service {
 public:
  explicit Impl(std::atomic<uint64_t>* source_sent) : source_sent_(source_sent) {}

  grpc::Status Proxy(grpc::ServerContext*,
                     grpc::ServerReaderWriter<Packet, Packet>* stream) override {
    Packet p;
    if (!stream->Read(&p)) return grpc::Status::OK;
    if (p.type() != DIAL_REQ) return {grpc::StatusCode::INVALID_ARGUMENT, "want DIAL_REQ"};
    {
      std::lock_guard lock(mu_);
      seen_.dial_requests.push_back(p);
    }
    const int64_t random = p.dialrequest().random();
    const std::string address = p.dialrequest().address();
    // "mode:N" or "mode-N:port": N is the behaviour's argument.
    std::string mode = address.substr(0, address.rfind(':'));
    std::string arg = address.substr(address.rfind(':') + 1);
    if (auto dash = mode.find('-'); dash != std::string::npos) {
      arg = mode.substr(dash + 1);
      mode = mode.substr(0, dash);
    }
    uint64_t n = 0;
    std::from_chars(arg.data(), arg.data() + arg.size(), n);
    const int64_t cid = 7;

    if (mode == "refuse") {
      stream->Write(make_dial_response(
          random, 0, "dial tcp 127.0.0.1:" + arg + ": connect: connection refused"));
      return drain(stream);
    }
    if (mode == "silent") return drain(stream);
    stream->Write(make_dial_response(random, cid));
    bool closed = false;
    if (mode == "hangup") {
      stream->Write(make_data(cid, "bye"));
      stream->Write(make_close_response(cid));
      closed = true;
    } else if (mode == "source") {
      std::string block(256 * 1024 - (256 * 1024) % 251, '\0');
      for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i % 251);
      for (uint64_t sent = 0; sent < n;) {
        size_t k = static_cast<size_t>(std::min<uint64_t>(block.size(), n - sent));
        if (!stream->Write(make_data(cid, block.substr(0, k)))) return grpc::Status::OK;
        sent += k;
        source_sent_->fetch_add(k);
      }
      stream->Write(make_close_response(cid));
      closed = true;
    }

    uint64_t sink = 0;
    uint64_t echoed = 0;
    std::string request;
    while (stream->Read(&p)) {
      switch (p.type()) {
        case DATA: {
          size_t size = p.data().data().size();
          {
            std::lock_guard lock(mu_);
            seen_.max_data = std::max(seen_.max_data, size);
            seen_.data_bytes += size;
          }
          if (closed) break;
          if (mode == "echo" || mode == "noclose" || mode == "echoclose") {
            stream->Write(make_data(cid, std::string(p.data().data())));
            echoed += size;
            if (mode == "echoclose" && echoed >= n) {
              stream->Write(make_close_response(cid));
              closed = true;
            }
          } else if (mode == "sink") {
            sink += size;
          } else if (mode == "http") {
            request += p.data().data();
            if (request.find("\r\n\r\n") != std::string::npos) {
              stream->Write(make_data(cid,
                                      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                      "6\r\nhello \r\n9\r\nfrom fake\r\n0\r\n\r\n"));
              stream->Write(make_close_response(cid));
              closed = true;
            }
          }
          break;
        }
        case CLOSE_REQ: {
          {
            std::lock_guard lock(mu_);
            ++seen_.close_requests;
          }
          if (closed || mode == "noclose") break;
          if (mode == "sink") stream->Write(make_data(cid, std::to_string(sink)));
          stream->Write(make_close_response(p.closerequest().connectid()));
          closed = true;
          break;
        }
        case DIAL_CLS: {
          std::lock_guard lock(mu_);
          seen_.close_dials.push_back(p.closedial().random());
          break;
        }
        default:
          break;
      }
    }
    std::lock_guard lock(mu_);
    ++seen_.streams_finished;
    return grpc::Status::OK;
  }

  Seen seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  grpc::Status drain(grpc::ServerReaderWriter<Packet, Packet>* stream) {
    Packet p;
    while (stream->Read(&p)) {
      if (p.type() == DIAL_CLS) {
        std::lock_guard lock(mu_);
        seen_.close_dials.push_back(p.closedial().random());
      }
    }
    std::lock_guard lock(mu_);
    ++seen_.streams_finished;
    return grpc::Status::OK;
  }

  std::atomic<uint64_t>* source_sent_;
  mutable std::mutex mu_;
  Seen seen_;
};

FakeProxyService::FakeProxyService(const std::string& socket_path)
    : impl_(std::make_unique<Impl>(&source_sent_)) {
  grpc::ServerBuilder b;
  b.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  b.RegisterService(impl_.get());
  b.SetMaxReceiveMessageSize(-1);
  server_ = b.BuildAndStart();
}

FakeProxyService::FakeProxyService(const Tls& tls) : impl_(std::make_unique<Impl>(&source_sent_)) {
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc_server_credentials(tls.cert, tls.key, tls.client_ca),
                     &port_);
  b.RegisterService(impl_.get());
  b.SetMaxReceiveMessageSize(-1);
  server_ = b.BuildAndStart();
}

FakeProxyService::~FakeProxyService() {
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
}

FakeProxyService::Seen FakeProxyService::seen() const { return impl_->seen(); }

}  // namespace konn::testclient
