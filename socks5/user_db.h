#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <unordered_map>

namespace konn::socks5 {

// Users for RFC 1929 authentication, from a file of `user:hash` lines where the hash is a
// crypt(3) string (`$6$salt$...` SHA-512 recommended; `openssl passwd -6` makes one). Blank
// lines and lines starting with '#' are skipped. Plain passwords are never accepted: a hash must
// start with '$'.
//
// The file is re-read when its modification time, size or inode changes (checked at most once
// per `recheck` interval, on the next verification). A file that fails to load keeps the previous
// users and logs the problem.
//
// Thread-safe: sessions on every worker call verify().
class UserDb {
 public:
  explicit UserDb(std::string path,
                  std::chrono::milliseconds recheck = std::chrono::milliseconds(1000));

  // Loads the file now. Returns "" or an error text (startup is fatal on error).
  std::string load();

  // True when `user` exists and `password` matches its hash. Takes about as long for unknown
  // users as for known ones (a dummy hash is checked), so timing does not reveal user names.
  bool verify(std::string_view user, std::string_view password);

  size_t size() const;

 private:
  using Table = std::unordered_map<std::string, std::string>;
  void maybe_reload();

  const std::string path_;
  const std::chrono::milliseconds recheck_;
  mutable std::mutex mu_;  // guards everything below
  std::shared_ptr<const Table> users_ = std::make_shared<Table>();
  std::chrono::steady_clock::time_point last_check_{};
  struct FileStamp {
    int64_t mtime_ns = -1;
    int64_t size = -1;
    uint64_t inode = 0;
    bool operator==(const FileStamp&) const = default;
  } stamp_;
};

// Checks `password` against a crypt(3) hash with crypt_r (thread-safe), in constant time over the
// hash text.
bool check_crypt(std::string_view password, const std::string& hash);

}  // namespace konn::socks5
