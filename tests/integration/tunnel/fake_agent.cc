#include "tests/integration/tunnel/fake_agent.h"

#include <grpcpp/create_channel.h>

#include "test-client/grpc_credentials.h"

namespace konn::e2e {

FakeAgent::FakeAgent(uint16_t agent_port, const testsupport::TestCerts& certs, Options options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto creds = testclient::grpc_channel_credentials(
      certs.ca_crt, options.cert.empty() ? certs.agent_crt : options.cert,
      options.key.empty() ? certs.agent_key : options.key);
  channel_ = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(agent_port), creds, args);
  stub_ = AgentService::NewStub(channel_);
  ctx_.AddMetadata("agentid", options.id);
  ctx_.AddMetadata("agentidentifiers", options.identifiers);
  for (const auto& [k, v] : options.metadata) ctx_.AddMetadata(k, v);
  stream_ = stub_->Connect(&ctx_);
  reader_ = std::thread([this] { read_loop(); });
}

FakeAgent::~FakeAgent() {
  ctx_.TryCancel();
  resume_reading();
  if (reader_.joinable()) reader_.join();
}

void FakeAgent::read_loop() {
  stream_->WaitForInitialMetadata();
  {
    std::lock_guard lock(mu_);
    headers_ = ctx_.GetServerInitialMetadata().count("serverid") > 0;
  }
  cv_.notify_all();
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return !paused_; });
    }
    Packet p;
    if (!stream_->Read(&p)) break;
    {
      std::lock_guard lock(mu_);
      inbox_.push_back(std::move(p));
    }
    cv_.notify_all();
  }
  grpc::Status st = stream_->Finish();
  {
    std::lock_guard lock(mu_);
    ended_ = true;
    status_ = st;
  }
  cv_.notify_all();
}

bool FakeAgent::wait_connected(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return headers_ || ended_; });
  return headers_;
}

std::optional<Packet> FakeAgent::next(PacketType type, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  std::optional<Packet> out;
  cv_.wait_for(lock, timeout, [&] {
    for (auto it = inbox_.begin(); it != inbox_.end(); ++it) {
      if (it->type() == type) {
        out = std::move(*it);
        inbox_.erase(it);
        return true;
      }
    }
    return false;
  });
  return out;
}

bool FakeAgent::send(const Packet& p) {
  std::lock_guard lock(write_mu_);
  return stream_->Write(p);
}

void FakeAgent::pause_reading() {
  std::lock_guard lock(mu_);
  paused_ = true;
}

void FakeAgent::resume_reading() {
  {
    std::lock_guard lock(mu_);
    paused_ = false;
  }
  cv_.notify_all();
}

bool FakeAgent::ended() const {
  std::lock_guard lock(mu_);
  return ended_;
}

grpc::Status FakeAgent::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

}  // namespace konn::e2e
