// rc::redis_connection: one pipelined connection to a Redis server on an Asio io_context, with
// no blocking call. A stand-in for the Redis streams and cache until the full connection lands
// (same interface): commands are queued from any thread, written in order and answered in
// order; every command has a timeout; a connection that fails or drops fails what was waiting
// on it and is opened again by the next command. hiredis parses replies (its RESP reader only).
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
  /// The integer, or a string holding one. Throws rc::error (RC5001) otherwise.
  long long as_integer() const;
};

/// Transport failures of a command (the callback's error_code; category redis_category()).
enum class redis_errc {
  timeout = 1,       // no reply within the command's timeout
  disconnected = 2,  // the connection is down (or dropped with the command unanswered)
  closed = 3,        // the connection was closed first
  protocol = 4,      // the server sent something the reader cannot parse
};
const std::error_category& redis_category() noexcept;
inline std::error_code make_error_code(redis_errc e) noexcept { return {static_cast<int>(e), redis_category()}; }

struct redis_options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 6379;
  /// Every command's default timeout (from the moment it is queued to its reply).
  duration command_timeout = std::chrono::milliseconds(1000);
};

class redis_connection {
 public:
  using callback = std::function<void(std::error_code, redis_reply)>;

  /// On the context's io_context (a real-time context).
  redis_connection(context& ctx, redis_options options);
  /// On any io_context (tests); someone must run it.
  redis_connection(boost::asio::io_context& io, redis_options options);
  ~redis_connection();
  redis_connection(const redis_connection&) = delete;
  redis_connection& operator=(const redis_connection&) = delete;

  /// Queues one command (argv: "SET", "k", "v"). `done` runs once, on an io_context thread.
  void command(std::vector<std::string> args, callback done);
  void command(std::vector<std::string> args, duration timeout, callback done);
  /// The awaitable form: a transport failure throws rc::error (RC5011 timeout, RC5010 otherwise);
  /// a server error reply is returned as a reply of kind error.
  task<redis_reply> command(std::vector<std::string> args);
  task<redis_reply> command(std::vector<std::string> args, duration timeout);

  const redis_options& options() const noexcept;
  /// Fails everything pending with closed; later commands fail at once. Idempotent.
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
