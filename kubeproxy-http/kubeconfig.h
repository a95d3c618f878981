#pragma once

// The kubeconfig loader moved to core/kube (the proxy-server reads a kubeconfig too, for
// TokenReviews); these names keep kubeproxy-http's code unchanged.
#include "core/kube/kubeconfig.h"

namespace konn::kubeproxy {

using core::kube::CredentialSource;
using core::kube::decode_base64;
using core::kube::ExecConfig;
using core::kube::KubeconfigEnvironment;
using core::kube::KubeconfigError;
using core::kube::KubeconfigOverrides;
using core::kube::load_rest_config;
using core::kube::RestConfig;

}  // namespace konn::kubeproxy
