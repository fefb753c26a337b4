// A private redis-server for one test: started on a free loopback port in a fresh temporary
// directory, without persistence (--save "" --appendonly no), stopped (and its directory removed)
// when the object goes. The constructor returns once PING answers PONG.
//
// If redis-server cannot be started (not installed, does not answer), the constructor throws, so
// the test FAILS with the reason and the server's log: tests that need Redis never skip. They
// carry the Catch tag [redis] (ctest label "redis"). $RC_REDIS_SERVER names another binary.
//
// Failure tests: kill() (SIGKILL: the server is gone at once, connections reset), restart() (the
// same port, empty data), pause() / resume() (SIGSTOP / SIGCONT: the server is there but answers
// nothing, as a server stalled by a fork or a swap storm would).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/temp_dir.hpp"

namespace rc::test {

class redis_server {
 public:
  redis_server() : redis_server(std::vector<std::string>{}) {}
  /// With more redis-server arguments (e.g. {"--cluster-enabled", "yes"}).
  explicit redis_server(std::vector<std::string> extra_args) : extra_(std::move(extra_args)) {
    // A free port can be taken between the probe and the server's bind: try a few.
    std::string last;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = free_port();
      try {
        launch();
        return;
      } catch (const std::exception& e) {
        last = e.what();
        stop_process(SIGKILL);
      }
    }
    throw std::runtime_error("redis_server: cannot start redis-server: " + last);
  }
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;
  ~redis_server() {
    if (paused_) ::kill(pid_, SIGCONT);
    stop_process(SIGTERM);
  }

  std::uint16_t port() const noexcept { return port_; }
  std::string host() const { return "127.0.0.1"; }
  bool running() const noexcept { return pid_ > 0; }

  /// SIGKILL, and waits until the process is gone.
  void kill() {
    if (paused_) ::kill(pid_, SIGCONT);
    paused_ = false;
    stop_process(SIGKILL);
  }
  /// Starts the server again on the same port (after kill()), empty; returns once PING answers.
  void restart() {
    if (pid_ > 0) kill();
    launch();
  }
  void pause() {
    if (pid_ > 0 && !paused_) ::kill(pid_, SIGSTOP);
    paused_ = true;
  }
  void resume() {
    if (pid_ > 0 && paused_) ::kill(pid_, SIGCONT);
    paused_ = false;
  }

  /// One command over a fresh blocking socket; the raw RESP answer (tests' checks, not traffic).
  std::string raw(const std::vector<std::string>& args) const {
    const int fd = connect_fd();
    if (fd < 0) throw std::runtime_error("redis_server: cannot connect");
    std::string req = "*" + std::to_string(args.size()) + "\r\n";
    for (const auto& a : args) req += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
    (void)!::write(fd, req.data(), req.size());
    std::string out;
    char buf[4096];
    timeval tv{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) out.assign(buf, static_cast<std::size_t>(n));
    ::close(fd);
    return out;
  }

  std::string log() const {
    std::ifstream in(dir_ / "redis.log");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  static std::uint16_t free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (fd >= 0) ::close(fd);
      throw std::runtime_error("redis_server: no free port");
    }
    ::close(fd);
    return ntohs(a.sin_port);
  }

  int connect_fd() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port_);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  bool pong() const {
    const int fd = connect_fd();
    if (fd < 0) return false;
    timeval tv{0, 200000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const char ping[] = "PING\r\n";
    bool ok = ::write(fd, ping, sizeof ping - 1) == static_cast<ssize_t>(sizeof ping - 1);
    char buf[16] = {};
    ok = ok && ::read(fd, buf, sizeof buf - 1) >= 5 && std::string(buf).rfind("+PONG", 0) == 0;
    ::close(fd);
    return ok;
  }

  void launch() {
    const char* env = std::getenv("RC_REDIS_SERVER");
    const std::string binary = env && *env ? env : "redis-server";
    const std::string port = std::to_string(port_);
    const std::string logfile = dir_ / "redis.log";
    std::vector<std::string> args = {binary,      "--port",    port,    "--bind",           "127.0.0.1", "--dir",
                                     dir_.path(), "--save",    "",      "--appendonly",     "no",        "--daemonize",
                                     "no",        "--logfile", logfile, "--protected-mode", "no"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("redis_server: fork failed");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test that crashes does not leave its server behind
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::_Exit(127);  // not found: the parent sees the exit and says so
    }
    pid_ = pid;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error(binary + " exited (status " + std::to_string(status) +
                                 (WIFEXITED(status) && WEXITSTATUS(status) == 127 ? ": not installed?" : "") +
                                 ") on port " + port + "; log: " + log());
      }
      if (pong()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    throw std::runtime_error(binary + " did not answer PING within 10 s on port " + port + "; log: " + log());
  }

  void stop_process(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    pid_ = -1;
  }

  std::vector<std::string> extra_;
  temp_dir dir_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
  bool paused_ = false;
};

}  // namespace rc::test
