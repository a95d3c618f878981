#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <asio/any_io_executor.hpp>

#include "core/io/asio_compat.h"
#include "core/kube/api_client.h"
#include "core/kube/api_watch.h"

namespace konn::core::kube {

using SystemTime = std::chrono::system_clock::time_point;
using Labels = std::map<std::string, std::string>;

// The fields of a coordination.k8s.io/v1 Lease that the proxy-server publishes and the agent
// counts. Unknown fields of an object read from the apiserver are not kept.
struct Lease {
  std::string name;
  std::string resource_version;  // "" for a new object
  Labels labels;
  std::string holder_identity;
  std::optional<int> lease_duration_seconds;
  std::optional<SystemTime> acquire_time;
  std::optional<SystemTime> renew_time;
};

// metav1.MicroTime as the apiserver writes it: RFC 3339 in UTC with microseconds,
// "2006-01-02T15:04:05.000000Z".
std::string format_micro_time(SystemTime t);
// RFC 3339 with an optional fraction and a `Z` or `±hh:mm` offset; nullopt when malformed.
std::optional<SystemTime> parse_rfc3339(std::string_view text);

// The Lease as a JSON object (apiVersion, kind, metadata, spec) for POST and PUT.
std::string lease_to_json(const Lease& lease, const std::string& lease_namespace);
// One Lease object, or a LeaseList's items; nullopt when the body is not what it should be.
std::optional<Lease> parse_lease(std::string_view body);
// `resource_version`, when given, receives the list's metadata.resourceVersion (where a watch
// starts).
std::optional<std::vector<Lease>> parse_lease_list(std::string_view body,
                                                   std::string* resource_version = nullptr);
// The `reason` of a metav1.Status error body ("NotFound", "Conflict", ...), "" when none.
std::string status_reason(std::string_view body);

// One event of a Lease watch.
struct LeaseEvent {
  enum class Type { Added, Modified, Deleted, Bookmark, Error };
  Type type = Type::Error;
  std::optional<Lease> lease;    // Added, Modified, Deleted
  std::string resource_version;  // the object's (Bookmark: all it carries)
  int code = 0;                  // Error: the metav1.Status code (410: the version is too old)
  std::string reason;            // Error: its reason ("Expired", "Gone", ...)
  std::string message;           // Error: its message
};
// A watch event document; nullopt when it is not one (unknown type, or no usable object).
std::optional<LeaseEvent> parse_lease_event(std::string_view event);

// Upstream's IsLeaseValid: the renew time (else the acquire time) plus the duration lies after
// `now`. A lease with neither time, or without a duration, is expired.
bool lease_valid(const Lease& lease, SystemTime now);

// A label *set* ("k8s-app=konnectivity-server,tier=cp") as --lease-label takes it. Keys and
// values follow Kubernetes' syntax (an optional DNS-subdomain prefix and '/', then a name of at
// most 63 characters). Appends one message per problem to `errors` and returns what parsed.
// A key given twice keeps its last value, as upstream's ParseLabels does, with a line in
// `warnings` (when given) naming it.
Labels parse_label_set(std::string_view text, std::vector<std::string>* errors,
                       std::vector<std::string>* warnings = nullptr);
// "a=b,c=d", keys sorted (labels.FormatLabels): also a selector matching exactly that set.
std::string format_label_set(const Labels& labels);
// Percent-encoding for a URL query value (RFC 3986 unreserved characters kept).
std::string query_escape(std::string_view text);

// The Lease collection's path for `lease_namespace`; "" gives every namespace's (a list or a
// watch across the cluster, as client-go's Leases("") does).
std::string lease_collection_path(const std::string& lease_namespace);

// Lease calls on one namespace, each one HTTPS request bounded by `timeout`. Meant to run on an
// io_context that carries no tunnel (a token refresh may run an exec plugin).
class LeaseClient {
 public:
  LeaseClient(ApiTarget target, std::string lease_namespace, std::chrono::milliseconds timeout);

  struct Result {
    ApiResponse response;                     // status 0 with `error` set: no answer
    std::chrono::duration<double> latency{};  // seconds, for the latency histograms
    std::optional<Lease> lease;               // get/create/update: the object answered
    std::vector<Lease> items;                 // list
    std::string resource_version;             // list: the list's, where a watch starts
    std::string reason;                       // metav1.Status reason of an error answer
  };

  io::Awaitable<Result> get(asio::any_io_executor ex, const std::string& name) const;
  io::Awaitable<Result> create(asio::any_io_executor ex, const Lease& lease) const;
  // PUT: `lease.resource_version` makes it conditional (409 Conflict when stale).
  io::Awaitable<Result> update(asio::any_io_executor ex, const Lease& lease) const;
  // `selector` is a Kubernetes label selector, sent as ?labelSelector=. With `from_cache`, also
  // resourceVersion=0: the apiserver answers from its watch cache (cheap, possibly a moment
  // stale) instead of a quorum read from etcd.
  io::Awaitable<Result> list(asio::any_io_executor ex, const std::string& selector,
                             bool from_cache = false) const;
  // A watch of the leases matching `selector` from `resource_version` (the list's), with
  // bookmarks, which the apiserver ends after `timeout_seconds`. `on_event` gets each event that
  // parses (false ends the watch), `on_answer` the answer's status once. The dial and the
  // answer's head are bounded by this client's timeout, silence by timeout_seconds plus a minute.
  io::Awaitable<WatchEnd> watch(asio::any_io_executor ex, const std::string& selector,
                                const std::string& resource_version, int timeout_seconds,
                                std::function<void(int)> on_answer,
                                std::function<bool(const LeaseEvent&)> on_event) const;
  // DELETE with a resourceVersion precondition when `resource_version` is not empty.
  io::Awaitable<Result> remove(asio::any_io_executor ex, const std::string& name,
                               const std::string& resource_version) const;

  const std::string& lease_namespace() const { return namespace_; }

 private:
  io::Awaitable<Result> call(asio::any_io_executor ex, std::string method, std::string path,
                             std::string body) const;
  std::string collection() const;

  ApiTarget target_;
  std::string namespace_;
  std::chrono::milliseconds timeout_;
};

}  // namespace konn::core::kube
