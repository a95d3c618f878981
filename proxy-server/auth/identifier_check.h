#pragma once

#include <string>
#include <vector>

#include "core/tls/certificate_names.h"
#include "core/tunnel/agent_identifiers.h"

namespace konn::server {

// --verify-agent-identifiers=cert: what an agent may claim is what its client certificate proves.
//  - host=<name>: a DNS subjectAltName equal to it (case-insensitive; no wildcards);
//  - ipv4=/ipv6=<address>: an IP subjectAltName equal to it;
//  - cidr= and default-route=true (traffic for many destinations): only agents whose certificate
//    common name or a DNS subjectAltName is in `route_agents` (--route-agent-names).
// Returns one line per identifier not proven ("host=node-b"); empty when all are.
std::vector<std::string> unproven_identifiers(const core::tunnel::AgentIdentifiers& ids,
                                              const core::tls::CertificateNames& cert,
                                              const std::vector<std::string>& route_agents);

}  // namespace konn::server
