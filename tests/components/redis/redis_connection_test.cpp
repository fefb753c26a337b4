// rc::redis_connection against a real redis-server (tests/support/redis_server.hpp): replies of
// every kind, pipelining in order, the timeout of a command the server never answers, and the
// reconnection after the server is killed and restarted.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <future>
#include <optional>
#include <thread>

#include "rc/error.hpp"
#include "rc/redis.hpp"
#include "support/redis_server.hpp"

namespace redis_connection_test {

namespace {

using namespace std::chrono_literals;

// An io_context run by one thread for the test's length.
struct io_thread {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
  ~io_thread() {
    guard.reset();
    io.stop();
    thread.join();
  }
};

struct result {
  std::error_code ec;
  rc::redis_reply reply;
};

result call(rc::redis_connection& c, std::vector<std::string> args, rc::duration timeout = 1s) {
  std::promise<result> p;
  auto f = p.get_future();
  c.command(std::move(args), timeout, [&](std::error_code ec, rc::redis_reply r) { p.set_value({ec, std::move(r)}); });
  return f.get();
}

bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return cond();
}

rc::redis_options options_for(const rc::test::redis_server& s) {
  rc::redis_options o;
  o.port = s.port();
  return o;
}

}  // namespace

TEST_CASE("redis connection: replies of every kind, by callback and by co_await", "[redis]") {
  rc::test::redis_server server;
  io_thread t;
  rc::redis_connection c(t.io, options_for(server));

  auto set = call(c, {"SET", "greeting", "hello world"});
  REQUIRE_FALSE(set.ec);
  CHECK(set.reply.type == rc::redis_reply::kind::status);
  CHECK(set.reply.str == "OK");
  CHECK(call(c, {"GET", "greeting"}).reply.str == "hello world");
  CHECK(call(c, {"GET", "missing"}).reply.is_nil());
  CHECK(call(c, {"INCRBY", "n", "41"}).reply.as_integer() == 41);
  auto err = call(c, {"INCR", "greeting"});
  REQUIRE_FALSE(err.ec);  // a server error is a reply, not a transport failure
  CHECK(err.reply.is_error());
  CHECK(err.reply.str.rfind("ERR", 0) == 0);
  call(c, {"RPUSH", "list", "a", "", "c"});
  auto list = call(c, {"LRANGE", "list", "0", "-1"});
  REQUIRE(list.reply.is_array());
  REQUIRE(list.reply.elements.size() == 3);
  CHECK(list.reply.elements[1].str.empty());
  CHECK(list.reply.elements[2].str == "c");
  // Binary-safe: a value with CR LF and a NUL goes through unchanged.
  const std::string binary("a\r\nb\0c", 6);
  call(c, {"SET", "bin", binary});
  CHECK(call(c, {"GET", "bin"}).reply.str == binary);

  // The awaitable form, from a task. The argument lists are built outside the coroutine: GCC 12
  // mishandles a braced list's backing array inside a coroutine frame.
  std::promise<std::string> got;
  std::vector<std::string> set_k{"SET", "k", "v1"}, get_k{"GET", "k"};
  rc::spawn([&]() -> rc::task<void> {
    try {
      co_await c.command(set_k);
      rc::redis_reply r = co_await c.command(get_k);
      got.set_value(r.str);
    } catch (...) {
      got.set_exception(std::current_exception());
    }
  });
  CHECK(got.get_future().get() == "v1");
  CHECK(c.connected());
}

