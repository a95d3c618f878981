#include "core/tunnel/packet.h"

#include <catch2/catch.hpp>

#include "core/h2/grpc_status.h"

using namespace konn::core::tunnel;

TEST_CASE("packet factories fill type and payload as upstream expects", "[tunnel]") {
  auto req = make_dial_request("10.0.0.1:443", 42);
  CHECK(req.type() == DIAL_REQ);
  CHECK(req.dialrequest().protocol() == "tcp");
  CHECK(req.dialrequest().random() == 42);

  auto data = make_data(7, std::string("hello"));
  CHECK(data_size(data) == 5);
  CHECK(describe(data) == "DATA connectID=7 bytes=5");

  auto rsp = make_dial_response(42, 0, "dial tcp 10.0.0.1:443: connect: connection refused");
  CHECK(describe(rsp).find("error=\"dial tcp") != std::string::npos);
  CHECK(type_name(99) == "UNKNOWN(99)");
  CHECK(type_name(DRAIN) == "DRAIN");
}

TEST_CASE("the wire encoding matches upstream field numbers", "[tunnel]") {
  // Packet{type=DATA(4), data(4)={connectID(1)=7, data(3)="hi"}}
  auto p = make_data(7, std::string("hi"));
  std::string wire;
  REQUIRE(p.SerializeToString(&wire));
  const std::string expected("\x08\x04\x22\x06\x08\x07\x1a\x02hi", 10);
  CHECK(wire == expected);
  // An absent type decodes as DIAL_REQ, as proto3 specifies.
  Packet empty;
  REQUIRE(empty.ParseFromString(std::string()));
  CHECK(empty.type() == DIAL_REQ);
  CHECK(empty.dialrequest().address().empty());
}

namespace {
// What frame_packet gives, in one string: the bytes the message carries after its prefix.
std::string framed_bytes(const Packet& p) {
  FramedPacket f = frame_packet(p);
  REQUIRE(f.head.size() >= 5);
  return f.head.substr(5) + std::string(f.payload);
}
}  // namespace

TEST_CASE("a framed DATA packet has protobuf's own bytes after room for the prefix", "[tunnel]") {
  // frame_packet writes DATA packets itself: every size class of varint must come out as
  // protobuf writes it, and other packets (or DATA carrying more) go through protobuf.
  const int64_t ids[] = {0, 1, 127, 128, 16384, int64_t{1} << 35, -1};
  const size_t sizes[] = {0, 1, 100, 127, 128, 16383, 16384, 300000, 2100000};
  for (int type : {static_cast<int>(DATA), static_cast<int>(KONN_NODE_DATA)}) {
    for (int64_t id : ids) {
      for (size_t size : sizes) {
        Packet p = make_data(id, std::string(size, 'x'));
        p.set_type(static_cast<PacketType>(type));
        INFO("type " << type << " connectID " << id << " bytes " << size);
        FramedPacket f = frame_packet(p);
        // The payload is not copied: it is the packet's own bytes.
        CHECK(f.payload.data() == (size == 0 ? f.payload.data() : p.data().data().data()));
        CHECK(f.payload.size() == size);
        const std::string wire = framed_bytes(p);
        CHECK(wire == p.SerializeAsString());
        Packet back;
        REQUIRE(back.ParseFromString(wire));
        CHECK(back.type() == type);
        CHECK(back.data().connectid() == id);
        CHECK(back.data().data().size() == size);
      }
    }
  }
  // frame_data_head: the same bytes for a payload that is still in the sender's buffer.
  for (int64_t id : ids) {
    for (size_t size : sizes) {
      INFO("frame_data_head connectID " << id << " bytes " << size);
      const std::string payload(size, 'y');
      std::string framed = frame_data_head(id, size);
      CHECK(framed.capacity() >= framed.size() + size);  // the payload fits without a new buffer
      framed += payload;
      REQUIRE(framed.size() >= 5);
      CHECK(framed.substr(5) == make_data(id, std::string(payload)).SerializeAsString());
    }
  }
  Packet with_error = make_data(3, std::string("abc"));
  with_error.mutable_data()->set_error("upstream never sets it");
  CHECK(framed_bytes(with_error) == with_error.SerializeAsString());
  CHECK(frame_packet(with_error).payload.empty());
  // A field this build does not know (a newer peer's) is kept, as protobuf keeps it.
  Packet unknown;
  REQUIRE(unknown.ParseFromString(std::string("\x08\x04\x22\x06\x08\x07\x1a\x02hi\x78\x01", 12)));
  REQUIRE(unknown.type() == DATA);
  CHECK(framed_bytes(unknown) == unknown.SerializeAsString());
  CHECK(unknown.SerializeAsString().size() == 12);
  Packet dial = make_dial_request("10.0.0.1:443", 42);
  CHECK(framed_bytes(dial) == dial.SerializeAsString());
  CHECK(frame_packet(dial).payload.empty());
}

