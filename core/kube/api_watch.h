#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <asio/any_io_executor.hpp>

#include "core/io/asio_compat.h"
#include "core/kube/api_client.h"

namespace konn::core::kube {

// Splits a stream of concatenated JSON objects (what a Kubernetes JSON watch answers: one
// `{"type":...,"object":...}` per event, usually newline-separated, in chunks that need not end
// at an event's end) into whole documents. Whitespace between documents is skipped; anything
// else outside an object is an error, as is a document above `max_document` bytes.
class JsonDocumentSplitter {
 public:
  explicit JsonDocumentSplitter(size_t max_document = 4 * 1024 * 1024)
      : max_document_(max_document) {}

  // Appends `piece`; each document completed by it is appended to `out`. False (and error())
  // once the stream is malformed; nothing more is accepted then.
  bool feed(std::string_view piece, std::vector<std::string>* out);
  // Bytes of an unfinished document held.
  size_t pending() const { return current_.size(); }
  const std::string& error() const { return error_; }

 private:
  size_t max_document_;
  std::string current_;
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
  std::string error_;
};

// How a watch ended.
struct WatchEnd {
  int status = 0;     // HTTP status of the answer; 0 when no answer head arrived
  std::string body;   // the answer's body when the status was not 200 (a metav1.Status)
  std::string error;  // "" for an end the apiserver chose; otherwise the transport or format
                      // failure, the idle timeout, or "stopped by the caller"
};

struct WatchHandler {
  // The answer's status, once, as soon as the head arrived (any thread the executor runs).
  std::function<void(int status)> on_answer;
  // Each event document of a 200 answer (`{"type":"ADDED","object":{...}}`). Return false to
  // end the watch (its WatchEnd then has error "stopped by the caller").
  std::function<bool(std::string_view event)> on_event;
};

// A long-lived GET (the caller puts `watch=1` and the rest in `path`) on a connection of its
// own, read as a stream of JSON events until the apiserver ends it (its timeoutSeconds, a clean
// end of the chunked body) or it breaks. `connect_timeout` bounds dialling, TLS and the answer's
// head; `idle_timeout` any silence after it (a watch without events is silent: make it longer
// than the timeoutSeconds asked for). TCP keepalive probes a silent peer every 10 s after 30 s.
// Never throws. Cancellable by asio's per-operation cancellation (e.g. `watch || stop.wait()`).
// Meant, like api_request, for an io_context that carries no tunnel.
io::Awaitable<WatchEnd> api_watch(asio::any_io_executor ex, const ApiTarget& target,
                                  const std::string& path, WatchHandler handler,
                                  std::chrono::milliseconds connect_timeout,
                                  std::chrono::milliseconds idle_timeout);

}  // namespace konn::core::kube
