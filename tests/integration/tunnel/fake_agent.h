#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/sync_stream.h>

#include "konnectivity/agent.grpc.pb.h"
#include "tests/support/test_certs.h"

namespace konn::e2e {

// An agent the test drives packet by packet, speaking upstream's protocol only: it opens
// `/AgentService/Connect` with agentid and agentidentifiers and announces no konn extension
// (no konn-flow-control, no konn-half-close) unless `metadata` adds it. A reader thread queues
// what the server sends; pause_reading() stops it, so the server's queue towards this agent
// fills up as towards an agent whose stream is stuck.
class FakeAgent {
 public:
  struct Options {
    std::string id = "fake-agent";
    std::string identifiers;
    std::vector<std::pair<std::string, std::string>> metadata;  // extra request headers
    // Empty: the test certificates' agent certificate (mTLS).
    std::string cert, key;
  };

  FakeAgent(uint16_t agent_port, const testsupport::TestCerts& certs, Options options);
  // Cancels the stream and joins the reader.
  ~FakeAgent();
  FakeAgent(const FakeAgent&) = delete;
  FakeAgent& operator=(const FakeAgent&) = delete;

  // Waits for the server's response headers (serverid); false when the stream failed first.
  bool wait_connected(std::chrono::milliseconds timeout);
  // The next received packet of `type` (earlier packets of other types are kept), or nullopt
  // after `timeout`.
  std::optional<Packet> next(PacketType type, std::chrono::milliseconds timeout);
  // Whether a packet matching `pred` has been received (and is still queued), within `timeout`.
  template <typename Pred>
  bool received(Pred pred, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const auto& p : inbox_) {
        if (pred(p)) return true;
      }
      return false;
    });
  }
  // Sends one packet (blocks while HTTP/2 flow control holds it); false once the stream broke.
  bool send(const Packet& p);
  void pause_reading();
  void resume_reading();
  // The stream's end: true once the server finished it (or it broke); its status.
  bool ended() const;
  grpc::Status status() const;

 private:
  void read_loop();

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<AgentService::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<Packet, Packet>> stream_;
  std::mutex write_mu_;
  std::thread reader_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Packet> inbox_;
  bool headers_ = false;
  bool paused_ = false;
  bool ended_ = false;
  grpc::Status status_;
};

}  // namespace konn::e2e
