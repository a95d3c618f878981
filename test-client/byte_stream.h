#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace konn::testclient {

// An established, dialled connection to a destination, seen as an ordered byte stream in each
// direction. The GET and pipe code of proxy-test-client runs over it, whatever carries the bytes:
// a Konnectivity tunnel on a gRPC stream (`Tunnel`) or a raw HTTP CONNECT connection
// (`ConnectStream`).
//
// Threads: write(), close_write() and close() may run on one thread while read()/read_for() run
// on another.
class ByteStream {
 public:
  enum class ReadStatus { Data, Eof, Timeout };

  virtual ~ByteStream() = default;

  // Sends all of `bytes`; blocks while the far side does not take them. False when the stream
  // ended, broke, or was closed.
  virtual bool write(std::string_view bytes) = 0;

  // Nothing more will be written. Passes a half-close to the destination when the transport can
  // carry one (returns true); otherwise does nothing (returns false) and the destination only
  // learns of it when the stream is closed.
  virtual bool close_write() = 0;

  // The next received bytes, in order; nullopt once the stream ended and everything before that
  // was read. Blocks.
  virtual std::optional<std::string> read() = 0;
  // As read(), giving up after `timeout`. On Data, `*out` holds the bytes.
  virtual ReadStatus read_for(std::string* out, std::chrono::milliseconds timeout) = 0;

  // Ends the stream in both directions (unread bytes are discarded), waiting at most `timeout`
  // for a clean end. Returns "" on a clean close, else what went wrong. Idempotent. Releases a
  // write() blocked on another thread.
  virtual std::string close(std::chrono::milliseconds timeout) = 0;

  // Whether the far side ended the stream, and why: "" for a clean end (the destination closed),
  // otherwise a description of the failure.
  virtual bool ended() const = 0;
  virtual std::string end_reason() const = 0;

 protected:
  ByteStream() = default;
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;
};

}  // namespace konn::testclient
