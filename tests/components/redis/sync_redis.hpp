// A blocking Redis client for the checks of the cache and stream tests: one rc::redis_connection
// on an io_context of its own, run by its own thread, and cmd() waiting for each reply.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rc/redis.hpp"

namespace rc::test {

/// Runs `f` with a deadline: ends the test binary loudly (instead of hanging it) when `f` does
/// not return in time (a source that never finishes).
template <class F>
void within(std::chrono::seconds limit, F f) {
  auto done = std::async(std::launch::async, std::move(f));
  if (done.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "redis test: still running after %llds, giving up\n", static_cast<long long>(limit.count()));
    std::_Exit(1);
  }
  done.get();
}

class sync_redis {
 public:
  explicit sync_redis(std::uint16_t port)
      : guard_(boost::asio::make_work_guard(io_)),
        conn_(io_, rc::redis_options{.port = port, .command_timeout = std::chrono::seconds(5)}),
        thread_([this] { io_.run(); }) {}
  ~sync_redis() {
    conn_.close();
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  sync_redis(const sync_redis&) = delete;
  sync_redis& operator=(const sync_redis&) = delete;

  /// The reply; an error reply or a transport failure throws.
  rc::redis_reply cmd(std::vector<std::string> args) {
    std::promise<rc::redis_reply> done;
    auto reply = done.get_future();
    conn_.command(std::move(args), [&done](std::error_code ec, rc::redis_reply r) {
      if (ec)
        done.set_exception(std::make_exception_ptr(std::runtime_error("redis: " + ec.message())));
      else
        done.set_value(std::move(r));
    });
    rc::redis_reply r = reply.get();
    if (r.is_error()) throw std::runtime_error("redis: " + r.str);
    return r;
  }
  long long integer(std::vector<std::string> args) { return cmd(std::move(args)).as_integer(); }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  rc::redis_connection conn_;
  std::thread thread_;
};

}  // namespace rc::test
