#include "socks5/codec/request.h"

#include "socks5/codec/greeting.h"
#include "socks5/codec/reply.h"

namespace konn::socks5::codec {

const char* to_string(Command c) {
  switch (c) {
    case Command::Connect:
      return "CONNECT";
    case Command::Bind:
      return "BIND";
    case Command::UdpAssociate:
      return "UDP_ASSOCIATE";
  }
  return "UNKNOWN";
}

RequestParse parse_request(Bytes in) {
  RequestParse out;
  if (in.empty()) return out;
  if (in[0] != kSocksVersion) {
    out.status = ParseStatus::Invalid;
    return out;
  }
  if (in.size() < 4) return out;
  auto addr = parse_address(in.subspan(3));
  if (addr.status == ParseStatus::Invalid) {
    out.status = ParseStatus::Invalid;
    out.reply_code = static_cast<uint8_t>(addr.error == AddressError::BadType
                                              ? ReplyCode::AddressTypeNotSupported
                                              : ReplyCode::GeneralFailure);
    return out;
  }
  if (addr.status == ParseStatus::NeedMore) return out;
  uint8_t cmd = in[1];
  if (cmd < 0x01 || cmd > 0x03) {
    out.status = ParseStatus::Invalid;
    out.reply_code = static_cast<uint8_t>(ReplyCode::CommandNotSupported);
    out.consumed = 3 + addr.consumed;
    return out;
  }
  out.value.command = static_cast<Command>(cmd);
  out.value.destination = std::move(addr.value);
  out.status = ParseStatus::Complete;
  out.consumed = 3 + addr.consumed;
  return out;
}

}  // namespace konn::socks5::codec
