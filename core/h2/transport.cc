#include "core/h2/transport.h"

#include <openssl/ssl.h>

namespace konn::core::h2 {

namespace {

int select_h2(SSL* /*ssl*/, const unsigned char** out, unsigned char* outlen,
              const unsigned char* in, unsigned int inlen, void* /*arg*/) {
  // `in` is a list of length-prefixed protocol names.
  for (unsigned int i = 0; i < inlen;) {
    const unsigned int len = in[i];
    if (i + 1 + len > inlen) break;
    if (len == 2 && in[i + 1] == 'h' && in[i + 2] == '2') {
      *out = in + i + 1;
      *outlen = 2;
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + len;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

}  // namespace

std::vector<char>& thread_read_buffer() {
  static thread_local std::vector<char> buf(64 * 1024);
  return buf;
}

void enable_h2_alpn(asio::ssl::context& ctx) {
  SSL_CTX_set_alpn_select_cb(ctx.native_handle(), select_h2, nullptr);
}

void offer_h2_alpn(SSL* ssl) {
  static const unsigned char kH2[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl, kH2, sizeof(kH2));
}

std::string alpn_selected(SSL* ssl) {
  const unsigned char* p = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl, &p, &len);
  return p == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(p), len);
}

}  // namespace konn::core::h2
