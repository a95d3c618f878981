#pragma once

#include <string>

namespace konn::core::tls {

// Reads a whole PEM file. Throws std::runtime_error naming the path when it cannot.
std::string read_pem(const std::string& path);

}  // namespace konn::core::tls
