#include "tests/support/process_runner.h"

#include <fstream>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/support/echo_server.h"
#include "tests/support/loopback.h"
#include "tests/support/temp_dir.h"

using namespace konn::testsupport;

namespace {

ProcessOptions shell(const std::string& script) {
  ProcessOptions o;
  o.binary = "sh";
  o.search_path = true;
  o.args = {"-c", script};
  return o;
}

}  // namespace

TEST_CASE("process: captures stderr and waits for a line", "[support]") {
  Process p(shell("echo starting >&2; echo 'server is ready' >&2; exec sleep 30"));
  REQUIRE(p.wait_for_log("is ready", 5s));
  CHECK(p.running());
  CHECK(p.count_in_log("starting") == 1);
  CHECK(p.terminate(5s) == 128 + SIGTERM);
  CHECK_FALSE(p.running());
}

TEST_CASE("process: the child holds none of the parent's descriptors", "[support]") {
  // A pipe without O_CLOEXEC, as Asio opens sockets: once the parent closes its write end, the
  // reader must see EOF even though a child started in between still runs.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  Process p(shell("exec sleep 30"));
  ::close(fds[1]);
  char c = 0;
  CHECK(::read(fds[0], &c, 1) == 0);
  ::close(fds[0]);
  CHECK(p.running());
}

TEST_CASE("process: wait_for_log gives up early when the child exits", "[support]") {
  Process p(shell("echo other >&2; exit 3"));
  auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(p.wait_for_log("never printed", 10s));
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(p.wait_exit(1s) == 3);
}

TEST_CASE("process: run_process returns code and output and times out a hang", "[support]") {
  RunResult ok = run_process(shell("echo out; echo err >&2; exit 7"), 5s);
  CHECK(ok.exit_code == 7);
  CHECK(ok.output.find("out") != std::string::npos);
  CHECK(ok.output.find("err") != std::string::npos);

  RunResult hang = run_process(shell("exec sleep 30"), 200ms);
  CHECK(hang.timed_out);
  CHECK(hang.exit_code == -1);
}

TEST_CASE("process: stdin and stdout files, environment", "[support]") {
  TempDir dir;
  {
    FILE* f = std::fopen(dir.file("in").c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("from stdin", f);
    std::fclose(f);
  }
  ProcessOptions o = shell("cat; printf \" $KONN_TEST_VAR\"");
  o.stdin_path = dir.file("in");
  o.stdout_path = dir.file("out");
  o.env = {{"KONN_TEST_VAR", "set"}};
  RunResult r = run_process(std::move(o), 5s);
  CHECK(r.exit_code == 0);
  FILE* f = std::fopen(dir.file("out").c_str(), "r");
  REQUIRE(f != nullptr);
  char buf[64] = {};
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  CHECK(std::string(buf, n) == "from stdin set");
}

TEST_CASE("process: waits for a TCP port and a unix socket", "[support]") {
  Process p(shell("exec sleep 30"));
  EchoServer echo;
  CHECK(p.wait_for_tcp_port(echo.port(), 2s));
  uint16_t unused = free_tcp_port();
  CHECK_FALSE(p.wait_for_tcp_port(unused, 100ms));
  TempDir dir;
  CHECK_FALSE(p.wait_for_unix_socket(dir.file("none.sock"), 100ms));
}

TEST_CASE("process: missing binary throws", "[support]") {
  ProcessOptions o;
  o.binary = "/nonexistent/konn-binary";
  CHECK_THROWS(Process(o));
}

TEST_CASE("process: what the child started ends with it (a shell pipeline's commands)",
          "[support]") {
  TempDir dir;
  std::string pid_file = dir.file("grandchild.pid");
  pid_t grandchild = 0;
  {
    Process p(shell("sleep 60 & echo $! > " + pid_file + "; sleep 60"));
    REQUIRE(eventually(
        [&] {
          std::ifstream in(pid_file);
          return static_cast<bool>(in >> grandchild) && grandchild > 0;
        },
        std::chrono::seconds(10)));
    REQUIRE(::kill(grandchild, 0) == 0);
  }
  // Killed: gone, or a zombie until whoever adopted it reaps it.
  auto ended = [&] {
    std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
    std::string pid, comm, state;
    return !(stat >> pid >> comm >> state) || state == "Z";
  };
  CHECK(eventually(ended, std::chrono::seconds(5)));
}
