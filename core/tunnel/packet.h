#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "konnectivity/client.pb.h"

namespace konn::core::tunnel {

// Sizes shared by server and agent.
inline constexpr size_t kReadChunk = 256 * 1024;       // one socket read, one DATA packet
inline constexpr size_t kCoalesceLimit = 1024 * 1024;  // merged pending DATA stays below this
inline constexpr size_t kSmallRead = 32 * 1024;        // reads below this get a right-sized copy

// How much to allocate for one socket read, once the socket is readable and `available` bytes
// wait (`known`: FIONREAD answered). A few bytes, or EOF, get a buffer of their size; past
// kSmallRead, or when unknown, a whole chunk, so one read takes all that arrived.
inline size_t read_size_for(size_t available, bool known) {
  return !known || available >= kSmallRead ? kReadChunk : (available > 0 ? available : 1);
}

// gRPC metadata announcing konn's per-tunnel credit extension (KONN_WINDOW_UPDATE). A peer that
// did not send it never receives a WindowUpdate, and is never waited on for credit.
inline constexpr char kFlowControlHeader[] = "konn-flow-control";
inline constexpr char kFlowControlVersion[] = "1";
// Bytes a sender may have unacknowledged per tunnel and direction when flow control is on.
inline constexpr int64_t kTunnelWindow = 8 * 1024 * 1024;
// The receiver returns credit once this much was consumed, not per packet.
inline constexpr int64_t kWindowUpdateThreshold = kTunnelWindow / 4;

// gRPC metadata an agent sends when it understands konn's half-close extension: a DialRequest
// with konnHalfClose set, and KONN_CLOSE_WRITE both ways for that tunnel.
inline constexpr char kHalfCloseHeader[] = "konn-half-close";
inline constexpr char kHalfCloseVersion[] = "1";

// gRPC metadata of konn's node-to-control-plane extension (KEP-2025): the agent sends it when it
// has --node-to-control-plane-listen addresses, and the server answers with it in its response
// headers when --node-to-control-plane-destinations is set. KONN_NODE_* packets travel only on a
// stream where both did.
inline constexpr char kNodeToControlPlaneHeader[] = "konn-node-to-control-plane";
inline constexpr char kNodeToControlPlaneVersion[] = "1";

// KONN_NODE_* types (66..72).
bool is_node_type(int type);
// The node twin of a forward type: DIAL_REQ -> KONN_NODE_DIAL_REQ, CLOSE_REQ and CLOSE_RSP ->
// KONN_NODE_CLOSE, ... ; DRAIN and unknown types are returned unchanged.
int to_node_type(int type);
// The forward twin of a KONN_NODE_* type (KONN_NODE_CLOSE -> CLOSE_RSP); others unchanged.
int from_node_type(int type);
// `p` with its type turned into the node twin.
Packet as_node(Packet&& p);

Packet make_dial_request(const std::string& address, int64_t random,
                         const std::string& protocol = "tcp");
Packet make_dial_response(int64_t random, int64_t connect_id, const std::string& error = {});
Packet make_close_request(int64_t connect_id);
Packet make_close_response(int64_t connect_id, const std::string& error = {});
Packet make_data(int64_t connect_id, std::string&& bytes);
Packet make_close_dial(int64_t random);
Packet make_drain();
Packet make_window_update(int64_t connect_id, int64_t bytes);
Packet make_close_write(int64_t connect_id);

// `p` as h2::Stream::send_framed(head, payload) takes a message: `head` holds
// h2::kGrpcPrefixBytes bytes of room for gRPC's prefix and every byte of the packet up to its
// DATA payload, and `payload` is that payload in `p` itself (empty for packets of other types,
// which are all in `head`). So a DATA packet's bytes are copied once, from the packet straight
// into the connection's write buffer; `p` must outlive the send.
struct FramedPacket {
  std::string head;
  std::string_view payload;
};
FramedPacket frame_packet(const Packet& p);

// The head of a DATA packet for `connect_id` with `bytes` payload bytes, as frame_packet() frames
// one (h2::kGrpcPrefixBytes of room first): with the payload appended it is the whole message,
// for which it has room reserved. For a sender whose bytes sit in a buffer it reuses: they are
// copied once, onto the head.
std::string frame_data_head(int64_t connect_id, size_t bytes);

// Payload bytes of a DATA or KONN_NODE_DATA packet (0 for anything else).
size_t data_size(const Packet& p);

// One-line description for logs: type and ids, never payload bytes.
std::string describe(const Packet& p);

// The enum name ("DIAL_REQ", ...) or "UNKNOWN(n)".
std::string type_name(int type);

// Packet types as metric labels (stream_packets_total, stream_errors_total): upstream's seven,
// konn's two, every KONN_NODE_* as "KONN_NODE", and "Unknown" for anything else (and, as
// upstream, for an error with no packet).
inline constexpr int kPacketTypeSlots = 11;
inline constexpr int kUnknownPacketSlot = kPacketTypeSlots - 1;
// 0..kPacketTypeSlots-1.
int packet_type_slot(int type);
// The label of a slot: "DIAL_REQ" ... "DRAIN", "KONN_WINDOW_UPDATE", "KONN_CLOSE_WRITE",
// "KONN_NODE", "Unknown".
std::string packet_type_label(int slot);

// A gRPC status code as Go's codes.Code.String() writes it ("Canceled", "Unavailable", ...):
// the `code` label of stream_errors_total, so dashboards built on upstream's values keep working.
std::string grpc_code_name(int code);

}  // namespace konn::core::tunnel
