// Agent identifiers: the `agentidentifiers` header every agent sends (read by the server, which
// routes destHost dials on it) and the agent's own --agent-identifiers flag.
// Input: [strict flag][host to look up, length-prefixed][query string...].

#include <string>

#include "core/tunnel/agent_identifiers.h"
#include "tests/fuzz/fuzz_input.h"

using konn::core::tunnel::parse_agent_identifiers;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  konn::fuzz::FuzzInput in(data, size);
  bool strict = in.flag();
  std::string host = in.bytes(64);
  std::string_view query = in.rest();
  std::string error;
  auto ids = parse_agent_identifiers(query, strict, &error);
  if (!ids) {
    KONN_FUZZ_CHECK(!error.empty());
    return 0;
  }
  // A lenient parse accepts at least what a strict one does.
  if (strict) KONN_FUZZ_CHECK(parse_agent_identifiers(query, false).has_value());
  // Whatever a host claims, the agent serves it by name.
  for (const auto& h : ids->hosts) KONN_FUZZ_CHECK(ids->serves_host(h));
  (void)ids->serves_host(host);
  (void)ids->empty();
  return 0;
}
