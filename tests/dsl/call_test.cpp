// Calling a route from application code: ctx.send / ctx.request (co_await) and the blocking
// send_sync / request_sync, through rc::direct endpoints. Virtual time unless the name says real
// time.
#include <catch2/catch.hpp>
#include <cctype>
#include <optional>
#include <rc/rc.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/dsl_support.hpp"

namespace call_test {

using namespace std::chrono_literals;
using rc::test::event_recorder;
using rc::test::rc_error;

namespace {

/// The route behind "double": doubles an int after 250 ms.
auto doubling_route() {
  return rc::craft().id("doubler").from(rc::direct<int>("double")).delay(250ms).transform([](int n) { return n * 2; });
}

/// A destination that never finishes (it waits for the end of time).
class never_finishes final : public rc::destination_base {
 public:
  std::string_view adapter() const override { return "never"; }
  bool synchronous() const noexcept override { return false; }
  rc::task<void> send(rc::exchange&, rc::route_runtime& rt) override {
    (void)co_await rt.clock().wait_until(rc::time_point::max(), nullptr);
  }
};

}  // namespace

// ---- blocking forms in virtual time ------------------------------------------------------------

TEST_CASE("request_sync returns the route's final body and drives virtual time just to the reply") {
  rc::context ctx(rc::virtual_time);
  ctx.add(doubling_route());
  ctx.start();
  CHECK(ctx.request_sync<int>(rc::direct<int>("double"), 21) == 42);
  CHECK(ctx.now().time_since_epoch() == 250ms);
  CHECK(ctx.request_sync<int>(rc::direct<int>("double"), 5) == 10);
  CHECK(ctx.now().time_since_epoch() == 500ms);
  ctx.stop();
}

TEST_CASE("request_sync lets the other routes run while it drives the clock") {
  rc::context ctx(rc::virtual_time);
  rc::spy<rc::tick> ticks;
  ctx.add(doubling_route());
  ctx.add(rc::craft().id("ticker").from(rc::timer({.interval = 100ms, .count = 10})).to(ticks));
  ctx.start();
  CHECK(ctx.request_sync<int>(rc::direct<int>("double"), 1) == 2);
  // The timer's ticks at 0, 100 and 200 ms ran; none after the reply at 250 ms.
  CHECK(ticks.count() == 3);
  ctx.drain();
  CHECK(ticks.count() == 10);
  ctx.stop();
}

TEST_CASE("send_sync waits for the route and the headers reach it") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft().id("orders").from(rc::direct<std::string>("orders")).delay(1s).to(out));
  ctx.start();
  ctx.send_sync(rc::direct<std::string>("orders"), "book", {{"tenant", "acme"}, {"priority", 2}});
  CHECK(ctx.now().time_since_epoch() == 1s);
  REQUIRE(out.count() == 1);
  CHECK(out.bodies() == std::vector<std::string>{"book"});
  const auto received = out.received();
  const auto& headers = received[0].headers;
  CHECK(*headers.find("tenant") == "acme");
  CHECK(*headers.find("priority") == 2);
  ctx.stop();
}

TEST_CASE("a call is an exchange of the route: started and completed events, correlation id its own id") {
  rc::context ctx(rc::virtual_time);
  event_recorder events(ctx);
  ctx.add(doubling_route());
  ctx.start();
  (void)ctx.request_sync<int>(rc::direct<int>("double"), 1);
  const auto started = events.named("route:exchange:started");
  const auto completed = events.named("route:exchange:completed");
  REQUIRE(started.size() == 1);
  REQUIRE(completed.size() == 1);
  CHECK(started[0].details["routeId"] == "doubler");
  CHECK(completed[0].details["exchange"]["body"] == 2);
  ctx.stop();
}

// ---- errors ------------------------------------------------------------------------------------

TEST_CASE("a call to a direct endpoint no route serves is RC5004") {
  rc::context ctx(rc::virtual_time);
  ctx.add(doubling_route());
  ctx.start();
  CHECK_THROWS_MATCHES(ctx.request_sync<int>(rc::direct<int>("triple"), 1), rc::error,
                       rc_error(rc::errc::no_direct_handler, "no route serves direct endpoint \"triple\""));
  CHECK_THROWS_MATCHES(ctx.send_sync(rc::direct<int>("triple"), 1), rc::error,
                       rc_error(rc::errc::no_direct_handler, "\"triple\""));
  ctx.stop();
}

