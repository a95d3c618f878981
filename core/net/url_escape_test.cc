#include "core/net/url_escape.h"

#include <catch2/catch.hpp>

using konn::core::net::url_unescape;
using konn::core::net::UrlPart;

TEST_CASE("url_unescape decodes escapes, and '+' only in a query component", "[net]") {
  CHECK(url_unescape("a%20b+c", UrlPart::QueryComponent) == std::optional<std::string>("a b c"));
  CHECK(url_unescape("a%20b+c", UrlPart::Userinfo) == std::optional<std::string>("a b+c"));
  CHECK(url_unescape("p%40ss%3Aw%25rd", UrlPart::Userinfo) ==
        std::optional<std::string>("p@ss:w%rd"));
  CHECK(url_unescape("%7e%7E", UrlPart::Userinfo) == std::optional<std::string>("~~"));
  CHECK(url_unescape("", UrlPart::QueryComponent) == std::optional<std::string>(""));
  CHECK(url_unescape("%00", UrlPart::Userinfo) == std::optional<std::string>(std::string(1, '\0')));
}

TEST_CASE("url_unescape refuses a '%' without two hex digits", "[net]") {
  for (const char* bad : {"%", "%4", "a%", "%zz", "%4g", "%+1", "%-1", "% 1", "x%0"}) {
    INFO(bad);
    CHECK_FALSE(url_unescape(bad, UrlPart::QueryComponent));
    CHECK_FALSE(url_unescape(bad, UrlPart::Userinfo));
  }
}

TEST_CASE("redact_url_credentials: a URL's user and password are never shown", "[net]") {
  using konn::core::net::redact_url_credentials;
  CHECK(redact_url_credentials("http://user:secret@proxy:3128") == "http://***@proxy:3128");
  CHECK(redact_url_credentials("https://admin:pw@10.0.0.1:6443/base") == "https://***@10.0.0.1:6443/base");
  CHECK(redact_url_credentials("http://proxy:3128/a@b") == "http://proxy:3128/a@b");
  CHECK(redact_url_credentials("proxy:3128") == "proxy:3128");
  CHECK(redact_url_credentials("") == "");
}
