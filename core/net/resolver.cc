#include "core/net/resolver.h"

#include <ares.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include <asio/error.hpp>
#include <asio/ip/address.hpp>

namespace konn::core::net {
namespace {

std::error_code map_status(int status) {
  switch (status) {
    case ARES_SUCCESS:
      return {};
    case ARES_ENOTFOUND:
    case ARES_ENODATA:
    case ARES_ENONAME:
      return asio::error::host_not_found;
    case ARES_ETIMEOUT:
    case ARES_ESERVFAIL:
    case ARES_ECONNREFUSED:
    case ARES_EREFUSED:
      return asio::error::host_not_found_try_again;
    default:
      return asio::error::no_recovery;
  }
}

void library_init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    int rc = ares_library_init(ARES_LIB_INIT_ALL);
    if (rc != ARES_SUCCESS) {
      throw std::system_error(asio::error::no_recovery,
                              std::string("c-ares init: ") + ares_strerror(rc));
    }
  });
}

}  // namespace

// One socket c-ares asked us to watch. The descriptor never owns the fd (c-ares closes it).
struct Resolver::Watch {
  explicit Watch(const asio::any_io_executor& ex, int socket) : desc(ex, socket), fd(socket) {}
  asio::posix::stream_descriptor desc;
  int fd;
  bool want_read = false;
  bool want_write = false;
  bool reading = false;
  bool writing = false;
  bool active = true;
};

// One outstanding ares_getaddrinfo. Shared between the awaiting coroutine and the c-ares
// callback, so either may finish first.
struct Resolver::Lookup {
  explicit Lookup(const asio::any_io_executor& ex) : wake(ex, asio::steady_timer::time_point::max()) {}
  asio::steady_timer wake;  // cancelled when the answer is in
  bool done = false;
  Result result;
  Resolver* owner = nullptr;
};

Resolver::Resolver(asio::any_io_executor ex, Options options) : ex_(ex), timer_(ex) {
  library_init_once();
  ares_options opts{};
  int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
  opts.sock_state_cb = [](void* data, ares_socket_t fd, int r, int w) {
    on_socket_state(data, fd, r, w);
  };
  opts.sock_state_cb_data = this;
  opts.timeout = static_cast<int>(options.timeout.count());
  opts.tries = std::max(1, options.tries);
  int rc = ares_init_options(&channel_, &opts, mask);
  if (rc != ARES_SUCCESS) {
    throw std::system_error(asio::error::no_recovery,
                            std::string("c-ares channel: ") + ares_strerror(rc));
  }
  if (!options.servers.empty()) {
    std::string csv;
    for (const auto& s : options.servers) csv += (csv.empty() ? "" : ",") + s;
    rc = ares_set_servers_ports_csv(channel_, csv.c_str());
    if (rc != ARES_SUCCESS) {
      ares_destroy(channel_);
      throw std::system_error(asio::error::invalid_argument,
                              "dns servers \"" + csv + "\": " + ares_strerror(rc));
    }
  }
}

Resolver::~Resolver() {
  *alive_ = false;
  timer_.cancel();
  // Completes every outstanding lookup with ARES_EDESTRUCTION (their coroutines get no_recovery)
  // and reports every socket closed, which releases our descriptors.
  ares_destroy(channel_);
  for (auto& [fd, w] : watches_) {
    w->active = false;
    w->desc.release();
  }
}

void Resolver::on_socket_state(void* self, int fd, int readable, int writable) {
  static_cast<Resolver*>(self)->update_watch(fd, readable != 0, writable != 0);
}

void Resolver::update_watch(int fd, bool readable, bool writable) {
  auto it = watches_.find(fd);
  if (!readable && !writable) {
    // c-ares is about to close the fd: let go of it without closing.
    if (it != watches_.end()) {
      it->second->active = false;
      it->second->desc.release();
      watches_.erase(it);
    }
    return;
  }
  if (it == watches_.end()) {
    it = watches_.emplace(fd, std::make_shared<Watch>(ex_, fd)).first;
  }
  auto w = it->second;
  w->want_read = readable;
  w->want_write = writable;
  if (w->want_read && !w->reading) arm(w, false);
  if (w->want_write && !w->writing) arm(w, true);
}