TEST_CASE("a step that throws fails the call with RC5001 and the step's message") {
  rc::context ctx(rc::virtual_time);
  ctx.add(rc::craft().id("broken").from(rc::direct<int>("broken")).transform([](int) -> int {
    throw std::runtime_error("inventory is down");
  }));
  ctx.start();
  CHECK_THROWS_MATCHES(ctx.request_sync<int>(rc::direct<int>("broken"), 1), rc::error,
                       rc_error(rc::errc::step_failed, "inventory is down"));
  ctx.stop();
}

TEST_CASE("a throttle refusal in the called route fails the call with RC5013") {
  rc::context ctx(rc::virtual_time);
  ctx.add(rc::craft()
              .id("limited")
              .throttle({.rate = 1, .mode = rc::throttle_mode::reject, .burst = 1})
              .from(rc::direct<int>("limited"))
              .transform([](int n) { return n + 1; }));
  ctx.start();
  CHECK(ctx.request_sync<int>(rc::direct<int>("limited"), 1) == 2);
  try {
    (void)ctx.request_sync<int>(rc::direct<int>("limited"), 1);
    FAIL("the second call within the second was admitted");
  } catch (const rc::error& e) {
    CHECK(e.code() == rc::errc::rate_limited);
    CHECK(e.details().contains("retry_after_ms"));
  }
  ctx.advance(1s);
  CHECK(ctx.request_sync<int>(rc::direct<int>("limited"), 2) == 3);
  ctx.stop();
}

TEST_CASE("a route that drops the exchange fails the call with RC5031, send included") {
  rc::context ctx(rc::virtual_time);
  ctx.add(rc::craft().id("picky").from(rc::direct<int>("picky")).filter([](int n) { return n > 0; }));
  ctx.start();
  CHECK_THROWS_MATCHES(ctx.send_sync(rc::direct<int>("picky"), -1), rc::error,
                       rc_error(rc::errc::dropped_no_reply, "dropped the exchange (filtered)"));
  CHECK_NOTHROW(ctx.send_sync(rc::direct<int>("picky"), 1));
  ctx.stop();
}

TEST_CASE("a reply of another type than requested is RC5002, a request body of another type RC5003") {
  rc::context ctx(rc::virtual_time);
  ctx.add(doubling_route());
  ctx.start();
  CHECK_THROWS_MATCHES(ctx.request_sync<std::string>(rc::direct<int>("double"), 1), rc::error,
                       rc_error(rc::errc::validation, "the reply of direct:double is not of the requested type"));
  CHECK_THROWS_MATCHES(ctx.request_sync<int>(rc::direct<std::string>("double"), "x"), rc::error,
                       rc_error(rc::errc::misconfigured, "takes another body type"));
  ctx.stop();
}

TEST_CASE("the blocking forms need a started context that is not stopped") {
  rc::context ctx(rc::virtual_time);
  ctx.add(doubling_route());
  CHECK_THROWS_MATCHES(ctx.request_sync<int>(rc::direct<int>("double"), 1), rc::error,
                       rc_error(rc::errc::invalid_dsl, "request_sync() needs a started context"));
  ctx.start();
  ctx.stop();
  CHECK_THROWS_MATCHES(ctx.send_sync(rc::direct<int>("double"), 1), rc::error,
                       rc_error(rc::errc::context_stopped, "send_sync() on a stopped context"));
}

TEST_CASE("a blocking call from inside a route is refused: co_await the call there") {
  rc::context ctx(rc::virtual_time);
  ctx.add(doubling_route());
  ctx.add(rc::craft().id("outer").from(rc::direct<int>("outer")).transform([&ctx](int n) {
    return ctx.request_sync<int>(rc::direct<int>("double"), n);
  }));
  ctx.start();
  CHECK_THROWS_MATCHES(ctx.request_sync<int>(rc::direct<int>("outer"), 1), rc::error,
                       rc_error(rc::errc::invalid_dsl, "request_sync() would block the context's own thread"));
  ctx.stop();
}

