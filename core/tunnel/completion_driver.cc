#include "core/tunnel/completion_driver.h"

#include <pthread.h>

namespace konn::core::tunnel {

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
  while (cq_->Next(&tag, &ok)) static_cast<CompletionTag*>(tag)->complete(ok);
}

}  // namespace konn::core::tunnel
