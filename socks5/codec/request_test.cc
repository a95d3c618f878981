#include "socks5/codec/request.h"

#include <catch2/catch.hpp>

#include "socks5/codec/reply.h"

using namespace konn::socks5::codec;

TEST_CASE("requests parse for every address type at any split", "[codec]") {
  std::vector<std::vector<uint8_t>> msgs{
      {0x05, 0x01, 0x00, 0x01, 10, 0, 0, 1, 0x00, 0x50},
      {0x05, 0x01, 0x00, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x01, 0xBB},
      {0x05, 0x01, 0x00, 0x03, 9, 'l', 'o', 'c', 'a', 'l', 'h', 'o', 's', 't', 0x1F, 0x90},
  };
  std::vector<std::string> want{"10.0.0.1:80", "[::1]:443", "localhost:8080"};
  for (size_t i = 0; i < msgs.size(); ++i) {
    auto msg = msgs[i];
    for (size_t n = 0; n < msg.size(); ++n) {
      CHECK(parse_request(Bytes(msg.data(), n)).status == ParseStatus::NeedMore);
    }
    msg.push_back('G');  // coalesced first data byte
    auto r = parse_request(msg);
    REQUIRE(r.status == ParseStatus::Complete);
    CHECK(r.consumed == msg.size() - 1);
    CHECK(r.value.command == Command::Connect);
    CHECK(r.value.destination.to_string() == want[i]);
  }
}

TEST_CASE("malformed requests get their RFC reply code", "[codec]") {
  std::vector<uint8_t> bad_atyp{0x05, 0x01, 0x00, 0x02, 1, 2, 3, 4};
  auto a = parse_request(bad_atyp);
  CHECK(a.status == ParseStatus::Invalid);
  CHECK(a.reply_code == 0x08);

  std::vector<uint8_t> empty_name{0x05, 0x01, 0x00, 0x03, 0, 0x00, 0x50};
  auto e = parse_request(empty_name);
  CHECK(e.status == ParseStatus::Invalid);
  CHECK(e.reply_code == 0x01);

  std::vector<uint8_t> bad_cmd{0x05, 0x09, 0x00, 0x01, 10, 0, 0, 1, 0x00, 0x50};
  CHECK(parse_request(Bytes(bad_cmd.data(), 9)).status == ParseStatus::NeedMore);
  auto c = parse_request(bad_cmd);
  CHECK(c.status == ParseStatus::Invalid);
  CHECK(c.reply_code == 0x07);

  std::vector<uint8_t> v4{0x04, 0x01, 0x00, 0x50};
  auto v = parse_request(v4);
  CHECK(v.status == ParseStatus::Invalid);
  CHECK(v.reply_code == 0);
}

TEST_CASE("replies carry the bound address", "[codec]") {
  auto r4 = encode_reply(ReplyCode::Succeeded, asio::ip::make_address("127.0.0.1"), 4242);
  CHECK(r4 == std::vector<uint8_t>{0x05, 0x00, 0x00, 0x01, 127, 0, 0, 1, 0x10, 0x92});
  auto mapped = encode_reply(ReplyCode::Succeeded, asio::ip::make_address("::ffff:10.1.2.3"), 1);
  CHECK(mapped.size() == 10);
  CHECK(mapped[3] == 0x01);
  auto r6 = encode_reply(ReplyCode::Succeeded, asio::ip::make_address("::1"), 80);
  CHECK(r6.size() == 22);
  CHECK(r6[3] == 0x04);
  CHECK(encode_failure(ReplyCode::ConnectionRefused) ==
        std::vector<uint8_t>{0x05, 0x05, 0x00, 0x01, 0, 0, 0, 0, 0, 0});
}

TEST_CASE("connect errors map to reply codes", "[codec]") {
  CHECK(reply_for_error(asio::error::connection_refused) == ReplyCode::ConnectionRefused);
  CHECK(reply_for_error(asio::error::network_unreachable) == ReplyCode::NetworkUnreachable);
  CHECK(reply_for_error(asio::error::host_unreachable) == ReplyCode::HostUnreachable);
  CHECK(reply_for_error(asio::error::host_not_found) == ReplyCode::HostUnreachable);
  CHECK(reply_for_error(asio::error::timed_out) == ReplyCode::TtlExpired);
  CHECK(reply_for_error(asio::error::host_not_found_try_again) == ReplyCode::GeneralFailure);
}
