#include "core/tunnel/completion_driver.h"

#include <pthread.h>

#if defined(__SANITIZE_THREAD__)
#define KONN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KONN_TSAN 1
#endif
#endif

#ifdef KONN_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace konn::core::tunnel {

void* hand_over(CompletionTag* tag) {
#ifdef KONN_TSAN
  __tsan_release(tag);
#endif
  return tag;
}

CompletionDriver::CompletionDriver(std::string name)
    : cq_(std::make_unique<grpc::CompletionQueue>()), name_(std::move(name)) {
  thread_ = std::thread([this] { run(); });
}

CompletionDriver::CompletionDriver(std::string name,
                                   std::unique_ptr<grpc::ServerCompletionQueue> cq)
    : server_cq_(cq.get()), name_(std::move(name)) {
  cq_ = std::move(cq);
  thread_ = std::thread([this] { run(); });
}

CompletionDriver::~CompletionDriver() {
  cq_->Shutdown();
  thread_.join();
}

void CompletionDriver::run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  void* tag = nullptr;
  bool ok = false;
  while (cq_->Next(&tag, &ok)) {
#ifdef KONN_TSAN
    __tsan_acquire(tag);
#endif
    static_cast<CompletionTag*>(tag)->complete(ok);
  }
}

}  // namespace konn::core::tunnel
