#pragma once

#include <string>

namespace konn::core::config {

// A random (version 4) UUID in its canonical text form, for default server and agent ids.
std::string make_uuid_v4();

}  // namespace konn::core::config
