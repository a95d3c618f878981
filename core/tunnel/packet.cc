#include "core/tunnel/packet.h"

#include <iterator>
#include <utility>

#include "core/h2/grpc_framing.h"

namespace konn::core::tunnel {

bool is_node_type(int type) { return type >= KONN_NODE_DIAL_REQ && type <= KONN_NODE_CLOSE_WRITE; }

namespace {

// Each forward type and its node twin, one table for both directions. Both closes travel as
// KONN_NODE_CLOSE, which comes back as CLOSE_RSP (the first match): the node tunnels have one
// close packet, answered by nothing.
constexpr std::pair<int, int> kNodeTwins[] = {
    {DIAL_REQ, KONN_NODE_DIAL_REQ},
    {DIAL_RSP, KONN_NODE_DIAL_RSP},
    {CLOSE_RSP, KONN_NODE_CLOSE},
    {CLOSE_REQ, KONN_NODE_CLOSE},
    {DATA, KONN_NODE_DATA},
    {DIAL_CLS, KONN_NODE_DIAL_CLS},
    {KONN_WINDOW_UPDATE, KONN_NODE_WINDOW_UPDATE},
    {KONN_CLOSE_WRITE, KONN_NODE_CLOSE_WRITE},
};

}  // namespace

int to_node_type(int type) {
  for (const auto& [forward, node] : kNodeTwins) {
    if (forward == type) return node;
  }
  return type;
}

int from_node_type(int type) {
  for (const auto& [forward, node] : kNodeTwins) {
    if (node == type) return forward;
  }
  return type;
}

Packet as_node(Packet&& p) {
  p.set_type(static_cast<PacketType>(to_node_type(p.type())));
  return std::move(p);
}

Packet make_dial_request(const std::string& address, int64_t random, const std::string& protocol) {
  Packet p;
  p.set_type(DIAL_REQ);
  auto* d = p.mutable_dialrequest();
  d->set_protocol(protocol);
  d->set_address(address);
  d->set_random(random);
  return p;
}

Packet make_dial_response(int64_t random, int64_t connect_id, const std::string& error) {
  Packet p;
  p.set_type(DIAL_RSP);
  auto* d = p.mutable_dialresponse();
  d->set_random(random);
  d->set_connectid(connect_id);
  d->set_error(error);
  return p;
}

Packet make_close_request(int64_t connect_id) {
  Packet p;
  p.set_type(CLOSE_REQ);
  p.mutable_closerequest()->set_connectid(connect_id);
  return p;
}

Packet make_close_response(int64_t connect_id, const std::string& error) {
  Packet p;
  p.set_type(CLOSE_RSP);
  p.mutable_closeresponse()->set_connectid(connect_id);
  p.mutable_closeresponse()->set_error(error);
  return p;
}

Packet make_data(int64_t connect_id, std::string&& bytes) {
  Packet p;
  p.set_type(DATA);
  p.mutable_data()->set_connectid(connect_id);
  p.mutable_data()->set_data(std::move(bytes));
  return p;
}

Packet make_close_dial(int64_t random) {
  Packet p;
  p.set_type(DIAL_CLS);
  p.mutable_closedial()->set_random(random);
  return p;
}

Packet make_drain() {
  Packet p;
  p.set_type(DRAIN);
  p.mutable_drain();
  return p;
}

Packet make_window_update(int64_t connect_id, int64_t bytes) {
  Packet p;
  p.set_type(KONN_WINDOW_UPDATE);
  p.mutable_windowupdate()->set_connectid(connect_id);
  p.mutable_windowupdate()->set_bytes(bytes);
  return p;
}

Packet make_close_write(int64_t connect_id) {
  Packet p;
  p.set_type(KONN_CLOSE_WRITE);
  p.mutable_closewrite()->set_connectid(connect_id);
  return p;
}

namespace {

// Protobuf's wire encoding, for the one packet worth encoding by hand.
void append_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}
constexpr char kTag(int field, int wire_type) { return static_cast<char>(field << 3 | wire_type); }
constexpr int kVarint = 0;
constexpr int kLengthDelimited = 2;

// A DATA packet's bytes, as protobuf writes them (fields in number order, zero values left out),
// up to its payload, which follows them on the wire; the payload is left where it is. `room`:
// bytes reserved beyond the head.
std::string serialize_data_head(int type, uint64_t connect_id, size_t bytes, size_t room = 0) {
  size_t inner = 0;
  if (connect_id != 0) inner += 1 + varint_size(connect_id);
  if (bytes != 0) inner += 1 + varint_size(bytes) + bytes;
  std::string out;
  // Four tags, four varints of 10 bytes at most.
  out.reserve(h2::kGrpcPrefixBytes + 4 + 4 * 10 + room);
  out.append(h2::kGrpcPrefixBytes, '\0');
  out.push_back(kTag(Packet::kTypeFieldNumber, kVarint));
  append_varint(out, static_cast<uint64_t>(type));
  out.push_back(kTag(Packet::kDataFieldNumber, kLengthDelimited));
  append_varint(out, inner);
  if (connect_id != 0) {
    out.push_back(kTag(Data::kConnectIDFieldNumber, kVarint));
    append_varint(out, connect_id);
  }
  if (bytes != 0) {
    out.push_back(kTag(Data::kDataFieldNumber, kLengthDelimited));
    append_varint(out, bytes);
  }
  return out;
}

// DATA (or its node twin): every DATA konn or upstream sends holds nothing but a connectID and
// bytes, and frame_packet() writes those itself.
bool data_packet(const Packet& p) {
  return p.has_data() && (p.type() == DATA || p.type() == KONN_NODE_DATA);
}

}  // namespace

