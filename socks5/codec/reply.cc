#include "socks5/codec/reply.h"

#include <asio/error.hpp>

#include "core/error/errc.h"
#include "socks5/codec/greeting.h"

namespace konn::socks5::codec {

const char* to_string(ReplyCode c) {
  switch (c) {
    case ReplyCode::Succeeded:
      return "succeeded";
    case ReplyCode::GeneralFailure:
      return "general-failure";
    case ReplyCode::NotAllowed:
      return "not-allowed";
    case ReplyCode::NetworkUnreachable:
      return "network-unreachable";
    case ReplyCode::HostUnreachable:
      return "host-unreachable";
    case ReplyCode::ConnectionRefused:
      return "connection-refused";
    case ReplyCode::TtlExpired:
      return "ttl-expired";
    case ReplyCode::CommandNotSupported:
      return "command-not-supported";
    case ReplyCode::AddressTypeNotSupported:
      return "address-type-not-supported";
  }
  return "unknown";
}

std::vector<uint8_t> encode_reply(ReplyCode code, const asio::ip::address& bound, uint16_t port) {
  std::vector<uint8_t> out{kSocksVersion, static_cast<uint8_t>(code), 0x00};
  out.reserve(22);
  append_endpoint(out, bound, port);
  return out;
}

std::vector<uint8_t> encode_failure(ReplyCode code) {
  return encode_reply(code, asio::ip::address_v4::any(), 0);
}

ReplyCode reply_for_error(std::error_code ec) {
  if (ec == asio::error::connection_refused) return ReplyCode::ConnectionRefused;
  if (ec == asio::error::network_unreachable || ec == asio::error::network_down) {
    return ReplyCode::NetworkUnreachable;
  }
  if (ec == asio::error::host_unreachable || ec == asio::error::host_not_found) {
    return ReplyCode::HostUnreachable;
  }
  if (ec == asio::error::timed_out || ec == konn::Errc::DialTimeout || ec == konn::Errc::Timeout) {
    return ReplyCode::TtlExpired;
  }
  if (ec == asio::error::address_family_not_supported) return ReplyCode::AddressTypeNotSupported;
  return ReplyCode::GeneralFailure;
}

}  // namespace konn::socks5::codec
