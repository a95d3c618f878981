#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl/context.hpp>

namespace konn::testsupport {

// A TLS apiserver stand-in on 127.0.0.1 (one request per connection, as konn's client sends
// them). It answers:
//  - authentication.k8s.io/v1 TokenReviews: each token maps to a behaviour (agent admission);
//  - coordination.k8s.io/v1 Leases: create (POST), get, update (PUT, 409 on a stale
//    resourceVersion), list (labelSelector with `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-joined),
//    delete (404, or 409 when a resourceVersion precondition does not match), and watch
//    (`watch=1`: a chunked stream of ADDED/MODIFIED/DELETED events after `resourceVersion`, the
//    current objects as ADDED when it is 0 or absent, a BOOKMARK every second when
//    `allowWatchBookmarks=true`, an ERROR 410 Expired event for a version older than the last
//    compact(), a clean end after `timeoutSeconds`). Errors are metav1.Status bodies with
//    `reason` and `code`, as the real apiserver sends them.
// Every call must carry the caller's bearer token (`caller_token`), else 401.
class FakeApiserver {
 public:
  enum class Answer {
    Authenticated,  // authenticated as `username`
    Unauthenticated,
    ServerError,  // HTTP 500
    Slow,         // answers only after `slow_delay`
  };
  struct TokenRule {
    Answer answer = Answer::Unauthenticated;
    std::string username;
  };

  FakeApiserver(const std::string& cert_file, const std::string& key_file,
                std::string caller_token);
  ~FakeApiserver();
  FakeApiserver(const FakeApiserver&) = delete;
  FakeApiserver& operator=(const FakeApiserver&) = delete;

  void set_token(const std::string& token, TokenRule rule);
  uint16_t port() const { return port_; }
  int reviews() const { return reviews_.load(); }
  // When each TokenReview (`reviews`) or each lease call (else) arrived, in arrival order.
  std::vector<std::chrono::steady_clock::time_point> call_times(bool reviews) const;
  // Calls (reviews and lease calls) whose caller did not present `caller_token`.
  int unauthorized_callers() const { return unauthorized_.load(); }
  // Writes a kubeconfig for this server (CA file, bearer token) and returns its path.
  std::string write_kubeconfig(const std::string& dir, const std::string& ca_file) const;

  // Leases, as a test sees them. `lease_json` is a Lease object (metadata.name required); its
  // resourceVersion is replaced by a fresh one. Returns the stored object.
  std::string put_lease(const std::string& lease_namespace, const std::string& lease_json);
  std::optional<std::string> lease(const std::string& lease_namespace,
                                   const std::string& name) const;
  std::vector<std::string> lease_names(const std::string& lease_namespace) const;
  void delete_lease(const std::string& lease_namespace, const std::string& name);
  // Lease calls answered so far, by verb ("create", "get", "update", "list", "delete",
  // "watch"), and "list-from-cache": the lists that asked for resourceVersion=0 (the watch
  // cache).
  int lease_calls(const std::string& verb) const;
  // While set, every lease call is answered 503 ServiceUnavailable, and open watches are cut.
  std::atomic<bool> lease_outage{false};
  // While set, watches are answered 403 Forbidden (a role without the `watch` verb).
  std::atomic<bool> refuse_watches{false};
  // Cuts every open watch (the connection closes mid-stream, as when an apiserver dies).
  void break_watches();
  // Forgets the events so far: a watch from an older version then gets 410 Expired.
  void compact();
  // The next this many watches get 410 Expired whatever their version (as after a compaction
  // the watcher did not see).
  std::atomic<int> expire_watches{0};
  // Watches streaming now.
  int open_watches() const { return open_watches_.load(); }

  std::chrono::milliseconds slow_delay{30000};

 private:
  struct Request;
  void serve(asio::ip::tcp::socket s);
  // {status, body}
  std::pair<int, std::string> review(const Request& r);
  std::pair<int, std::string> leases(const Request& r);
  // Streams a watch on `s` (any TLS stream type; defined in the .cc).
  template <typename Stream>
  void stream_watch(Stream& s, const Request& r, const std::string& ns);
  // Records a change for the watches (mu_ held). `object` carries its resourceVersion.
  void record_locked(const std::string& ns, const char* type, const std::string& object);

  std::string caller_token_;
  asio::io_context ctx_;
  asio::ssl::context tls_{asio::ssl::context::tls_server};
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  mutable std::mutex mu_;
  std::map<std::string, TokenRule> tokens_;
  std::map<std::string, std::map<std::string, std::string>> leases_;  // ns -> name -> JSON
  std::map<std::string, int> lease_calls_;
  struct Event {
    std::string ns;
    std::string type;
    std::string object;  // JSON
    uint64_t version = 0;
  };
  std::vector<Event> events_;      // since the last compact()
  uint64_t compacted_ = 0;         // versions up to this one are forgotten
  uint64_t watch_generation_ = 0;  // break_watches() moves it
  std::condition_variable changed_;
  std::atomic<int> open_watches_{0};
  std::vector<std::chrono::steady_clock::time_point> review_times_, lease_times_;
  uint64_t next_version_ = 1;
  std::atomic<int> reviews_{0};
  std::atomic<int> unauthorized_{0};
  std::atomic<int> active_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace konn::testsupport

// The end-to-end suites name it konn::e2e::FakeApiserver.
namespace konn::e2e {
using testsupport::FakeApiserver;
}  // namespace konn::e2e
