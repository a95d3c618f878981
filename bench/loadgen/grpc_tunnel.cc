#include "bench/loadgen/grpc_tunnel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <unistd.h>

namespace konn::bench {

using core::io::use_nothrow;

namespace {

// Dial ids (upstream's "random"): distinct per process and non-negative, as upstream's
// rand.Int63() is.
int64_t next_dial_id() {
  static std::atomic<int64_t> next{
      (static_cast<int64_t>(::getpid()) << 32) ^
      (std::chrono::steady_clock::now().time_since_epoch().count() & 0x7fffffff)};
  return next.fetch_add(1) & 0x7fffffffffffffff;
}

}  // namespace

GrpcTunnel::GrpcTunnel(const asio::any_io_executor& ex)
    : inbox_(ex, kInboxMessages + 2), write_done_(ex, 1), done_signal_(ex, 1) {}

Awaitable<std::pair<std::unique_ptr<Stream>, std::string>> GrpcTunnel::dial(
    ProxyService::Stub& stub, const std::string& target) {
  auto ex = co_await asio::this_coro::executor;
  std::unique_ptr<GrpcTunnel> t(new GrpcTunnel(ex));
  stub.async()->Proxy(&t->ctx_, t.get());
  // Reads and writes are started from io threads, outside reactions: the hold keeps OnDone from
  // running in a gap between them (removed by close() or the destructor).
  t->AddHold();
  t->StartRead(&t->in_);
  Packet req;
  req.set_type(DIAL_REQ);
  auto* d = req.mutable_dialrequest();
  d->set_protocol("tcp");
  d->set_address(target);
  d->set_random(next_dial_id());
  t->StartCall();
  std::pair<std::unique_ptr<Stream>, std::string> result;
  if (auto ec = co_await t->send(req)) {
    result.second = "DIAL_REQ not sent: " + ec.message();
    co_return result;
  }
  auto [ec, text] = co_await t->receive();
  if (ec) {
    result.second = text.empty() ? "no DIAL_RSP: " + ec.message() : "dial refused: " + text;
    co_return result;
  }
  result.first = std::move(t);
  co_return result;
}

GrpcTunnel::~GrpcTunnel() {
  if (!closed_ || !hold_removed_) ctx_.TryCancel();
  remove_hold_once();
  done_future_.wait();
}

void GrpcTunnel::remove_hold_once() {
  if (hold_removed_) return;
  hold_removed_ = true;
  RemoveHold();
}

void GrpcTunnel::deliver(std::error_code ec, std::string bytes, bool read_on) {
  bool start = false;
  {
    std::lock_guard lock(mu_);
    ++queued_;
    if (!read_on) {
      read_ended_ = true;
    } else if (queued_ < kInboxMessages) {
      start = true;
    } else {
      read_paused_ = true;
    }
    // Queued under the lock: once read_paused_ is set, receive() on the io thread may restart
    // the read at once, and that read's deliver() must not overtake this item (it did: bytes
    // out of order, seen against upstream's server, whose 4 KiB packets fill the inbox).
    // Capacity kInboxMessages + 2 and no read while kInboxMessages wait: never full here.
    inbox_.try_send(ec, std::move(bytes));
  }
  if (start) StartRead(&in_);
}

void GrpcTunnel::OnReadDone(bool ok) {
  if (!ok) {
    deliver(asio::error::eof, "", false);
    return;
  }
  switch (in_.type()) {
    case DIAL_RSP: {
      const auto& r = in_.dialresponse();
      if (!r.error().empty()) {
        deliver(asio::error::connection_refused, r.error(), true);
      } else {
        connect_id_ = r.connectid();  // read by the io thread only after receive() returns
        deliver({}, "", true);
      }
      return;
    }
    case DATA:
      deliver({}, std::move(*in_.mutable_data()->mutable_data()), true);
      return;
    case CLOSE_RSP:
    case DIAL_CLS:
      deliver(asio::error::eof, "", true);
      return;
    default:
      deliver({}, "", true);  // nothing for us (DRAIN); keeps the count of reads balanced
      return;
  }
}

void GrpcTunnel::OnWriteDone(bool ok) {
  write_done_.try_send(ok ? std::error_code() : make_error_code(asio::error::broken_pipe), 0);
}

void GrpcTunnel::OnDone(const grpc::Status& status) {
  done_signal_.try_send(
      status.ok() ? std::error_code() : make_error_code(asio::error::connection_reset), 0);
  done_.set_value();  // last touch of this object from gRPC
}

Awaitable<std::pair<std::error_code, std::string>> GrpcTunnel::receive() {
  auto [ec, bytes] = co_await inbox_.async_receive(use_nothrow);
  bool start = false;
  {
    std::lock_guard lock(mu_);
    --queued_;
    if (read_paused_ && !read_ended_) {
      read_paused_ = false;
      start = true;
    }
  }
  if (start) StartRead(&in_);
  co_return std::make_pair(ec, std::move(bytes));
}

Awaitable<std::error_code> GrpcTunnel::send(const Packet& p) {
  out_ = p;
  StartWrite(&out_);
  auto [ec, unused] = co_await write_done_.async_receive(use_nothrow);
  co_return ec;
}

Awaitable<std::pair<std::error_code, size_t>> GrpcTunnel::read_some(asio::mutable_buffer b) {
  while (pending_off_ == pending_.size()) {
    if (eof_) co_return std::make_pair(make_error_code(asio::error::eof), size_t{0});
    auto [ec, bytes] = co_await receive();
    if (ec) {
      eof_ = true;
      co_return std::make_pair(ec, size_t{0});
    }
    pending_ = std::move(bytes);
    pending_off_ = 0;
  }
  size_t n = std::min(b.size(), pending_.size() - pending_off_);
  std::memcpy(b.data(), pending_.data() + pending_off_, n);
  pending_off_ += n;
  co_return std::make_pair(std::error_code(), n);
}

Awaitable<std::error_code> GrpcTunnel::write(asio::const_buffer b) {
  const char* p = static_cast<const char*>(b.data());
  size_t left = b.size();
  while (left > 0) {
    size_t n = std::min(left, kMaxData);
    out_.Clear();
    out_.set_type(DATA);
    auto* d = out_.mutable_data();
    d->set_connectid(connect_id_);
    d->set_data(p, n);
    StartWrite(&out_);
    auto [ec, unused] = co_await write_done_.async_receive(use_nothrow);
    if (ec) co_return ec;
    p += n;
    left -= n;
  }
  co_return std::error_code();
}

Awaitable<std::error_code> GrpcTunnel::close() {
  if (closed_) co_return std::error_code();
  closed_ = true;
  Packet req;
  req.set_type(CLOSE_REQ);
  req.mutable_closerequest()->set_connectid(connect_id_);
  std::error_code result = co_await send(req);
  // Discard what still arrives until CLOSE_RSP (or the end of the call).
  while (!result && !eof_) {
    auto [ec, bytes] = co_await receive();
    if (ec) eof_ = true;
  }
  StartWritesDone();
  remove_hold_once();
  auto [ec, unused] = co_await done_signal_.async_receive(use_nothrow);
  if (!result) result = ec;
  co_return result;
}

Awaitable<void> GrpcTunnel::reset() {
  if (closed_) co_return;
  closed_ = true;
  ctx_.TryCancel();
  remove_hold_once();
  co_await done_signal_.async_receive(use_nothrow);
}

}  // namespace konn::bench
