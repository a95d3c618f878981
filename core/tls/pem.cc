#include "core/tls/pem.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace konn::core::tls {

std::string read_pem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string pem = ss.str();
  if (pem.find("-----BEGIN") == std::string::npos) {
    throw std::runtime_error(path + " holds no PEM block");
  }
  return pem;
}

}  // namespace konn::core::tls
