#pragma once

#include <vector>

#include "socks5/codec/address.h"

namespace konn::socks5::codec {

// UDP ASSOCIATE datagram header: RSV(2)=0 FRAG ATYP DST.ADDR DST.PORT DATA (RFC 1928 section 7).
struct UdpDatagram {
  uint8_t frag = 0;     // we do not reassemble: the caller drops FRAG != 0
  Address destination;  // for client→server datagrams; the source for server→client
  size_t header_size = 0;  // DATA starts here
};

// A datagram is whole or nothing: NeedMore never happens, a short one is Invalid.
struct UdpParse {
  ParseStatus status = ParseStatus::Invalid;
  UdpDatagram value;
};

UdpParse parse_udp_datagram(Bytes datagram);

// The header to put before a reply datagram from `source`.
std::vector<uint8_t> encode_udp_header(const asio::ip::address& source, uint16_t port);

}  // namespace konn::socks5::codec