FramedPacket frame_packet(const Packet& p) {
  const size_t size = p.ByteSizeLong();
  if (data_packet(p)) {
    std::string head = serialize_data_head(p.type(), static_cast<uint64_t>(p.data().connectid()),
                                           p.data().data().size());
    // The head and the payload are the whole message unless it holds more (an error, or fields
    // unknown here, which protobuf-lite keeps and counts): those are serialised as they are.
    if (head.size() - h2::kGrpcPrefixBytes + p.data().data().size() == size) {
      return {std::move(head), p.data().data()};
    }
  }
  std::string framed(h2::kGrpcPrefixBytes + size, '\0');
  p.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(framed.data()) +
                                    h2::kGrpcPrefixBytes);
  return {std::move(framed), {}};
}

std::string frame_data_head(int64_t connect_id, size_t bytes) {
  return serialize_data_head(DATA, static_cast<uint64_t>(connect_id), bytes, bytes);
}

size_t data_size(const Packet& p) {
  return p.type() == DATA || p.type() == KONN_NODE_DATA ? p.data().data().size() : 0;
}

std::string type_name(int type) {
  if (PacketType_IsValid(type)) return PacketType_Name(static_cast<PacketType>(type));
  return "UNKNOWN(" + std::to_string(type) + ")";
}

int packet_type_slot(int type) {
  if (type >= DIAL_REQ && type <= DRAIN) return type;
  if (type == KONN_WINDOW_UPDATE) return 7;
  if (type == KONN_CLOSE_WRITE) return 8;
  if (is_node_type(type)) return 9;
  return kUnknownPacketSlot;
}

std::string packet_type_label(int slot) {
  if (slot >= DIAL_REQ && slot <= DRAIN) return type_name(slot);
  if (slot == 7) return type_name(KONN_WINDOW_UPDATE);
  if (slot == 8) return type_name(KONN_CLOSE_WRITE);
  if (slot == 9) return "KONN_NODE";
  return "Unknown";
}

std::string grpc_code_name(int code) {
  static const char* const names[] = {
      "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
      "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
      "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
      "DataLoss", "Unauthenticated"};
  if (code >= 0 && code < static_cast<int>(std::size(names))) return names[code];
  return "Code(" + std::to_string(code) + ")";
}

std::string describe(const Packet& p) {
  std::string out = type_name(p.type());
  switch (from_node_type(p.type())) {
    case DIAL_REQ:
      out += " random=" + std::to_string(p.dialrequest().random()) +
             " address=" + p.dialrequest().address() + " protocol=" + p.dialrequest().protocol();
      if (p.dialrequest().konnhalfclose()) out += " halfClose=true";
      break;
    case DIAL_RSP:
      out += " random=" + std::to_string(p.dialresponse().random()) +
             " connectID=" + std::to_string(p.dialresponse().connectid());
      if (!p.dialresponse().error().empty()) out += " error=\"" + p.dialresponse().error() + "\"";
      break;
    case CLOSE_REQ:
      out += " connectID=" + std::to_string(p.closerequest().connectid());
      break;
    case CLOSE_RSP:
      out += " connectID=" + std::to_string(p.closeresponse().connectid());
      if (!p.closeresponse().error().empty()) {
        out += " error=\"" + p.closeresponse().error() + "\"";
      }
      break;
    case DATA:
      out += " connectID=" + std::to_string(p.data().connectid()) +
             " bytes=" + std::to_string(p.data().data().size());
      break;
    case DIAL_CLS:
      out += " random=" + std::to_string(p.closedial().random());
      break;
    case KONN_WINDOW_UPDATE:
      out += " connectID=" + std::to_string(p.windowupdate().connectid()) +
             " bytes=" + std::to_string(p.windowupdate().bytes());
      break;
    case KONN_CLOSE_WRITE:
      out += " connectID=" + std::to_string(p.closewrite().connectid());
      break;
    default:
      break;
  }
  return out;
}

}  // namespace konn::core::tunnel
