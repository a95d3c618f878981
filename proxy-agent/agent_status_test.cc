#include "proxy-agent/agent_status.h"

#include <catch2/catch.hpp>

TEST_CASE("agent status: an egress proxy URL is shown without its credentials", "[agent]") {
  using konn::agent::redact_url_credentials;
  CHECK(redact_url_credentials("http://user:secret@proxy:3128") == "http://***@proxy:3128");
  CHECK(redact_url_credentials("http://proxy:3128/a@b") == "http://proxy:3128/a@b");
  CHECK(redact_url_credentials("proxy:3128") == "proxy:3128");
  CHECK(redact_url_credentials("") == "");
}
