#pragma once

#include "socks5/codec/address.h"

namespace konn::socks5::codec {

enum class Command : uint8_t {
  Connect = 0x01,
  Bind = 0x02,
  UdpAssociate = 0x03,
};

const char* to_string(Command c);

// VER CMD RSV ATYP DST.ADDR DST.PORT
struct Request {
  Command command = Command::Connect;
  Address destination;
};

struct RequestParse {
  ParseStatus status = ParseStatus::NeedMore;
  size_t consumed = 0;
  // When Invalid: the REP code to answer with, or 0 when the connection should just be closed
  // (wrong version: the peer is not speaking SOCKS5).
  uint8_t reply_code = 0;
  Request value;
};

// Parses a request from the start of `in`. An unknown CMD is reported (07) only once the whole
// request arrived, so a well-formed request with an unsupported command reads cleanly.
RequestParse parse_request(Bytes in);

}  // namespace konn::socks5::codec
