#include "core/h2/grpc_framing.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

using konn::core::h2::grpc_frame;
using konn::core::h2::grpc_prefix;
using konn::core::h2::GrpcMessageDecoder;
using Status = GrpcMessageDecoder::Status;

namespace {

// Feeds `bytes` in pieces cut at `cuts` (increasing offsets) and collects every message.
struct Fed {
  std::vector<std::string> messages;
  bool invalid = false;
};
Fed feed(GrpcMessageDecoder& d, const std::string& bytes, const std::vector<size_t>& cuts) {
  Fed out;
  size_t start = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(bytes.size());
  for (size_t end : ends) {
    std::string_view piece(bytes.data() + start, end - start);
    start = end;
    while (true) {
      auto r = d.decode(piece);
      REQUIRE(r.consumed <= piece.size());
      piece.remove_prefix(r.consumed);
      if (r.status == Status::Invalid) {
        out.invalid = true;
        return out;
      }
      if (r.status == Status::Complete) {
        out.messages.push_back(d.take_message());
        if (piece.empty()) break;
        continue;
      }
      REQUIRE(piece.empty());
      break;
    }
  }
  return out;
}

std::string raw_prefix(unsigned char flag, uint32_t length) {
  return std::string{static_cast<char>(flag), static_cast<char>(length >> 24),
                     static_cast<char>(length >> 16), static_cast<char>(length >> 8),
                     static_cast<char>(length)};
}

}  // namespace

TEST_CASE("grpc_prefix is the flag 0 and the big-endian length", "[h2][grpc_framing]") {
  auto p = grpc_prefix(0x01020304);
  CHECK(std::string(p.data(), p.size()) == std::string("\x00\x01\x02\x03\x04", 5));
  CHECK(grpc_frame("abc") == std::string("\x00\x00\x00\x00\x03"
                                         "abc",
                                         8));
  CHECK(grpc_frame("") == std::string(5, '\0'));
}

TEST_CASE("a message split at every offset decodes to itself", "[h2][grpc_framing]") {
  const std::string payload = "hello, konnectivity";
  const std::string bytes = grpc_frame(payload) + grpc_frame("") + grpc_frame("x");
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    for (size_t cut2 = cut; cut2 <= bytes.size(); cut2 += 3) {
      GrpcMessageDecoder d;
      auto fed = feed(d, bytes, {cut, cut2});
      REQUIRE_FALSE(fed.invalid);
      REQUIRE(fed.messages == std::vector<std::string>{payload, "", "x"});
      CHECK_FALSE(d.in_message());
    }
  }
}

TEST_CASE("bytes fed one at a time decode, and in_message says where a message is cut",
          "[h2][grpc_framing]") {
  const std::string bytes = grpc_frame("abcdef");
  GrpcMessageDecoder d;
  CHECK_FALSE(d.in_message());
  for (size_t i = 0; i + 1 < bytes.size(); ++i) {
    auto r = d.decode(std::string_view(bytes).substr(i, 1));
    REQUIRE(r.status == Status::NeedMore);
    REQUIRE(r.consumed == 1);
    CHECK(d.in_message());
  }
  auto r = d.decode(std::string_view(bytes).substr(bytes.size() - 1));
  REQUIRE(r.status == Status::Complete);
  CHECK(d.take_message() == "abcdef");
  CHECK_FALSE(d.in_message());
}

TEST_CASE("a zero-length message completes at the end of its prefix", "[h2][grpc_framing]") {
  GrpcMessageDecoder d;
  const std::string two = grpc_frame("") + grpc_frame("");
  auto r = d.decode(two);
  REQUIRE(r.status == Status::Complete);
  CHECK(r.consumed == 5);
  CHECK(d.take_message().empty());
  r = d.decode(std::string_view(two).substr(5));
  REQUIRE(r.status == Status::Complete);
  CHECK(r.consumed == 5);
  // An empty input is NeedMore with nothing consumed.
  r = d.decode({});
  CHECK(r.status == Status::NeedMore);
  CHECK(r.consumed == 0);
}

TEST_CASE("a message of exactly the limit is accepted, one byte more is RESOURCE_EXHAUSTED",
          "[h2][grpc_framing]") {
  const size_t limit = 1000;
  {
    GrpcMessageDecoder d(limit);
    auto fed = feed(d, grpc_frame(std::string(limit, 'a')), {7, 500});
    REQUIRE_FALSE(fed.invalid);
    REQUIRE(fed.messages.size() == 1);
    CHECK(fed.messages[0].size() == limit);
  }
  {
    GrpcMessageDecoder d(limit);
    // Only the prefix is needed to refuse: the payload is never awaited.
    auto r = d.decode(raw_prefix(0, limit + 1));
    REQUIRE(r.status == Status::Invalid);
    CHECK(d.grpc_status() == 8);
    CHECK(d.error() == "gRPC message of 1001 bytes is larger than the limit of 1000 bytes");
    // It stays failed.
    CHECK(d.decode(grpc_frame("a")).status == Status::Invalid);
  }
  SECTION("the default limit is the daemons' 16 MiB") {
    GrpcMessageDecoder d;
    CHECK(d.decode(raw_prefix(0, 16 * 1024 * 1024)).status == Status::NeedMore);
    GrpcMessageDecoder over;
    CHECK(over.decode(raw_prefix(0, 16 * 1024 * 1024 + 1)).status == Status::Invalid);
    CHECK(over.grpc_status() == 8);
  }
}

TEST_CASE("a compressed message is refused: no grpc-encoding is negotiated", "[h2][grpc_framing]") {
  GrpcMessageDecoder d;
  auto fed = feed(d, grpc_frame("ok") + raw_prefix(1, 3) + "abc", {3, 9});
  CHECK(fed.invalid);
  CHECK(fed.messages == std::vector<std::string>{"ok"});
  CHECK(d.failed());
  CHECK(d.grpc_status() == 13);
  CHECK(d.error() == "compressed gRPC message received, but no grpc-encoding was negotiated");
}

TEST_CASE("a flag other than 0 or 1 is INTERNAL", "[h2][grpc_framing]") {
  GrpcMessageDecoder d;
  auto r = d.decode(raw_prefix(0x80, 0));
  REQUIRE(r.status == Status::Invalid);
  CHECK(d.grpc_status() == 13);
  CHECK(d.error() == "invalid gRPC message flag 0x80 (only 0 and 1 exist)");
}

TEST_CASE("a large message arrives in DATA-sized pieces", "[h2][grpc_framing]") {
  std::string payload(3 * 1024 * 1024 + 17, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 31);
  const std::string bytes = grpc_frame(payload);
  std::vector<size_t> cuts;
  for (size_t c = 16384; c < bytes.size(); c += 16384) cuts.push_back(c);
  GrpcMessageDecoder d;
  auto fed = feed(d, bytes, cuts);
  REQUIRE(fed.messages.size() == 1);
  CHECK(fed.messages[0] == payload);
}
