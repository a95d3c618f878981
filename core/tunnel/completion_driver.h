#pragma once

#include <memory>
#include <string>
#include <thread>

#include <grpcpp/completion_queue.h>

namespace konn::core::tunnel {

// What a completion-queue operation carries as its tag: complete() runs on the driver's thread
// when the operation finished (`ok` as gRPC reports it).
class CompletionTag {
 public:
  virtual void complete(bool ok) = 0;

 protected:
  ~CompletionTag() = default;
};

// Pass every tag through this when starting an operation: `call->Read(p, hand_over(&tag))`.
// Under ThreadSanitizer it tells TSan that what this thread did so far happens before the
// completion runs (the driver acquires the tag): gRPC, not built with TSan, synchronises the
// hand-over where TSan cannot see it, and would otherwise hide or invent races. Free otherwise.
void* hand_over(CompletionTag* tag);

// A tag that calls a member function of its owner: `MemberTag<Stream, &Stream::on_read> tag{this}`.
template <class Owner, void (Owner::*Fn)(bool)>
class MemberTag final : public CompletionTag {
 public:
  explicit MemberTag(Owner* owner) : owner_(owner) {}
  void complete(bool ok) override { (owner_->*Fn)(ok); }

 private:
  Owner* owner_;
};

// One gRPC completion queue and the one thread that drains it, for streams on gRPC's
// completion-queue API. Why not the callback API the other streams use: gRPC 1.51 runs callback
// reactions on two "nexting" threads that take turns polling, so every completion wakes one
// thread to poll and hands the poll over to the other, about 5.5 thread switches per round trip
// per daemon (docs/performance.md). A queue drained by a single thread polls on that thread: one
// switch per completion, and none for a completion of an operation started on it.
//
// Every operation started on the queue must complete before the driver is destroyed: the
// destructor shuts the queue down and waits until its thread has drained it.
class CompletionDriver {
 public:
  // `name`: the thread's name (at most 15 characters), shown by top -H and /proc.
  explicit CompletionDriver(std::string name);
  // Drains a server's queue (grpc::ServerBuilder::AddCompletionQueue), for its async services.
  // The server must be shut down before the driver is destroyed.
  CompletionDriver(std::string name, std::unique_ptr<grpc::ServerCompletionQueue> cq);
  ~CompletionDriver();
  CompletionDriver(const CompletionDriver&) = delete;
  CompletionDriver& operator=(const CompletionDriver&) = delete;

  grpc::CompletionQueue* cq() { return cq_.get(); }
  // The server queue given to the constructor; null for a driver of client calls.
  grpc::ServerCompletionQueue* server_cq() { return server_cq_; }
  // Whether the caller runs on the driver's thread (a completion is being handled).
  bool on_driver_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void run();

  std::unique_ptr<grpc::CompletionQueue> cq_;
  grpc::ServerCompletionQueue* server_cq_ = nullptr;
  std::string name_;
  std::thread thread_;
};

}  // namespace konn::core::tunnel