void Resolver::arm(const std::shared_ptr<Watch>& w, bool for_write) {
  (for_write ? w->writing : w->reading) = true;
  auto type = for_write ? asio::posix::stream_descriptor::wait_write
                        : asio::posix::stream_descriptor::wait_read;
  w->desc.async_wait(type, [this, w, for_write, alive = alive_](std::error_code ec) {
    (for_write ? w->writing : w->reading) = false;
    if (ec || !*alive || !w->active) return;
    if (for_write) {
      process(ARES_SOCKET_BAD, w->fd);
    } else {
      process(w->fd, ARES_SOCKET_BAD);
    }
    // c-ares may have closed the socket (inactive now) or still want the same event.
    if (w->active && w->want_read && !w->reading) arm(w, false);
    if (w->active && w->want_write && !w->writing) arm(w, true);
  });
}

void Resolver::process(int read_fd, int write_fd) {
  ares_process_fd(channel_, read_fd, write_fd);
  reschedule_timer();
}

void Resolver::reschedule_timer() {
  timeval tv{};
  if (ares_timeout(channel_, nullptr, &tv) == nullptr) {
    timer_.cancel();
    return;
  }
  timer_.expires_after(std::chrono::seconds(tv.tv_sec) + std::chrono::microseconds(tv.tv_usec));
  timer_.async_wait([this, alive = alive_](std::error_code ec) {
    if (ec || !*alive) return;
    process(ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // lets c-ares notice its timeouts
  });
}

void Resolver::on_lookup_done(void* arg, int status, int /*timeouts*/, ares_addrinfo* res) {
  // Exception: c-ares hands back the void* we gave it; we reclaim ownership here.
  std::unique_ptr<std::shared_ptr<Lookup>> owned(static_cast<std::shared_ptr<Lookup>*>(arg));
  auto& lookup = **owned;
  lookup.result.ec = map_status(status);
  if (res != nullptr) {
    for (auto* n = res->nodes; n != nullptr; n = n->ai_next) {
      asio::ip::address a;
      if (n->ai_family == AF_INET) {
        auto* sin = reinterpret_cast<sockaddr_in*>(n->ai_addr);
        asio::ip::address_v4::bytes_type b;
        std::memcpy(b.data(), &sin->sin_addr, 4);
        a = asio::ip::address_v4(b);
      } else if (n->ai_family == AF_INET6) {
        auto* sin6 = reinterpret_cast<sockaddr_in6*>(n->ai_addr);
        asio::ip::address_v6::bytes_type b;
        std::memcpy(b.data(), &sin6->sin6_addr, 16);
        a = asio::ip::address_v6(b, sin6->sin6_scope_id);
      } else {
        continue;
      }
      auto& v = lookup.result.addresses;
      if (std::find(v.begin(), v.end(), a) == v.end()) v.push_back(a);
    }
    ares_freeaddrinfo(res);
  }
  if (!lookup.result.ec && lookup.result.addresses.empty()) {
    lookup.result.ec = asio::error::host_not_found;
  }
  lookup.done = true;
  if (lookup.owner != nullptr) --lookup.owner->pending_;
  lookup.wake.cancel();
}

io::Awaitable<Resolver::Result> Resolver::resolve(std::string host, Family family) {
  std::error_code ec;
  auto literal = asio::ip::make_address(host, ec);
  if (!ec) {
    Result r;
    bool fits = family == Family::Any || (family == Family::V4 && literal.is_v4()) ||
                (family == Family::V6 && literal.is_v6());
    if (fits) {
      r.addresses.push_back(literal);
    } else {
      r.ec = asio::error::host_not_found;
    }
    co_return r;
  }
  auto lookup = std::make_shared<Lookup>(ex_);
  lookup->owner = this;
  ++pending_;
  ares_addrinfo_hints hints{};
  hints.ai_family = family == Family::V4 ? AF_INET : family == Family::V6 ? AF_INET6 : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = ARES_AI_NOSORT;
  // Exception: ownership crosses the C API as a void*; on_lookup_done takes it back (c-ares
  // calls it exactly once, also on channel destruction).
  auto* arg = std::make_unique<std::shared_ptr<Lookup>>(lookup).release();
  ares_getaddrinfo(channel_, host.c_str(), nullptr, &hints, &Resolver::on_lookup_done, arg);
  reschedule_timer();
  if (!lookup->done) {
    co_await lookup->wake.async_wait(io::use_nothrow);
  }
  if (!lookup->done) {
    Result aborted;
    aborted.ec = asio::error::operation_aborted;
    co_return aborted;
  }
  co_return lookup->result;
}

}  // namespace konn::core::net