TEST_CASE("a call that can never finish in virtual time fails instead of hanging") {
  rc::context ctx(rc::virtual_time, {.shutdown_timeout = 1s});
  ctx.add(rc::craft().id("stuck").from(rc::direct<int>("stuck")).to(never_finishes()));
  ctx.start();
  CHECK_THROWS_MATCHES(ctx.send_sync(rc::direct<int>("stuck"), 1), rc::error,
                       rc_error(rc::errc::invalid_dsl, "send_sync(): the call cannot finish"));
  const rc::stop_result stopped = ctx.stop();
  CHECK(stopped.forced);
  CHECK(stopped.pending == std::vector<std::string>{"stuck"});
}

// ---- co_await forms ----------------------------------------------------------------------------

TEST_CASE("co_await ctx.request and ctx.send in application code run the route and resume with the reply") {
  rc::context ctx(rc::virtual_time);
  rc::spy<int> seen;
  ctx.add(doubling_route());
  ctx.add(rc::craft().id("sink").from(rc::direct<int>("sink")).to(seen));
  ctx.start();
  ctx.advance(0ms);  // the sources register their endpoints
  std::optional<int> reply;
  std::optional<rc::time_point> sent_at;
  rc::spawn([&]() -> rc::task<void> {
    reply = co_await ctx.request<int>(rc::direct<int>("double"), 4);
    co_await ctx.send(rc::direct<int>("sink"), *reply + 1);
    sent_at = ctx.now();
  });
  CHECK_FALSE(reply);
  ctx.advance(249ms);
  CHECK_FALSE(reply);
  ctx.advance(1ms);
  CHECK(reply == 8);
  REQUIRE(sent_at);
  CHECK(sent_at->time_since_epoch() == 250ms);
  CHECK(seen.bodies() == std::vector<int>{9});
  ctx.stop();
}

TEST_CASE("co_await ctx.request throws the route's rc::error into the caller") {
  rc::context ctx(rc::virtual_time);
  ctx.start();
  ctx.advance(0ms);
  std::optional<std::string> code;
  rc::spawn([&]() -> rc::task<void> {
    try {
      (void)co_await ctx.request<int>(rc::direct<int>("nobody"), 1);
    } catch (const rc::error& e) {
      code = e.code_string();
    }
  });
  CHECK(code == "RC5004");
  ctx.stop();
}

TEST_CASE("an error handler can call another route with co_await ctx.request") {
  rc::context ctx(rc::virtual_time);
  rc::spy<std::string> out;
  ctx.add(rc::craft().id("fallback").from(rc::direct<std::string>("fallback")).delay(10ms).transform([](std::string s) {
    return "cached " + s;
  }));
  ctx.add(rc::craft()
              .id("main")
              .error([&ctx](const rc::error&, rc::exchange& ex) -> rc::task<rc::recovery> {
                co_return co_await ctx.request<std::string>(rc::direct<std::string>("fallback"),
                                                            ex.body<std::string>());
              })
              .from(rc::direct<std::string>("main"))
              .process([](rc::exchange&) { throw std::runtime_error("primary down"); })
              .to(out));
  ctx.start();
  CHECK(ctx.request_sync<std::string>(rc::direct<std::string>("main"), "price") == "cached price");
  CHECK(ctx.now().time_since_epoch() == 10ms);
  CHECK(out.count() == 0);  // the recovery body ends the run
  ctx.stop();
}

// ---- real time ---------------------------------------------------------------------------------

TEST_CASE("real time: request_sync from main waits for the context's thread to run the route") {
  rc::context ctx;
  ctx.add(rc::craft().id("upper").from(rc::direct<std::string>("upper")).delay(5ms).transform([](std::string s) {
    for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
  }));
  ctx.add(rc::craft().id("broken").from(rc::direct<int>("broken")).process([](rc::exchange&) {
    throw std::runtime_error("boom");
  }));
  ctx.start();
  CHECK(ctx.request_sync<std::string>(rc::direct<std::string>("upper"), "hello") == "HELLO");
  CHECK_THROWS_MATCHES(ctx.send_sync(rc::direct<int>("broken"), 1), rc::error, rc_error(rc::errc::step_failed, "boom"));
  CHECK_THROWS_MATCHES(ctx.send_sync(rc::direct<int>("missing"), 1), rc::error,
                       rc_error(rc::errc::no_direct_handler, "\"missing\""));
  ctx.drain();
  CHECK_FALSE(ctx.stop().forced);
}

}  // namespace call_test
