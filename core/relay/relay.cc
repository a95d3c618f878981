#include "core/relay/relay.h"

// Explicit instantiation for the common case keeps compile times down for users.
template konn::core::io::Awaitable<konn::core::relay::RelayStats>
konn::core::relay::relay<asio::ip::tcp::socket, asio::ip::tcp::socket>(asio::ip::tcp::socket&,
                                                                       asio::ip::tcp::socket&,
                                                                       size_t);
