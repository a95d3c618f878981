#include "test-client/tunnel.h"

#include <limits>
#include <random>

#include "core/tunnel/packet.h"

namespace konn::testclient {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// konnectivity-client uses math/rand Int63(): non-negative. Zero is avoided so that a missing
// field on the wire can never look like our dial.
int64_t random_dial_id() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> dist(1, std::numeric_limits<int64_t>::max());
  std::lock_guard lock(mu);
  return dist(rng);
}

std::string describe(const grpc::Status& s) {
  std::string out = "code " + std::to_string(static_cast<int>(s.error_code()));
  if (!s.error_message().empty()) out += ": " + s.error_message();
  return out;
}

std::string ms_text(std::chrono::milliseconds d) { return std::to_string(d.count()) + "ms"; }

}  // namespace

Tunnel::Tunnel(Private, const std::shared_ptr<grpc::Channel>& channel, int64_t dial_id)
    : stub_(ProxyService::NewStub(channel)), dial_id_(dial_id) {}

Tunnel::DialResult Tunnel::dial(const std::shared_ptr<grpc::Channel>& channel,
                                const std::string& address, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  auto t = std::make_unique<Tunnel>(Private{}, channel, random_dial_id());
  // The stream is created and the DIAL_REQ written on the reader thread: creating a sync stream
  // can block while the channel connects, and the dial timeout must bound that too.
  t->reader_ = std::thread([p = t.get(), address] { p->run_stream(address); });

  std::unique_lock lock(t->mu_);
  bool answered =
      t->cv_.wait_until(lock, deadline, [&] { return t->dial_state_ != DialState::Pending; });
  if (!answered) {
    bool created = t->stream_created_;
    lock.unlock();
    // Tell the server to forget the pending dial, as konnectivity-client does on its backstop.
    if (created) t->write_packet(core::tunnel::make_close_dial(t->dial_id_), Clock::now() + 1s);
    return {nullptr, "dial timeout: no DIAL_RSP within " + ms_text(timeout)};
  }
  if (t->dial_state_ == DialState::Failed) return {nullptr, t->dial_error_};
  lock.unlock();
  return {std::move(t), {}};
}

Tunnel::~Tunnel() {
  bool finished;
  {
    std::lock_guard lock(mu_);
    discard_ = true;
    finished = stream_finished_;
  }
  cv_.notify_all();
  // Cancelling before the call exists is fine: gRPC cancels it as soon as it is created.
  if (!finished) ctx_.TryCancel();
  if (reader_.joinable()) reader_.join();
}

void Tunnel::run_stream(std::string address) {
  auto stream = stub_->Proxy(&ctx_);
  {
    std::lock_guard lock(mu_);
    stream_ = std::move(stream);
    stream_created_ = true;
  }
  // A failed write shows up as the end of the read side below.
  write_packet(core::tunnel::make_dial_request(address, dial_id_), Clock::time_point::max());

  Packet p;
  while (stream_->Read(&p)) {
    switch (p.type()) {
      case DIAL_RSP: {
        const auto& r = p.dialresponse();
        std::lock_guard lock(mu_);
        if (dial_state_ != DialState::Pending || r.random() != dial_id_) break;
        if (!r.error().empty()) {
          dial_state_ = DialState::Failed;
          dial_error_ = r.error();
        } else {
          dial_state_ = DialState::Established;
          connect_id_ = r.connectid();
        }
        cv_.notify_all();
        break;
      }
      case DATA: {
        if (p.data().connectid() != connect_id_ || p.data().data().empty()) break;
        std::string bytes = std::move(*p.mutable_data()->mutable_data());
        received_.fetch_add(bytes.size());
        std::unique_lock lock(mu_);
        // Holding the packet (not reading the next) is the backpressure: gRPC stops granting
        // HTTP/2 window once its own buffers fill.
        cv_.wait(lock, [&] { return discard_ || inbox_bytes_ < kInboxLimit; });
        if (discard_ || dial_state_ != DialState::Established) break;
        inbox_bytes_ += bytes.size();
        inbox_.push_back(std::move(bytes));
        cv_.notify_all();
        break;
      }
      case CLOSE_RSP: {
        std::lock_guard lock(mu_);
        if (!ended_ && dial_state_ == DialState::Established &&
            p.closeresponse().connectid() == connect_id_) {
          ended_ = true;
          end_reason_ = p.closeresponse().error();
        }
        cv_.notify_all();
        break;
      }
      case DIAL_CLS: {
        std::lock_guard lock(mu_);
        if (dial_state_ == DialState::Pending && p.closedial().random() == dial_id_) {
          dial_state_ = DialState::Failed;
          dial_error_ = "dial closed by the server (DIAL_CLS)";
        } else if (dial_state_ == DialState::Established && !ended_) {
          ended_ = true;
          end_reason_ = "dial closed by the server (DIAL_CLS)";
        }
        cv_.notify_all();
        break;
      }
      default:
        break;  // nothing else is meant for a frontend; ignored as konnectivity-client does
    }
  }

  grpc::Status status;
  {
    // The call is over, so a writer still inside Write() returns promptly; Finish waits for it.
    std::lock_guard wl(write_mu_);
    status = stream_->Finish();
  }
  std::lock_guard lock(mu_);
  stream_finished_ = true;
  status_ = status;
  if (dial_state_ == DialState::Pending) {
    dial_state_ = DialState::Failed;
    dial_error_ = "stream ended before DIAL_RSP: " + describe(status);
  }
  if (!ended_) {
    ended_ = true;
    end_reason_ = "stream ended: " + describe(status);
  }
  cv_.notify_all();
}

