// A private redis-server for one test (a stand-in until the shared fixture lands): started on a
// free loopback port in a fresh temporary directory, no persistence, stopped when the object
// goes. The constructor returns once the port accepts connections, and throws (the test fails,
// never skips) when redis-server cannot start. kill() stops it at once (SIGKILL).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/temp_dir.hpp"

namespace rc::test {

class redis_server {
 public:
  redis_server() {
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = free_port();
      if (launch()) return;
      kill();
    }
    throw std::runtime_error("redis_server: redis-server did not start (is it installed?)");
  }
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;
  ~redis_server() { stop(SIGTERM); }

  std::uint16_t port() const noexcept { return port_; }
  void kill() { stop(SIGKILL); }

 private:
  static std::uint16_t free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (fd >= 0) ::close(fd);
      throw std::runtime_error("redis_server: no free port");
    }
    ::close(fd);
    return ntohs(a.sin_port);
  }

  bool accepts() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port_);
    const bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (fd >= 0) ::close(fd);
    return ok;
  }

  bool launch() {
    std::vector<std::string> args = {"redis-server", "--port",    std::to_string(port_),
                                     "--bind",       "127.0.0.1", "--dir",
                                     dir_.path(),    "--save",    "",
                                     "--appendonly", "no",        "--protected-mode",
                                     "no",           "--logfile", dir_.path() + "/redis.log"};
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("redis_server: fork failed");
    if (pid == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::_Exit(127);
    }
    pid_ = pid;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      if (accepts()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  void stop(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  temp_dir dir_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace rc::test
