#pragma once

// One place for the Asio 1.22 spellings we use, so an Asio upgrade (where some of these leave
// `experimental`) touches one file.
#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>

namespace konn::core::io {

// co_await op(..., use_nothrow): errors come back as values (std::tuple<error_code, ...>), so no
// exception crosses a handler.
constexpr auto use_nothrow = asio::experimental::as_tuple(asio::use_awaitable);

template <typename T = void>
using Awaitable = asio::awaitable<T>;

}  // namespace konn::core::io