bool Tunnel::write_packet(const Packet& p, Clock::time_point deadline, bool more) {
  std::unique_lock<std::timed_mutex> lock(write_mu_, std::defer_lock);
  if (deadline == Clock::time_point::max()) {
    lock.lock();
  } else if (!lock.try_lock_until(deadline)) {
    return false;
  }
  if (write_failed_ || writes_done_) return false;
  grpc::WriteOptions opts;
  if (more) opts.set_buffer_hint();
  bool ok;
  if (deadline == Clock::time_point::max()) {
    ok = stream_->Write(p, opts);
  } else {
    // A bounded write (close()'s CLOSE_REQ) must not wait out a closed flow-control window:
    // past the deadline the call is cancelled, which ends the blocked Write.
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::thread watchdog([&] {
      std::unique_lock l(m);
      if (!cv.wait_until(l, deadline, [&] { return done; })) ctx_.TryCancel();
    });
    ok = stream_->Write(p, opts);
    {
      std::lock_guard l(m);
      done = true;
    }
    cv.notify_one();
    watchdog.join();
  }
  if (!ok) write_failed_ = true;
  return ok;
}

bool Tunnel::write(std::string_view bytes) {
  {
    std::lock_guard lock(mu_);
    if (ended_ || closed_ || dial_state_ != DialState::Established) return false;
  }
  Packet p;
  p.set_type(DATA);
  auto* data = p.mutable_data();
  data->set_connectid(connect_id_);
  for (size_t off = 0; off < bytes.size(); off += kMaxChunk) {
    size_t n = std::min(kMaxChunk, bytes.size() - off);
    data->set_data(bytes.data() + off, n);
    bool more = off + n < bytes.size();
    if (!write_packet(p, Clock::time_point::max(), more)) return false;
    sent_.fetch_add(n);
  }
  return true;
}

std::optional<std::string> Tunnel::read() {
  std::string out;
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !inbox_.empty() || ended_; });
  if (inbox_.empty()) return std::nullopt;
  out = std::move(inbox_.front());
  inbox_.pop_front();
  inbox_bytes_ -= out.size();
  lock.unlock();
  cv_.notify_all();
  return out;
}

Tunnel::ReadStatus Tunnel::read_for(std::string* out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !inbox_.empty() || ended_; })) {
    return ReadStatus::Timeout;
  }
  if (inbox_.empty()) return ReadStatus::Eof;
  *out = std::move(inbox_.front());
  inbox_.pop_front();
  inbox_bytes_ -= out->size();
  lock.unlock();
  cv_.notify_all();
  return ReadStatus::Data;
}

std::string Tunnel::close(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  bool send_close;
  {
    std::lock_guard lock(mu_);
    if (closed_) return close_result_;
    closed_ = true;
    discard_ = true;
    inbox_.clear();
    inbox_bytes_ = 0;
    send_close = !ended_ && dial_state_ == DialState::Established;
  }
  cv_.notify_all();

  // A failed CLOSE_REQ write usually means the server already finished the stream (after its
  // own CLOSE_RSP, which the reader thread may not have processed yet): wait for the reader
  // either way, so the outcome does not depend on which thread ran first.
  bool sent = !send_close || write_packet(core::tunnel::make_close_request(connect_id_), deadline);
  std::string result;
  {
    std::unique_lock lock(mu_);
    if (cv_.wait_until(lock, deadline, [&] { return ended_; })) {
      result = end_reason_;
    } else if (!sent) {
      result = "CLOSE_REQ not sent (stream blocked or broken)";
    } else {
      result = "no CLOSE_RSP within " + ms_text(timeout);
    }
  }
  end_stream(std::max(deadline, Clock::now() + 200ms));
  std::lock_guard lock(mu_);
  close_result_ = result;
  return result;
}

void Tunnel::end_stream(Clock::time_point deadline) {
  {
    std::unique_lock<std::timed_mutex> wl(write_mu_, std::defer_lock);
    bool created;
    {
      std::lock_guard lock(mu_);
      created = stream_created_;
    }
    if (created && wl.try_lock_until(deadline) && !writes_done_ && !write_failed_) {
      writes_done_ = true;
      stream_->WritesDone();
    }
  }
  bool finished;
  {
    std::unique_lock lock(mu_);
    finished = cv_.wait_until(lock, deadline, [&] { return stream_finished_; });
  }
  if (!finished) ctx_.TryCancel();
  if (reader_.joinable()) reader_.join();
}

bool Tunnel::ended() const {
  std::lock_guard lock(mu_);
  return ended_;
}

std::string Tunnel::end_reason() const {
  std::lock_guard lock(mu_);
  return end_reason_;
}

grpc::Status Tunnel::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

}  // namespace konn::testclient
