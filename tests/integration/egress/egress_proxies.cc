#include "tests/integration/egress/egress_proxies.h"

#include <csignal>
#include <fstream>
#include <netinet/in.h>
#include <sstream>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/loopback.h"

namespace konn::e2e {
namespace {

using testsupport::Process;
using testsupport::ProcessOptions;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

// Run as root, squid switches to its `proxy` user: that user must reach the files of the dir.
void open_to_all(const std::string& path, mode_t mode) {
  if (::chmod(path.c_str(), mode) != 0) throw std::runtime_error("cannot chmod " + path);
}

std::string proxy_url(uint16_t port, const std::string& userinfo) {
  return "http://" + (userinfo.empty() ? std::string() : userinfo + "@") +
         "127.0.0.1:" + std::to_string(port);
}

constexpr const char* kSquid = "/usr/sbin/squid";
constexpr const char* kSquidAuth = "/usr/lib/squid/basic_ncsa_auth";
constexpr const char* kTinyproxy = "/usr/bin/tinyproxy";

void require_installed(const char* path, const char* package) {
  if (::access(path, X_OK) != 0) {
    throw std::runtime_error(std::string(path) + " missing: install the Debian package " + package +
                             " (scripts/setup.sh)");
  }
}

}  // namespace

SquidProxy::SquidProxy(const ProxyConfig& config) : port_(testsupport::free_tcp_port()) {
  require_installed(kSquid, "squid");
  open_to_all(dir_.path(), 0777);
  std::ostringstream conf;
  conf << "http_port 127.0.0.1:" << port_ << "\n"
       << "pid_filename " << dir_.file("squid.pid") << "\n"
       << "cache_log " << dir_.file("cache.log") << "\n"
       << "access_log stdio:" << dir_.file("access.log") << "\n"
       << "cache deny all\n"
       << "cache_mem 0 MB\n"
       << "coredump_dir " << dir_.path() << "\n"
       << "netdb_filename none\n"
       << "pinger_enable off\n"
       << "shutdown_lifetime 0 seconds\n"
       << "acl from_loopback src 127.0.0.1/32 ::1\n";
  for (uint16_t p : config.denied_ports) {
    conf << "acl denied_port port " << p << "\n";
  }
  if (!config.denied_ports.empty()) conf << "http_access deny CONNECT denied_port\n";
  if (!config.user.empty()) {
    require_installed(kSquidAuth, "squid");
    ProcessOptions o;
    o.binary = "openssl";
    o.search_path = true;
    o.args = {"passwd", "-apr1", config.password};
    auto hash = testsupport::run_process(std::move(o), 10s);
    if (hash.exit_code != 0) throw std::runtime_error("openssl passwd: " + hash.output);
    while (!hash.output.empty() && hash.output.back() == '\n') hash.output.pop_back();
    write_file(dir_.file("passwd"), config.user + ":" + hash.output + "\n");
    open_to_all(dir_.file("passwd"), 0644);
    conf << "auth_param basic program " << kSquidAuth << " " << dir_.file("passwd") << "\n"
         << "auth_param basic children 1 startup=1 idle=1\n"
         << "acl authenticated proxy_auth REQUIRED\n"
         << "http_access deny !authenticated\n";
  }
  conf << "http_access allow from_loopback\n"
       << "http_access deny all\n";
  write_file(dir_.file("squid.conf"), conf.str());
  open_to_all(dir_.file("squid.conf"), 0644);

  ProcessOptions o;
  o.binary = kSquid;
  o.args = {"-N", "-f", dir_.file("squid.conf")};
  o.log_path = dir_.file("squid.out");
  process_ = std::make_unique<Process>(std::move(o));
  if (!process_->wait_for_tcp_port(port_, 20s)) {
    throw std::runtime_error("squid did not come up; output:\n" + process_->log() +
                             "\ncache.log:\n" + read_file(dir_.file("cache.log")));
  }
}

SquidProxy::~SquidProxy() {
  // Nothing to keep: SIGKILL (squid takes seconds over a SIGTERM); helpers exit on their EOF.
  if (process_) {
    process_->kill(SIGKILL);
    process_->wait_exit(5s);
  }
}

std::string SquidProxy::url(const std::string& userinfo) const {
  return proxy_url(port_, userinfo);
}

std::string SquidProxy::access_log() const { return read_file(dir_.file("access.log")); }

Tinyproxy::Tinyproxy(const ProxyConfig& config) : port_(testsupport::free_tcp_port()) {
  require_installed(kTinyproxy, "tinyproxy");
  open_to_all(dir_.path(), 0777);
  std::ostringstream conf;
  conf << "Port " << port_ << "\n"
       << "Listen 127.0.0.1\n"
       << "Timeout 600\n"
       << "LogFile \"" << dir_.file("tinyproxy.log") << "\"\n"
       << "LogLevel Connect\n"
       << "PidFile \"" << dir_.file("tinyproxy.pid") << "\"\n"
       << "MaxClients 100\n"
       << "Allow 127.0.0.1\n";
  if (!config.user.empty()) conf << "BasicAuth " << config.user << " " << config.password << "\n";
  for (uint16_t p : config.allowed_ports) conf << "ConnectPort " << p << "\n";
  write_file(dir_.file("tinyproxy.conf"), conf.str());

  ProcessOptions o;
  o.binary = kTinyproxy;
  o.args = {"-d", "-c", dir_.file("tinyproxy.conf")};
  o.log_path = dir_.file("tinyproxy.out");
  process_ = std::make_unique<Process>(std::move(o));
  if (!process_->wait_for_tcp_port(port_, 20s)) {
    throw std::runtime_error("tinyproxy did not come up; output:\n" + process_->log() + "\nlog:\n" +
                             log());
  }
}

Tinyproxy::~Tinyproxy() {
  // Nothing to keep: SIGKILL (squid takes seconds over a SIGTERM); helpers exit on their EOF.
  if (process_) {
    process_->kill(SIGKILL);
    process_->wait_exit(5s);
  }
}

std::string Tinyproxy::url(const std::string& userinfo) const { return proxy_url(port_, userinfo); }

std::string Tinyproxy::log() const { return read_file(dir_.file("tinyproxy.log")); }

SilentListener::SilentListener() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  // NOLINTBEGIN(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API takes sockaddr*.
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(fd_, 64) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("SilentListener: cannot listen");
  }
  // NOLINTEND(cppcoreguidelines-pro-type-reinterpret-cast)
  port_ = ntohs(addr.sin_port);
}

SilentListener::~SilentListener() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace konn::e2e