TEST_CASE("redis connection: 1000 pipelined commands are answered in order", "[redis]") {
  rc::test::redis_server server;
  io_thread t;
  rc::redis_connection c(t.io, options_for(server));
  REQUIRE_FALSE(call(c, {"PING"}).ec);

  constexpr int n = 1000;
  std::vector<long long> values(n, -1);
  std::atomic<int> done{0};
  std::promise<void> all;
  const auto sent_before = c.stats().sent;
  for (int i = 0; i < n; ++i) {
    c.command({"INCR", "counter"}, [&, i](std::error_code ec, rc::redis_reply r) {
      values[i] = ec ? -2 : r.integer;
      if (done.fetch_add(1) + 1 == n) all.set_value();
    });
  }
  REQUIRE(all.get_future().wait_for(5s) == std::future_status::ready);
  for (int i = 0; i < n; ++i) REQUIRE(values[i] == i + 1);
  CHECK(c.stats().sent - sent_before == n);
  CHECK(c.stats().timeouts == 0);
}

TEST_CASE("redis connection: a command the server does not answer times out on time", "[redis]") {
  rc::test::redis_server server;
  io_thread t;
  rc::redis_connection c(t.io, options_for(server));
  REQUIRE_FALSE(call(c, {"PING"}).ec);

  server.pause();
  const auto start = std::chrono::steady_clock::now();
  auto r = call(c, {"PING"}, 100ms);
  const auto took = std::chrono::steady_clock::now() - start;
  server.resume();
  CHECK(r.ec == rc::redis_errc::timeout);
  CHECK(took >= 100ms);
  CHECK(took < 400ms);
  CHECK(c.stats().timeouts == 1);

  // The awaitable form throws RC5011.
  server.pause();
  std::promise<rc::errc> code;
  std::vector<std::string> ping{"PING"};
  rc::spawn([&]() -> rc::task<void> {
    try {
      co_await c.command(ping, 50ms);
      code.set_value(rc::errc::step_failed);
    } catch (const rc::error& e) {
      code.set_value(e.code());
    }
  });
  CHECK(code.get_future().get() == rc::errc::timed_out);
  server.resume();

  // The late replies are discarded in order: the next command gets its own answer.
  auto after = call(c, {"ECHO", "mine"});
  REQUIRE_FALSE(after.ec);
  CHECK(after.reply.str == "mine");
}

TEST_CASE("redis connection: reconnects by itself after the server is killed and restarted", "[redis]") {
  rc::test::redis_server server;
  io_thread t;
  rc::redis_options o = options_for(server);
  o.reconnect_min = 10ms;
  o.reconnect_max = 100ms;
  rc::redis_connection c(t.io, o);
  std::atomic<int> ups{0}, downs{0};
  c.on_state([&](bool up) { (up ? ups : downs).fetch_add(1); });
  REQUIRE_FALSE(call(c, {"SET", "a", "1"}).ec);

  server.kill();
  REQUIRE(wait_for([&] { return !c.connected(); }, 2000ms));
  // While the server is gone a command fails at once; it does not wait for its timeout.
  const auto start = std::chrono::steady_clock::now();
  auto r = call(c, {"GET", "a"}, 2s);
  CHECK(r.ec == rc::redis_errc::disconnected);
  CHECK(std::chrono::steady_clock::now() - start < 500ms);

  server.restart();
  REQUIRE(wait_for([&] { return c.connected(); }, 2000ms));
  auto again = call(c, {"SET", "a", "2"});
  REQUIRE_FALSE(again.ec);
  CHECK(call(c, {"GET", "a"}).reply.str == "2");
  CHECK(downs.load() >= 1);
  CHECK(ups.load() >= 2);
  CHECK(c.stats().connects >= 2);
}

TEST_CASE("redis connection: close fails what is pending and later commands", "[redis]") {
  rc::test::redis_server server;
  io_thread t;
  auto c = std::make_unique<rc::redis_connection>(t.io, options_for(server));
  REQUIRE_FALSE(call(*c, {"PING"}).ec);
  server.pause();
  std::promise<std::error_code> pending;
  c->command({"PING"}, 5s, [&](std::error_code ec, rc::redis_reply) { pending.set_value(ec); });
  c->close();
  CHECK(pending.get_future().get() == rc::redis_errc::closed);
  CHECK(call(*c, {"PING"}).ec == rc::redis_errc::closed);
  server.resume();
  c.reset();
}

}  // namespace redis_connection_test
