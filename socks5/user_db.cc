#include "socks5/user_db.h"

#include <crypt.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "core/log/log_macros.h"

namespace konn::socks5 {
namespace {

// A valid SHA-512 crypt hash of a random string: checked for unknown users so they cost the same.
constexpr const char* kDummyHash =
    "$6$konnDummySalt$0H1E2vLqvG6bR0nXGqjU8aVYb1cQ3Q5rV3Y0s7v6H9b1M2k8r4F0b7q8w9e0r1t2y3u4i5o6p7a8"
    "s9d0f1g2h3";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

bool check_crypt(std::string_view password, const std::string& hash) {
  // crypt_data is large (tens of KiB): one per thread, reused.
  thread_local std::unique_ptr<crypt_data> data = std::make_unique<crypt_data>();
  std::string pw(password);
  data->initialized = 0;
  const char* out = crypt_r(pw.c_str(), hash.c_str(), data.get());
  if (out == nullptr || out[0] == '*') return false;
  std::string_view got(out);
  if (got.size() != hash.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff |= static_cast<unsigned char>(got[i] ^ hash[i]);
  }
  return diff == 0;
}

UserDb::UserDb(std::string path, std::chrono::milliseconds recheck)
    : path_(std::move(path)), recheck_(recheck) {}

std::string UserDb::load() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return "users file " + path_ + ": cannot stat";
  std::ifstream in(path_);
  if (!in) return "users file " + path_ + ": cannot open";
  auto table = std::make_shared<Table>();
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    auto t = trim(line);
    if (t.empty() || t.front() == '#') continue;
    auto colon = t.find(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 >= t.size() ||
        t[colon + 1] != '$') {
      return "users file " + path_ + ":" + std::to_string(lineno) +
             ": want user:$id$salt$hash (crypt(3), e.g. `openssl passwd -6`)";
    }
    (*table)[std::string(t.substr(0, colon))] = std::string(t.substr(colon + 1));
  }
  FileStamp stamp{static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                  static_cast<int64_t>(st.st_size), static_cast<uint64_t>(st.st_ino)};
  std::lock_guard lock(mu_);
  users_ = std::move(table);
  stamp_ = stamp;
  return {};
}

void UserDb::maybe_reload() {
  auto now = std::chrono::steady_clock::now();
  FileStamp current;
  {
    std::lock_guard lock(mu_);
    if (now - last_check_ < recheck_) return;
    last_check_ = now;
    current = stamp_;
  }
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return;
  FileStamp seen{static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                 static_cast<int64_t>(st.st_size), static_cast<uint64_t>(st.st_ino)};
  if (seen == current) return;
  static auto log = core::log::get("socks5.users");
  auto err = load();
  if (err.empty()) {
    KONN_LOG(log, info, "reloaded {}: {} users", path_, size());
  } else {
    KONN_LOG(log, warn, "reload failed, keeping the previous users: {}", err);
    std::lock_guard lock(mu_);
    stamp_ = seen;  // do not retry the same broken file on every login
  }
}

bool UserDb::verify(std::string_view user, std::string_view password) {
  maybe_reload();
  std::shared_ptr<const Table> users;
  {
    std::lock_guard lock(mu_);
    users = users_;
  }
  auto it = users->find(std::string(user));
  if (it == users->end()) {
    check_crypt(password, kDummyHash);
    return false;
  }
  return check_crypt(password, it->second);
}

size_t UserDb::size() const {
  std::lock_guard lock(mu_);
  return users_->size();
}

}  // namespace konn::socks5
