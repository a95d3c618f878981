#include "core/konnectivity/connect_reply.h"

#include "core/http/http1_writer.h"

namespace konn::core::konnectivity {

std::string connect_request(const std::string& address) {
  // kube-apiserver sends a Host header too (and the server ignores it); the target is what counts.
  http::Headers headers{{"Host", address}, {"User-Agent", "konn"}};
  return http::write_request_head("CONNECT", address, headers);
}

ConnectReply::Status ConnectReply::feed(std::string_view data) {
  if (!error_.empty()) return Status::Invalid;
  if (head_done_) {
    body_.append(data.substr(0, kMaxBody - std::min(kMaxBody, body_.size())));
    return body_status();
  }
  if (!no_body_set_) {
    // The answer to CONNECT has no body when it is 200 (the tunnel starts right after the head);
    // the parser must not wait for one. A refusal's body is read here, below.
    parser_.expect_no_body(true);
    no_body_set_ = true;
  }
  auto r = parser_.feed(data);
  if (r.status == http::Http1Parser::Status::Invalid) {
    error_ = "malformed answer to CONNECT: " + parser_.error();
    return Status::Invalid;
  }
  if (!parser_.head_ready()) return Status::NeedMore;
  head_done_ = true;
  std::string_view rest = data.substr(r.consumed);
  if (status() == 200) {
    leftover_ = std::string(rest);
    return Status::Established;
  }
  body_.append(rest.substr(0, kMaxBody));
  return body_status();
}

ConnectReply::Status ConnectReply::body_status() {
  const auto& len = parser_.head().content_length;
  if (body_.size() >= kMaxBody || (len && body_.size() >= *len)) {
    if (len && body_.size() > *len) body_.resize(static_cast<size_t>(*len));
    return Status::Failed;
  }
  return Status::NeedMore;
}

ConnectReply::Status ConnectReply::finish() {
  if (!error_.empty()) return Status::Invalid;
  if (!head_done_) {
    error_ = "proxy-server closed the connection before answering CONNECT";
    return Status::Invalid;
  }
  return status() == 200 ? Status::Established : Status::Failed;
}

std::string ConnectReply::describe() const {
  std::string b = body_;
  while (!b.empty() && (b.back() == '\n' || b.back() == '\r')) b.pop_back();
  std::string out = std::to_string(status()) + " " + reason();
  if (!b.empty()) out += ": " + b;
  return out;
}

}  // namespace konn::core::konnectivity
