#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <unistd.h>
#include <utility>

#include <asio/basic_socket_acceptor.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include "core/io/worker_pool.h"

namespace konn::core::net {

// Accepts on a listening socket, each connection with a WorkerPool placement chosen before the
// accept (its descriptor lease taken first, the socket registered on that worker at once).
// When what decides the placement changes while an accept waits (an agent connected),
// reconsider() cancels that accept and places it again.
//
// With `follow`, the listening socket itself moves to the worker of the next placement before it
// waits: the thread that will serve a connection is the one woken to accept it, and begins it
// in the same wake-up. (Accepting on one thread and handing the connection to another costs
// every new connection one more wake-up and context switch, on the path of every dial.) With a
// stable placement, such as the worker of the only agent's connection, it moves once. Without
// `follow` it stays on the context it was made on and only the accepted sockets go elsewhere.
//
// Threads: everything but stop() and reconsider() runs on the listening socket's current context
// ("home"); a move releases the descriptor there and registers it on the next home, under mu_, so
// stop() always finds where to close it.
template <typename Protocol>
class PlacedAcceptor : public std::enable_shared_from_this<PlacedAcceptor<Protocol>> {
 public:
  using Acceptor = asio::basic_socket_acceptor<Protocol>;
  using Socket = typename Protocol::socket;
  using Placement = io::WorkerPool::Placement;
  // The placement of the next connection; called on the home thread before each accept.
  using Place = std::function<Placement()>;
  // One accepted connection, on the home thread, which is placement.ctx's when following (so
  // asio::dispatch to placement.ctx runs inline).
  using OnAccept = std::function<void(Socket, Placement)>;
  // accept() failed (out of descriptors, most likely); the next try is 100 ms later.
  using OnError = std::function<void(const std::error_code&)>;

  // `listening` is bound and listening, made on `home`.
  PlacedAcceptor(asio::io_context& home, Acceptor listening, bool follow, Place place,
                 OnAccept on_accept, OnError on_error)
      : home_(&home),
        acceptor_(std::move(listening)),
        protocol_(acceptor_->local_endpoint().protocol()),
        follow_(follow),
        place_(std::move(place)),
        on_accept_(std::move(on_accept)),
        on_error_(std::move(on_error)) {}

  PlacedAcceptor(const PlacedAcceptor&) = delete;
  PlacedAcceptor& operator=(const PlacedAcceptor&) = delete;

  void start() {
    asio::io_context* home = current_home();
    asio::post(*home, [self = this->shared_from_this()] { self->next(); });
  }

  // Closes the listening socket on its home thread and waits for that (inline when called there
  // or when that context no longer runs). No OnAccept starts after this returned. Idempotent.
  void stop() {
    asio::io_context* home;
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
      home = home_;
    }
    if (home->get_executor().running_in_this_thread() || home->stopped()) {
      close_here();
      return;
    }
    std::promise<void> done;
    asio::post(*home, [self = this->shared_from_this(), &done] {
      self->close_here();
      done.set_value();
    });
    done.get_future().wait();
  }

  // The placement of the next connection may have changed (an agent connected, say): an accept
  // already waiting with the old one is cancelled and placed again. Any thread; nothing once
  // stopped. (A placement is chosen before its accept waits, so without this the first
  // connection after such a change would still go where the old choice said.)
  void reconsider() {
    asio::io_context* home = current_home();
    asio::post(*home, [self = this->shared_from_this(), home] { self->reconsider_here(home); });
  }

  // Where the listening socket is now (its home; any thread).
  asio::io_context* current_home() {
    std::lock_guard lock(mu_);
    return home_;
  }

 private:
  bool stopped() {
    std::lock_guard lock(mu_);
    return stopped_;
  }

  // On `posted_to`, which was the home when reconsider() posted this.
  void reconsider_here(asio::io_context* posted_to) {
    asio::io_context* home;
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      home = home_;
    }
    if (home != posted_to) {  // it moved since: the accept it now waits with may be stale too
      asio::post(*home, [self = this->shared_from_this(), home] { self->reconsider_here(home); });
      return;
    }
    if (!waiting_) return;  // between accepts: next() places the next one afresh anyway
    replace_ = true;
    std::error_code ignored;
    acceptor_->cancel(ignored);
  }

  // On the home thread.
  void close_here() {
    if (retry_) retry_->cancel();
    std::error_code ignored;
    if (acceptor_) acceptor_->close(ignored);
  }

  // On the home thread: place the next connection, move there if following, then accept.
  void next() {
    if (stopped()) {  // before place_(), which may use what the owner frees after stop()
      close_here();
      return;
    }
    Placement placement = place_();
    if (follow_ && &placement.ctx != home_) {
      std::unique_lock lock(mu_);
      if (stopped_) {
        lock.unlock();
        close_here();
        return;
      }
      std::error_code ec;
      auto fd = acceptor_->release(ec);
      if (!ec) {
        // Registering on another context's reactor is safe from any thread; the new home
        // touches the acceptor only after the post below.
        acceptor_.reset();
        retry_.reset();
        home_ = &placement.ctx;
        acceptor_.emplace(*home_);
        acceptor_->assign(protocol_, fd, ec);
        lock.unlock();
        if (ec) {
          // Cannot happen short of the kernel refusing the epoll registration: the listener
          // stops rather than spin, and says why.
          on_error_(ec);
          ::close(fd);
          return;
        }
        asio::post(*home_, [self = this->shared_from_this(), p = std::move(placement)]() mutable {
          self->accept(std::move(p));
        });
        return;
      }
      // A descriptor that cannot be released (cannot happen): accept here, as without follow.
    }
    accept(std::move(placement));
  }

  // On the home thread.
  void accept(Placement placement) {
    if (stopped()) {
      close_here();
      return;
    }
    auto& ctx = placement.ctx;
    waiting_ = true;
    replace_ = false;
    acceptor_->async_accept(ctx, [self = this->shared_from_this(), p = std::move(placement)](
                                     std::error_code ec, Socket socket) mutable {
      self->waiting_ = false;
      if (self->stopped()) return;
      if (ec == asio::error::operation_aborted) {
        if (std::exchange(self->replace_, false)) self->next();  // reconsider(): place again
        return;
      }
      if (ec) {
        self->on_error_(ec);
        self->retry_.emplace(*self->current_home(), std::chrono::milliseconds(100));
        self->retry_->async_wait([self](std::error_code e) {
          if (!e && !self->stopped()) self->next();
        });
        return;
      }
      self->on_accept_(std::move(socket), std::move(p));
      self->next();
    });
  }

  std::mutex mu_;
  asio::io_context* home_;  // written under mu_, on the old home's thread
  bool stopped_ = false;    // under mu_
  std::optional<Acceptor> acceptor_;
  Protocol protocol_;
  std::optional<asio::steady_timer> retry_;  // on the home context
  bool waiting_ = false;                     // an accept is pending (home thread)
  bool replace_ = false;                     // it was cancelled by reconsider() (home thread)
  const bool follow_;
  Place place_;
  OnAccept on_accept_;
  OnError on_error_;
};

}  // namespace konn::core::net
