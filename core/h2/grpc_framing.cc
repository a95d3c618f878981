#include "core/h2/grpc_framing.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace konn::core::h2 {

namespace {
constexpr int kGrpcResourceExhausted = 8;
constexpr int kGrpcInternal = 13;
constexpr size_t kInitialReserve = 64 * 1024;
}  // namespace

std::array<char, kGrpcPrefixBytes> grpc_prefix(size_t payload_size) {
  const auto n = static_cast<uint32_t>(payload_size);
  return {0, static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
          static_cast<char>(n)};
}

std::string grpc_frame(std::string_view payload) {
  auto prefix = grpc_prefix(payload.size());
  std::string out;
  out.reserve(kGrpcPrefixBytes + payload.size());
  out.append(prefix.data(), prefix.size());
  out.append(payload);
  return out;
}

GrpcMessageDecoder::Result GrpcMessageDecoder::fail(int status, std::string text) {
  grpc_status_ = status;
  error_ = std::move(text);
  return {Status::Invalid, 0};
}

GrpcMessageDecoder::Result GrpcMessageDecoder::decode(std::string_view input) {
  if (failed()) return {Status::Invalid, 0};
  size_t pos = 0;
  if (prefix_have_ < kGrpcPrefixBytes) {
    const size_t take = std::min(kGrpcPrefixBytes - prefix_have_, input.size());
    std::copy_n(input.data(), take, prefix_.data() + prefix_have_);
    prefix_have_ += take;
    pos = take;
    if (prefix_have_ < kGrpcPrefixBytes) return {Status::NeedMore, pos};
    if (prefix_[0] == 1) {
      return fail(kGrpcInternal,
                  "compressed gRPC message received, but no grpc-encoding was negotiated");
    }
    if (prefix_[0] != 0) {
      return fail(kGrpcInternal,
                  fmt::format("invalid gRPC message flag {:#04x} (only 0 and 1 exist)",
                              static_cast<unsigned>(prefix_[0])));
    }
    length_ = size_t{prefix_[1]} << 24 | size_t{prefix_[2]} << 16 | size_t{prefix_[3]} << 8 |
              size_t{prefix_[4]};
    if (length_ > max_message_bytes_) {
      return fail(kGrpcResourceExhausted,
                  fmt::format("gRPC message of {} bytes is larger than the limit of {} bytes",
                              length_, max_message_bytes_));
    }
    message_.clear();
    // Memory follows the bytes that arrive, not the announced length: a peer announcing large
    // messages on many streams without sending them holds little.
    message_.reserve(std::min(length_, kInitialReserve));
  }
  const size_t take = std::min(length_ - message_.size(), input.size() - pos);
  if (message_.size() + take > message_.capacity()) {
    // Grown fourfold rather than doubled: a 256 KiB message is moved once on its way in (at
    // 64 KiB), not at every power of two; what is allocated stays within four times what came.
    message_.reserve(std::min(length_, std::max(message_.size() + take, 4 * message_.capacity())));
  }
  message_.append(input.data() + pos, take);
  pos += take;
  if (message_.size() < length_) return {Status::NeedMore, pos};
  prefix_have_ = 0;
  length_ = 0;
  return {Status::Complete, pos};
}

}  // namespace konn::core::h2
