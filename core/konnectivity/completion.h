#pragma once

#include <cstddef>
#include <memory>
#include <system_error>
#include <type_traits>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/associated_executor.hpp>
#include <asio/execution.hpp>
#include <asio/post.hpp>

namespace konn::core::konnectivity {

// The completion handler of one pending read or write, type-erased so a tunnel can hold it until
// bytes (or an error) arrive. Asio 1.22 has no any_completion_handler; handlers are move-only,
// so std::function cannot hold them.
class Completion {
 public:
  Completion() = default;
  template <typename Handler>
  Completion(Handler&& handler, const asio::any_io_executor& io)
      : impl_(std::make_unique<Impl<std::decay_t<Handler>>>(std::forward<Handler>(handler), io)) {}

  explicit operator bool() const { return impl_ != nullptr; }

  // Runs the handler with (ec, n) through its associated executor, never inline (the caller may
  // still be inside the operation's initiation). Leaves this empty. No-op when empty.
  void complete(std::error_code ec, size_t n) {
    if (!impl_) return;
    auto impl = std::move(impl_);
    impl->post(ec, n);
  }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual void post(std::error_code ec, size_t n) = 0;
  };
  template <typename Handler>
  struct Impl final : Base {
    Impl(Handler&& h, const asio::any_io_executor& io)
        : handler(std::move(h)),
          io_ex(io),
          work(asio::prefer(io, asio::execution::outstanding_work.tracked)) {}
    void post(std::error_code ec, size_t n) override {
      auto ex = asio::get_associated_executor(handler, io_ex);
      asio::post(ex, [h = std::move(handler), ec, n]() mutable { std::move(h)(ec, n); });
    }
    Handler handler;
    asio::any_io_executor io_ex;
    asio::any_io_executor work;  // a pending operation keeps its io_context running, as Asio's do
  };
  std::unique_ptr<Base> impl_;
};

}  // namespace konn::core::konnectivity
