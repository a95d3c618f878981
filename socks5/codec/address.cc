#include "socks5/codec/address.h"

namespace konn::socks5::codec {

std::string Address::host_text() const { return is_domain ? host : ip.to_string(); }

std::string Address::to_string() const {
  if (!is_domain && ip.is_v6()) return "[" + ip.to_string() + "]:" + std::to_string(port);
  return host_text() + ":" + std::to_string(port);
}

AddressParse parse_address(Bytes in) {
  AddressParse out;
  if (in.empty()) return out;
  size_t addr_len = 0;
  size_t addr_off = 1;
  switch (in[0]) {
    case kAtypIpv4:
      addr_len = 4;
      break;
    case kAtypIpv6:
      addr_len = 16;
      break;
    case kAtypDomain:
      if (in.size() < 2) return out;
      addr_len = in[1];
      addr_off = 2;
      if (addr_len == 0) {
        out.status = ParseStatus::Invalid;
        out.error = AddressError::EmptyDomain;
        return out;
      }
      break;
    default:
      out.status = ParseStatus::Invalid;
      out.error = AddressError::BadType;
      return out;
  }
  size_t total = addr_off + addr_len + 2;
  if (in.size() < total) return out;
  const uint8_t* a = in.data() + addr_off;
  if (in[0] == kAtypIpv4) {
    asio::ip::address_v4::bytes_type b;
    std::copy(a, a + 4, b.begin());
    out.value.ip = asio::ip::address_v4(b);
  } else if (in[0] == kAtypIpv6) {
    asio::ip::address_v6::bytes_type b;
    std::copy(a, a + 16, b.begin());
    out.value.ip = asio::ip::address_v6(b);
  } else {
    out.value.is_domain = true;
    out.value.host.assign(reinterpret_cast<const char*>(a), addr_len);
  }
  out.value.port = static_cast<uint16_t>(in[addr_off + addr_len] << 8 | in[addr_off + addr_len + 1]);
  out.status = ParseStatus::Complete;
  out.consumed = total;
  return out;
}

void append_endpoint(std::vector<uint8_t>& out, const asio::ip::address& ip, uint16_t port) {
  if (ip.is_v4() || (ip.is_v6() && ip.to_v6().is_v4_mapped())) {
    auto v4 = ip.is_v4() ? ip.to_v4() : asio::ip::make_address_v4(asio::ip::v4_mapped, ip.to_v6());
    auto b = v4.to_bytes();
    out.push_back(kAtypIpv4);
    out.insert(out.end(), b.begin(), b.end());
  } else {
    auto b = ip.to_v6().to_bytes();
    out.push_back(kAtypIpv6);
    out.insert(out.end(), b.begin(), b.end());
  }
  out.push_back(static_cast<uint8_t>(port >> 8));
  out.push_back(static_cast<uint8_t>(port & 0xFF));
}

void append_address(std::vector<uint8_t>& out, const Address& a) {
  if (!a.is_domain) {
    append_endpoint(out, a.ip, a.port);
    return;
  }
  out.push_back(kAtypDomain);
  out.push_back(static_cast<uint8_t>(a.host.size()));
  out.insert(out.end(), a.host.begin(), a.host.end());
  out.push_back(static_cast<uint8_t>(a.port >> 8));
  out.push_back(static_cast<uint8_t>(a.port & 0xFF));
}

}  // namespace konn::socks5::codec
