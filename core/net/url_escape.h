#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace konn::core::net {

// Which part of a URL is being decoded: in a query component '+' stands for a space (Go's
// url.QueryUnescape, for --agent-identifiers); in a userinfo part it is itself (the user and
// password of an http://user:pass@host proxy URL).
enum class UrlPart { QueryComponent, Userinfo };

// Decodes %XX escapes. nullopt when a '%' is not followed by two hex digits, as Go refuses them.
std::optional<std::string> url_unescape(std::string_view s, UrlPart part);

// `url` with any user:password@ replaced by "***@", safe to show on a status page or in a log.
std::string redact_url_credentials(const std::string& url);

}  // namespace konn::core::net
