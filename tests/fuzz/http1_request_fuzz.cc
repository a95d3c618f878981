// HTTP/1.1 request heads and bodies from clients: kubeproxy-http's listener (then its kubectl
// filters), its CONNECT mode and the proxy-server's HTTPConnect frontend all read them with
// core/http's parser. Input: [piece size][head limit][the byte stream...].

#include "core/http/http1_parser.h"
#include "kubeproxy-http/request_filter.h"
#include "tests/fuzz/http1_head_check.h"

using konn::core::http::Http1Parser;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  konn::fuzz::FuzzInput in(data, size);
  size_t piece = 1 + in.byte() * 8;
  size_t max_head = 64 + static_cast<size_t>(in.byte()) * 64;
  // kubectl proxy's default filters, as kubeproxy-http applies them to every request head.
  static const konn::kubeproxy::RequestFilter filter(
      {"^.*"}, {"^/api/.*/pods/.*/exec", "^/api/.*/pods/.*/attach"},
      {"^localhost$", "^127\\.0\\.0\\.1$", "^\\[::1\\]$"}, {"^$"});
  Http1Parser parser(Http1Parser::Kind::Request, max_head);
  konn::fuzz::feed_in_pieces(parser, in.rest(), piece, [](const auto& head) {
    KONN_FUZZ_CHECK(!head.method.empty());
    const std::string* host = head.find("Host");
    bool ok = filter.accept(head.method, head.target, host != nullptr ? *host : "");
    (void)ok;
    std::string_view h = konn::kubeproxy::RequestFilter::strip_port(host != nullptr ? *host : "");
    KONN_FUZZ_CHECK(host == nullptr || h.size() <= host->size());
    // The path readings the filter builds: cleaning is idempotent and agrees with is_clean, and
    // decoding never grows a path.
    using konn::kubeproxy::RequestFilter;
    std::string path = head.target.substr(0, head.target.find('?'));
    std::string clean = RequestFilter::clean_path(path);
    KONN_FUZZ_CHECK(RequestFilter::is_clean(clean));
    KONN_FUZZ_CHECK(RequestFilter::clean_path(clean) == clean);
    KONN_FUZZ_CHECK(RequestFilter::is_clean(path) == (clean == path));
    std::string decoded = RequestFilter::percent_decode(path);
    KONN_FUZZ_CHECK(decoded.size() <= path.size());
    KONN_FUZZ_CHECK(!RequestFilter::valid_escapes(path) || RequestFilter::has_escape(path) ==
                                                               (decoded.size() < path.size()));
    (void)head.has_token("Connection", "upgrade");
  });
  return 0;
}