TEST_CASE("metric labels of packet types and gRPC codes follow upstream's spelling", "[tunnel]") {
  using konn::core::tunnel::grpc_code_name;
  using konn::core::tunnel::packet_type_label;
  using konn::core::tunnel::packet_type_slot;
  CHECK(packet_type_label(packet_type_slot(DIAL_REQ)) == "DIAL_REQ");
  CHECK(packet_type_label(packet_type_slot(DRAIN)) == "DRAIN");
  CHECK(packet_type_label(packet_type_slot(KONN_WINDOW_UPDATE)) == "KONN_WINDOW_UPDATE");
  CHECK(packet_type_label(packet_type_slot(KONN_CLOSE_WRITE)) == "KONN_CLOSE_WRITE");
  CHECK(packet_type_label(packet_type_slot(99)) == "Unknown");
  CHECK(packet_type_label(packet_type_slot(-1)) == "Unknown");
  // Go's codes.Code.String() for each code (the label values dashboards match on).
  namespace grpc_code = konn::core::h2::grpc_code;
  CHECK(grpc_code_name(grpc_code::kOk) == "OK");
  CHECK(grpc_code_name(grpc_code::kCancelled) == "Canceled");
  CHECK(grpc_code_name(grpc_code::kUnknown) == "Unknown");
  CHECK(grpc_code_name(grpc_code::kInvalidArgument) == "InvalidArgument");
  CHECK(grpc_code_name(grpc_code::kDeadlineExceeded) == "DeadlineExceeded");
  CHECK(grpc_code_name(grpc_code::kNotFound) == "NotFound");
  CHECK(grpc_code_name(grpc_code::kAlreadyExists) == "AlreadyExists");
  CHECK(grpc_code_name(grpc_code::kPermissionDenied) == "PermissionDenied");
  CHECK(grpc_code_name(grpc_code::kResourceExhausted) == "ResourceExhausted");
  CHECK(grpc_code_name(grpc_code::kFailedPrecondition) == "FailedPrecondition");
  CHECK(grpc_code_name(grpc_code::kAborted) == "Aborted");
  CHECK(grpc_code_name(grpc_code::kOutOfRange) == "OutOfRange");
  CHECK(grpc_code_name(grpc_code::kUnimplemented) == "Unimplemented");
  CHECK(grpc_code_name(grpc_code::kInternal) == "Internal");
  CHECK(grpc_code_name(grpc_code::kUnavailable) == "Unavailable");
  CHECK(grpc_code_name(grpc_code::kDataLoss) == "DataLoss");
  CHECK(grpc_code_name(grpc_code::kUnauthenticated) == "Unauthenticated");
  CHECK(grpc_code_name(17) == "Code(17)");
  CHECK(grpc_code_name(42) == "Code(42)");
  CHECK(grpc_code_name(-1) == "Code(-1)");
}

TEST_CASE("node-to-control-plane packet types map to and from their forward twins", "[tunnel]") {
  CHECK(to_node_type(DIAL_REQ) == KONN_NODE_DIAL_REQ);
  CHECK(to_node_type(DIAL_RSP) == KONN_NODE_DIAL_RSP);
  CHECK(to_node_type(CLOSE_REQ) == KONN_NODE_CLOSE);
  CHECK(to_node_type(CLOSE_RSP) == KONN_NODE_CLOSE);
  CHECK(to_node_type(DATA) == KONN_NODE_DATA);
  CHECK(to_node_type(DIAL_CLS) == KONN_NODE_DIAL_CLS);
  CHECK(to_node_type(KONN_WINDOW_UPDATE) == KONN_NODE_WINDOW_UPDATE);
  CHECK(to_node_type(KONN_CLOSE_WRITE) == KONN_NODE_CLOSE_WRITE);
  CHECK(to_node_type(DRAIN) == DRAIN);  // no node twin: the stream's, not a tunnel's
  for (int t = KONN_NODE_DIAL_REQ; t <= KONN_NODE_CLOSE_WRITE; ++t) {
    INFO("type " << t);
    CHECK(is_node_type(t));
    CHECK_FALSE(is_node_type(from_node_type(t)));
    CHECK(to_node_type(from_node_type(t)) == t);
    CHECK(packet_type_label(packet_type_slot(t)) == "KONN_NODE");
  }
  CHECK_FALSE(is_node_type(KONN_CLOSE_WRITE));
  CHECK_FALSE(is_node_type(73));
  CHECK(from_node_type(DATA) == DATA);
  CHECK(from_node_type(73) == 73);

  auto data = as_node(make_data(3, std::string("abc")));
  CHECK(data.type() == KONN_NODE_DATA);
  CHECK(data_size(data) == 3);
  CHECK(describe(data) == "KONN_NODE_DATA connectID=3 bytes=3");
  auto close = as_node(make_close_response(3, "bye"));
  CHECK(describe(close) == "KONN_NODE_CLOSE connectID=3 error=\"bye\"");
  auto dial = as_node(make_dial_request("10.0.0.1:6443", 5));
  CHECK(describe(dial) == "KONN_NODE_DIAL_REQ random=5 address=10.0.0.1:6443 protocol=tcp");
  // On the wire: type 69 (varint 0x45), then the forward DATA payload unchanged.
  std::string wire;
  REQUIRE(as_node(make_data(7, std::string("hi"))).SerializeToString(&wire));
  CHECK(wire == std::string("\x08\x45\x22\x06\x08\x07\x1a\x02hi", 10));
}
