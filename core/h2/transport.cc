#include "core/h2/transport.h"

#include <cerrno>
#include <cstdint>
#include <sys/socket.h>

#include <openssl/bio.h>
#include <openssl/err.h>
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

// A BIO on a descriptor the transport's socket owns: recv and send, with MSG_NOSIGNAL so that a
// peer that went away is an error (EPIPE), never a SIGPIPE, whatever the process does with it.
int fd_of(BIO* b) { return static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b))); }

int bio_read(BIO* b, char* out, int len) {
  BIO_clear_retry_flags(b);
  const ssize_t n = ::recv(fd_of(b), out, static_cast<size_t>(len), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
  if (n == 0) BIO_set_flags(b, BIO_FLAGS_IN_EOF);
  return static_cast<int>(n);
}

int bio_write(BIO* b, const char* in, int len) {
  BIO_clear_retry_flags(b);
  const ssize_t n = ::send(fd_of(b), in, static_cast<size_t>(len), MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(b);
  return static_cast<int>(n);
}

long bio_ctrl(BIO* b, int cmd, long /*num*/, void* ptr) {
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;
    case BIO_CTRL_EOF:  // OpenSSL tells a peer that vanished from one that closed cleanly
      return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0 ? 1 : 0;
    case BIO_C_GET_FD:
      if (ptr != nullptr) *static_cast<int*>(ptr) = fd_of(b);
      return fd_of(b);
    default:
      return 0;
  }
}

int bio_create(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

BIO_METHOD* socket_bio_method() {
  // Exception: made once and never freed, shared by every TLS session of the process.
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m =
        BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "konn fd");
    if (m != nullptr) {
      BIO_meth_set_read(m, bio_read);
      BIO_meth_set_write(m, bio_write);
      BIO_meth_set_ctrl(m, bio_ctrl);
      BIO_meth_set_create(m, bio_create);
    }
    return m;
  }();
  return method;
}

// SSL_get_error reads the thread's error queue, so it must be empty before each call. Clearing
// it costs about 200 ns (OpenSSL 3 resets all 16 slots); looking costs about 20, and it is
// nearly always empty: it is cleared only when something is in it.
void clear_ssl_errors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

std::error_code last_ssl_error() {
  return {static_cast<int>(ERR_get_error()), asio::error::get_ssl_category()};
}

}  // namespace

TlsEngine::TlsEngine(SSL_CTX* ctx, int fd) : ssl_(SSL_new(ctx)) {
  BIO* bio = socket_bio_method() == nullptr ? nullptr : BIO_new(socket_bio_method());
  if (ssl_ == nullptr || bio == nullptr) {
    const std::error_code ec = last_ssl_error();
    BIO_free(bio);
    SSL_free(ssl_);
    throw std::system_error(ec, "TLS session");
  }
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  SSL_set_bio(ssl_, bio, bio);  // one reference, owned by the session
  // Partial writes: SSL_write returns after each record, so a write that the socket cannot take
  // whole is resumed where it stopped. Released buffers: an idle session holds no record buffer.
  SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                         SSL_MODE_RELEASE_BUFFERS);
  // One recv takes whatever has arrived, not a record header and then its body.
  SSL_set_read_ahead(ssl_, 1);
}

TlsEngine::~TlsEngine() { SSL_free(ssl_); }

TlsEngine::Want TlsEngine::want(int ret, std::error_code& ec) {
  const int saved_errno = errno;
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
      return Want::Read;
    case SSL_ERROR_WANT_WRITE:
      return Want::Write;
    case SSL_ERROR_ZERO_RETURN:  // close_notify
      ec = asio::error::eof;
      return Want::Nothing;
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error() != 0) {
        ec = last_ssl_error();
      } else if (saved_errno != 0) {
        ec = std::error_code(saved_errno, asio::error::get_system_category());
      } else {
        ec = asio::ssl::error::stream_truncated;  // the connection ended without close_notify
      }
      return Want::Nothing;
    case SSL_ERROR_SSL:
      if (ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        ERR_clear_error();
        ec = asio::ssl::error::stream_truncated;
      } else {
        ec = last_ssl_error();
      }
      return Want::Nothing;
    default:
      ec = last_ssl_error();
      if (!ec) ec = asio::ssl::error::unspecified_system_error;
      return Want::Nothing;
  }
}

TlsEngine::Want TlsEngine::handshake(bool server, std::error_code& ec) {
  if (!started_) {
    if (server) {
      // No session tickets: neither konn's clients nor upstream's agents resume a session, and
      // each TLS 1.3 ticket copies the session, the client's certificate decoded again: with
      // OpenSSL's two per handshake, about a fifth of a server's CPU while agents reconnect
      // after a restart (issue 42), and bytes every client reads for nothing.
      SSL_set_num_tickets(ssl_, 0);
      SSL_set_options(ssl_, SSL_OP_NO_TICKET);
      SSL_set_accept_state(ssl_);
    } else {
      SSL_set_connect_state(ssl_);
    }
    started_ = true;
  }
  clear_ssl_errors();
  errno = 0;
  const int ret = SSL_do_handshake(ssl_);
  return ret == 1 ? Want::Nothing : want(ret, ec);
}

TlsEngine::Want TlsEngine::read(char* buf, size_t len, size_t& n, std::error_code& ec) {
  clear_ssl_errors();
  errno = 0;
  const int ret = SSL_read_ex(ssl_, buf, len, &n);
  if (ret == 1) return Want::Nothing;
  n = 0;
  return want(ret, ec);
}

TlsEngine::Want TlsEngine::write(const char* buf, size_t len, size_t& n, std::error_code& ec) {
  clear_ssl_errors();
  errno = 0;
  const int ret = SSL_write_ex(ssl_, buf, len, &n);
  if (ret == 1) return Want::Nothing;
  n = 0;
  return want(ret, ec);
}

bool TlsEngine::pending() const { return SSL_has_pending(ssl_) == 1; }

void enable_h2_alpn(asio::ssl::context& ctx) {
  SSL_CTX_set_alpn_select_cb(ctx.native_handle(), select_h2, nullptr);
}

void offer_h2_alpn(SSL* ssl) {
  static const unsigned char kH2[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl, kH2, sizeof(kH2));
}

bool offer_alpn(SSL* ssl, const std::vector<std::string>& protos) {
  std::string wire;
  for (const auto& p : protos) {
    if (p.empty() || p.size() > 255) return false;
    wire += static_cast<char>(p.size());
    wire += p;
  }
  // Exception: OpenSSL takes the wire bytes as unsigned char.
  return SSL_set_alpn_protos(ssl, reinterpret_cast<const unsigned char*>(wire.data()),  // NOLINT
                             static_cast<unsigned int>(wire.size())) == 0;
}

std::string alpn_selected(SSL* ssl) {
  const unsigned char* p = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl, &p, &len);
  return p == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(p), len);
}

}  // namespace konn::core::h2
