// rc::redis_connection: one pipelined connection to a Redis server, on an Asio io_context (the
// context's, normally), with no blocking call anywhere. hiredis parses replies (its RESP reader);
// none of its types appear here.
//
// - command(args, callback) queues a command from any thread; commands are written in batches
//   (pipelining) and answered in order. command(args) is the awaitable form: co_await it in a
//   task; a transport failure throws rc::error (RC5011 timeout, RC5010 connection failed), while
//   a server error reply (-ERR ...) is returned as a reply of kind error.
// - Every command has a timeout (options.command_timeout, or one given to command()). A command
//   that times out is answered with redis_errc::timeout at once; its late reply is discarded.
// - The connection reconnects by itself with an exponential backoff (reconnect_min doubling up
//   to reconnect_max, with jitter). Commands queued before the first connection attempt ends wait
//   for it (within their timeout); commands sent while the connection is known to be down fail at
//   once with redis_errc::disconnected, so nobody waits for a server that is gone. Commands written
//   but not answered when the connection drops fail with disconnected (they may have run).
// - Callbacks run on an io_context thread, outside any lock; the awaitable form resumes its
//   coroutine through a post to the io_context, never inside the reply parser.
// - Destroying the connection (or close()) fails what is still pending with redis_errc::closed.
//
// Keys: the stores built on a connection (rc/redis_store.hpp) hash-tag their keys, `{prefix:key}`,
// so every script of one key stays in one slot of a Redis Cluster. This connection talks to one
// server; it does not follow cluster redirections.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "rc/task.hpp"
#include "rc/time.hpp"

namespace boost::asio {
class io_context;
}

namespace rc {

class context;

/// A Redis reply, owning its data.
struct redis_reply {
  enum class kind : std::uint8_t { nil, integer, string, status, array, error };
  kind type = kind::nil;
  long long integer = 0;
  std::string str;                    // string, status ("OK") or error text ("ERR ...")
  std::vector<redis_reply> elements;  // array

  bool is_nil() const noexcept { return type == kind::nil; }
  bool is_error() const noexcept { return type == kind::error; }
  bool is_integer() const noexcept { return type == kind::integer; }
  bool is_string() const noexcept { return type == kind::string || type == kind::status; }
  bool is_array() const noexcept { return type == kind::array; }
  /// The integer, or a string that holds one (Lua numbers come back as integers, but a string
  /// reply of digits is accepted too). Throws rc::error (RC5001) otherwise.
  long long as_integer() const;
};

/// Transport failures of a command (the callback's error_code; category redis_category()).
enum class redis_errc {
  timeout = 1,       // no reply within the command's timeout
  disconnected = 2,  // the connection is down (or dropped with the command unanswered)
  closed = 3,        // the connection was closed (destroyed) first
  protocol = 4,      // the server sent something the reader cannot parse (the connection resets)
};
const std::error_category& redis_category() noexcept;
inline std::error_code make_error_code(redis_errc e) noexcept { return {static_cast<int>(e), redis_category()}; }

struct redis_options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 6379;
  /// Every command's default timeout (from the moment it is queued to its reply).
  duration command_timeout = std::chrono::milliseconds(1000);
  duration connect_timeout = std::chrono::milliseconds(1000);
  /// Reconnect backoff: the first retry after reconnect_min, doubling up to reconnect_max.
  duration reconnect_min = std::chrono::milliseconds(20);
  duration reconnect_max = std::chrono::milliseconds(1000);
  /// AUTH (when not empty) and SELECT (when not 0), sent first on every (re)connection.
  std::string username;
  std::string password;
  int database = 0;
};

/// Counters of a connection (any thread).
struct redis_connection_stats {
  std::uint64_t sent = 0;
  std::uint64_t replies = 0;
  std::uint64_t timeouts = 0;
  std::uint64_t failed = 0;  // disconnected, closed or protocol
  std::uint64_t connects = 0;
  std::uint64_t disconnects = 0;
};

class redis_connection {
 public:
  using callback = std::function<void(std::error_code, redis_reply)>;
  using state_callback = std::function<void(bool up)>;

  /// Connects at once (asynchronously) on the context's io_context. Needs a real-time context.
  redis_connection(context& ctx, redis_options options);
  /// The same on any io_context (tools, benchmarks); someone must run it.
  redis_connection(boost::asio::io_context& io, redis_options options);
  ~redis_connection();
  redis_connection(const redis_connection&) = delete;
  redis_connection& operator=(const redis_connection&) = delete;

  /// Queues one command (argv: "SET", "k", "v"). `done` runs once, on an io_context thread.
  void command(std::vector<std::string> args, callback done);
  void command(std::vector<std::string> args, duration timeout, callback done);
  /// The awaitable form. Throws rc::error on a transport failure (see the file comment).
  task<redis_reply> command(std::vector<std::string> args);
  task<redis_reply> command(std::vector<std::string> args, duration timeout);

  /// Connected now (the last connection attempt succeeded and has not dropped).
  bool connected() const noexcept;
  /// Called (on an io_context thread) each time the connection comes up or goes down.
  /// One subscriber; set it before traffic starts.
  void on_state(state_callback f);
  redis_connection_stats stats() const noexcept;
  const redis_options& options() const noexcept;
  /// The io_context the connection runs on (where its users resume their coroutines).
  boost::asio::io_context& io() const noexcept;
  /// Fails everything pending with closed and stops reconnecting. Idempotent.
  void close();

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

/// An rc::error for a transport failure (RC5011 for timeout, RC5010 otherwise), naming `what`.
std::exception_ptr redis_failure(std::error_code ec, std::string_view what);

}  // namespace rc

namespace std {
template <>
struct is_error_code_enum<rc::redis_errc> : true_type {};
}  // namespace std
