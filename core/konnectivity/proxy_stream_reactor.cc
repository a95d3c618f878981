#include "core/konnectivity/proxy_stream_reactor.h"

#include <algorithm>

namespace konn::core::konnectivity {

void StreamTracker::add(const std::weak_ptr<tunnel::PacketStream>& s) {
  std::lock_guard lock(mu_);
  streams_.erase(
      std::remove_if(streams_.begin(), streams_.end(), [](const auto& w) { return w.expired(); }),
      streams_.end());
  streams_.push_back(s);
  ++active_;
}

void StreamTracker::done() {
  {
    std::lock_guard lock(mu_);
    --active_;
  }
  cv_.notify_all();
}

void StreamTracker::cancel_all(std::chrono::milliseconds timeout) {
  std::vector<std::shared_ptr<tunnel::PacketStream>> live;
  {
    std::lock_guard lock(mu_);
    for (auto& w : streams_) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->close({h2::grpc_code::kCancelled, "shutting down"}, true);
  live.clear();
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return active_ == 0; });
}

size_t StreamTracker::active() const {
  std::lock_guard lock(mu_);
  return active_;
}

ProxyStreamReactor::ProxyStreamReactor(Private, std::shared_ptr<StreamEvents> events,
                                       std::shared_ptr<StreamTracker> tracker)
    : events_(std::move(events)), tracker_(std::move(tracker)) {}

std::shared_ptr<ProxyStreamReactor> ProxyStreamReactor::start(
    ProxyService::Stub& stub, std::shared_ptr<StreamEvents> events,
    std::shared_ptr<StreamTracker> tracker) {
  auto r = std::make_shared<ProxyStreamReactor>(Private{}, std::move(events), tracker);
  r->self_ = r;
  if (tracker) tracker->add(r);
  stub.async()->Proxy(&r->context_, r.get());
  r->AddHold();  // reads and writes start on Asio threads; removed by start_finish_op
  r->StartCall();
  r->start_reading();
  return r;
}

void ProxyStreamReactor::start_finish_op(const h2::GrpcStatus&) {
  // A client has no Finish: half-close our side so the server ends the call, and let OnDone
  // come once every operation completed.
  StartWritesDone();
  RemoveHold();
}

void ProxyStreamReactor::on_packet(Packet&& p) { events_->on_packet(*this, std::move(p)); }

void ProxyStreamReactor::on_read_end() {
  // The server finished (or the call broke): nothing more will arrive. The tunnel learns why from
  // OnDone's status.
  close();
}

void ProxyStreamReactor::OnDone(const grpc::Status& status) {
  mark_done();
  auto events = std::move(events_);
  auto tracker = std::move(tracker_);
  auto last = std::move(self_);
  if (events) events->on_stream_end(status);
  events.reset();
  // `last` may be the final reference: nothing touches members after this. It goes before
  // tracker->done(): the reactor's ClientContext holds a reference to the channel, and once done()
  // lets ~Dialer drop the Dialer's own, destroying the reactor here could destroy the channel on
  // this gRPC thread, whose completion queue the channel's destructor shuts down and frees under
  // our feet (gRPC aborts: "assertion failed: prior > 0" in grpc_cq_internal_unref).
  last.reset();
  if (tracker) tracker->done();
}

}  // namespace konn::core::konnectivity
