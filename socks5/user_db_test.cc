#include "socks5/user_db.h"

#include <crypt.h>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>

#include <catch2/catch.hpp>

using konn::socks5::check_crypt;
using konn::socks5::UserDb;

namespace {

std::string sha512(const std::string& pw, const std::string& salt) {
  crypt_data data{};
  return crypt_r(pw.c_str(), ("$6$" + salt + "$").c_str(), &data);
}

struct TempFile {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("konn-users-" + std::to_string(::getpid()) + "-" +
                                                std::to_string(reinterpret_cast<uintptr_t>(this)));
  ~TempFile() { std::filesystem::remove(path); }
  void write(const std::string& text) {
    auto tmp = path.string() + ".new";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, path);  // atomic replace, as editors and config tools do
  }
};

}  // namespace

TEST_CASE("check_crypt accepts the right password only", "[users]") {
  auto h = sha512("s3cret", "abcdefgh");
  CHECK(check_crypt("s3cret", h));
  CHECK_FALSE(check_crypt("s3cret!", h));
  CHECK_FALSE(check_crypt("", h));
  CHECK_FALSE(check_crypt("s3cret", "*"));
}

TEST_CASE("users file loads, rejects plain passwords, and reloads on change", "[users]") {
  TempFile f;
  f.write("# operators\nalice:" + sha512("wonder", "salt1") + "\n\nbob:" + sha512("builder", "s2") +
          "\n");
  UserDb db(f.path.string(), std::chrono::milliseconds(0));
  REQUIRE(db.load().empty());
  CHECK(db.size() == 2);
  CHECK(db.verify("alice", "wonder"));
  CHECK_FALSE(db.verify("alice", "builder"));
  CHECK_FALSE(db.verify("carol", "wonder"));

  f.write("alice:" + sha512("looking-glass", "salt3") + "\n");
  CHECK(db.verify("alice", "looking-glass"));
  CHECK_FALSE(db.verify("bob", "builder"));
  CHECK(db.size() == 1);

  // A broken file keeps the previous users.
  f.write("alice:plaintext\n");
  CHECK(db.verify("alice", "looking-glass"));

  TempFile plain;
  plain.write("alice:wonder\n");
  UserDb bad(plain.path.string());
  CHECK_FALSE(bad.load().empty());
}
