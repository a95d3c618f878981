#include "core/tunnel/packet_stream.h"

#include <optional>

#include "core/tunnel/packet.h"

namespace konn::core::tunnel {

namespace {

// The tunnel whose turn a packet waits for, or none for the control queue. A tunnel's DIAL_RSP,
// DATA, half-close and close share its queue, so they keep their order; credit may pass them.
// Node-to-control-plane tunnels (KONN_NODE_*) have connectIDs of their own, chosen by the other
// side: their lanes are keyed by the complement, apart from the forward tunnels'.
std::optional<int64_t> tunnel_of(const Packet& p) {
  if (is_node_type(p.type())) {
    Packet::PayloadCase c = p.payload_case();
    if (p.type() == KONN_NODE_DATA && c == Packet::kData) return ~p.data().connectid();
    if (p.type() == KONN_NODE_CLOSE && c == Packet::kCloseResponse) {
      return ~p.closeresponse().connectid();
    }
    if (p.type() == KONN_NODE_CLOSE_WRITE && c == Packet::kCloseWrite) {
      return ~p.closewrite().connectid();
    }
    if (p.type() == KONN_NODE_DIAL_RSP && c == Packet::kDialResponse &&
        p.dialresponse().error().empty()) {
      return ~p.dialresponse().connectid();
    }
    return std::nullopt;  // dials, dial errors, DIAL_CLS, credit
  }
  switch (p.type()) {
    case DATA:
      return p.data().connectid();
    case CLOSE_REQ:
      return p.closerequest().connectid();
    case CLOSE_RSP:
      return p.closeresponse().connectid();
    case KONN_CLOSE_WRITE:
      return p.closewrite().connectid();
    case DIAL_RSP:
      if (p.dialresponse().error().empty()) return p.dialresponse().connectid();
      return std::nullopt;
    default:  // DIAL_REQ, DIAL_CLS, DRAIN, KONN_WINDOW_UPDATE
      return std::nullopt;
  }
}

}  // namespace

bool PacketStream::send(Packet&& p, std::shared_ptr<WriteListener> listener) {
  const Packet* write = nullptr;
  WriteOptions opts;
  Action action = Action::None;
  if (closing()) return false;
  on_queued(p);
  {
    std::lock_guard lock(mu_);
    if (closing_) return false;
    size_t bytes = data_size(p);
    add_queued_locked(static_cast<int64_t>(bytes));
    const auto tunnel = tunnel_of(p);
    Queue* queue = &control_;
    // With nothing written or waiting the packet goes out at once: its tunnel needs no queue.
    if (tunnel && (writing_ || waiting_locked())) {
      auto [it, added] = lanes_.try_emplace(*tunnel);
      if (added) it->second = turns_.insert(turns_.end(), Lane{*tunnel, {}});
      queue = &it->second->items;
    }
    // Merge small DATA into the last waiting DATA of the same tunnel: one gRPC message instead
    // of many (each costs ~7 us of CPU and a sendmsg). Two large chunks are left apart: copying
    // them would cost more than the message saves.
    if (bytes > 0 && !queue->empty() &&
        (bytes < kSmallRead || queue->back().bytes < kSmallRead)) {
      Item& back = queue->back();
      if (back.packet.type() == p.type() && back.listener == listener &&
          back.packet.data().connectid() == p.data().connectid() &&
          back.bytes + bytes <= coalesce_limit_.load(std::memory_order_relaxed)) {
        back.packet.mutable_data()->mutable_data()->append(p.data().data());
        back.bytes += bytes;
        return true;
      }
    }
    queue->push_back(Item{std::move(p), std::move(listener), bytes});
    action = next_action_locked(&write, &opts);
  }
  run(action, write, opts);
  return true;
}

void PacketStream::take_next_locked() {
  if (!control_.empty()) {
    in_flight_ = std::move(control_.front());
    control_.pop_front();
    return;
  }
  auto lane = turns_.begin();
  in_flight_ = std::move(lane->items.front());
  lane->items.pop_front();
  if (lane->items.empty()) {
    lanes_.erase(lane->tunnel);
    turns_.erase(lane);
  } else {
    turns_.splice(turns_.end(), turns_, lane);  // its next packet waits for the others' turns
  }
}

void PacketStream::drop_waiting_locked() {
  for (const auto& item : control_) add_queued_locked(-static_cast<int64_t>(item.bytes));
  for (const auto& lane : turns_) {
    for (const auto& item : lane.items) add_queued_locked(-static_cast<int64_t>(item.bytes));
  }
  control_.clear();
  lanes_.clear();
  turns_.clear();
}

void PacketStream::close(const h2::GrpcStatus& status, bool abort) {
  bool cancel = false;
  const Packet* write = nullptr;
  WriteOptions opts;
  Action action = Action::None;
  {
    std::lock_guard lock(mu_);
    if (!closing_) {
      closing_ = true;
      status_ = status;
    }
    if (abort && !aborted_) {
      aborted_ = true;
      // An earlier graceful close will not complete (what it waited to write is dropped): the
      // peer learns this close's status, not that one's.
      if (!finished_) status_ = status;
      // Keep only the packet being written; the rest will never be sent.
      drop_waiting_locked();
      cancel = !finished_ && !done_;
      if (cancel) ++starting_;
    }
    if (!cancel) action = next_action_locked(&write, &opts);
  }
  if (cancel) {
    h2::GrpcStatus first;
    {
      std::lock_guard lock(mu_);
      first = status_;
    }
    cancel_op(first);
    {
      std::lock_guard lock(mu_);
      --starting_;
      action = next_action_locked(&write, &opts);
    }
  }
  run(action, write, opts);
}

void PacketStream::pause_reading(relay::PauseReason reason) {
  std::lock_guard lock(mu_);
  gate_.pause(reason);
}

void PacketStream::resume_reading(relay::PauseReason reason) {
  {
    std::lock_guard lock(mu_);
    if (!gate_.resume(reason)) return;
  }
  maybe_start_read();
}

bool PacketStream::closing() const {
  std::lock_guard lock(mu_);
  return closing_;
}

bool PacketStream::done() const {
  std::lock_guard lock(mu_);
  return done_;
}

size_t PacketStream::queued_bytes() const {
  // Written only under mu_, so a reader without it sees some recent value: enough for a choice
  // between agents (BackendRegistry), which must not take every candidate's lock.
  return queued_bytes_.load(std::memory_order_relaxed);
}

void PacketStream::handle_write_done(bool ok) {
  Item done;
  const Packet* write = nullptr;
  WriteOptions opts;
  Action action = Action::None;
  {
    std::lock_guard lock(mu_);
    done = std::move(in_flight_);
    in_flight_ = Item{};
    add_queued_locked(-static_cast<int64_t>(done.bytes));
    writing_ = false;
    if (!ok) {
      // The stream is broken: nothing more can be written. The read side ends too and the
      // owner tears the tunnels down from on_read_end().
      closing_ = true;
      aborted_ = true;
      drop_waiting_locked();
    }
    ++starting_;  // keep the finish op back while the listener runs
  }
  if (!ok) on_write_failed(done.packet);
  if (ok && done.listener) done.listener->on_written(done.bytes);
  done = Item{};  // free the packet's bytes before the next write starts
  {
    std::lock_guard lock(mu_);
    --starting_;
    action = next_action_locked(&write, &opts);
  }
  run(action, write, opts);
}

void PacketStream::start_reading() {
  {
    std::lock_guard lock(mu_);
    read_started_ = true;
  }
  maybe_start_read();
}

void PacketStream::maybe_start_read() {
  {
    std::lock_guard lock(mu_);
    if (!read_started_ || reading_ || read_ended_ || closing_ || finished_ || !gate_.open()) {
      return;
    }
    reading_ = true;
    ++starting_;
  }
  start_read_op(&in_);
  const Packet* write = nullptr;
  WriteOptions opts;
  Action action = Action::None;
  {
    std::lock_guard lock(mu_);
    --starting_;
    action = next_action_locked(&write, &opts);
  }
  run(action, write, opts);
}

void PacketStream::handle_read_done(bool ok) {
  {
    std::lock_guard lock(mu_);
    reading_ = false;
    if (!ok) read_ended_ = true;
    ++starting_;  // no finish op while the handler runs
  }
  if (ok) {
    Packet p;
    p.Swap(&in_);
    on_packet(std::move(p));
  } else {
    on_read_end();
  }
  const Packet* write = nullptr;
  WriteOptions opts;
  Action action = Action::None;
  {
    std::lock_guard lock(mu_);
    --starting_;
    action = next_action_locked(&write, &opts);
  }
  run(action, write, opts);
  if (ok) maybe_start_read();
}

void PacketStream::mark_done() {
  std::lock_guard lock(mu_);
  done_ = true;
  closing_ = true;
}

PacketStream::Action PacketStream::next_action_locked(const Packet** write, WriteOptions* opts) {
  if (finished_ || done_) return Action::None;
  if (!writing_ && waiting_locked() && !aborted_) {
    take_next_locked();
    writing_ = true;
    ++starting_;
    *write = &in_flight_.packet;
    *opts = WriteOptions{};
    opts->buffer_hint = waiting_locked();  // more is coming: let the transport batch
    return Action::Write;
  }
  if (closing_ && !writing_ && starting_ == 0 && (!waiting_locked() || aborted_)) {
    finished_ = true;
    return Action::Finish;
  }
  return Action::None;
}

void PacketStream::run(Action a, const Packet* write, WriteOptions opts) {
  switch (a) {
    case Action::None:
      return;
    case Action::Write: {
      start_write_op(write, opts);
      const Packet* next = nullptr;
      WriteOptions next_opts;
      Action follow = Action::None;
      {
        std::lock_guard lock(mu_);
        --starting_;
        follow = next_action_locked(&next, &next_opts);
      }
      run(follow, next, next_opts);
      return;
    }
    case Action::Finish: {
      h2::GrpcStatus status;
      {
        std::lock_guard lock(mu_);
        status = status_;
      }
      start_finish_op(status);
      return;
    }
  }
}

}  // namespace konn::core::tunnel
