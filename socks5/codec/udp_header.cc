#include "socks5/codec/udp_header.h"

namespace konn::socks5::codec {

UdpParse parse_udp_datagram(Bytes datagram) {
  UdpParse out;
  if (datagram.size() < 4) return out;
  auto addr = parse_address(datagram.subspan(3));
  if (addr.status != ParseStatus::Complete) return out;
  out.status = ParseStatus::Complete;
  out.value.frag = datagram[2];
  out.value.destination = std::move(addr.value);
  out.value.header_size = 3 + addr.consumed;
  return out;
}

std::vector<uint8_t> encode_udp_header(const asio::ip::address& source, uint16_t port) {
  std::vector<uint8_t> out{0x00, 0x00, 0x00};
  out.reserve(22);
  append_endpoint(out, source, port);
  return out;
}

}  // namespace konn::socks5::codec
