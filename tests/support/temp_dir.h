#pragma once

#include <string>

namespace konn::testsupport {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction. Paths are
// kept short: unix socket paths must fit in 108 bytes.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "konn");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name
  std::string file(const std::string& name) const;

 private:
  std::string path_;
};

}  // namespace konn::testsupport
